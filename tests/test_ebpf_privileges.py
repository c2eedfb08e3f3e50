"""Privilege paths without needing a non-root user: sudo -n must fail fast, never prompt."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from aorta.ebpf import session


def _fake_sudo(folder: Path, body: str) -> None:
    sudo = folder / "sudo"
    sudo.write_text(f"#!/bin/sh\n{body}\n")
    sudo.chmod(0o755)


@pytest.fixture
def not_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(session.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return tmp_path


def test_no_sudo_says_so(not_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(not_root))
    prefix, why = session.launcher()
    assert prefix is None and "sudo not installed" in why and "run with sudo" in why


def test_sudo_needing_a_password_fails_fast(not_root: Path) -> None:
    # a real sudo -n exits 1 at once; a prompt would block on stdin, which is /dev/null here
    _fake_sudo(not_root, 'echo "sudo: a password is required" >&2; read x; exit 1')
    t0 = time.monotonic()
    prefix, why = session.launcher()
    assert prefix is None and "needs a password" in why
    assert time.monotonic() - t0 < 5


def test_sudo_n_that_works_is_used(not_root: Path) -> None:
    _fake_sudo(not_root, '[ "$1" = "-n" ] || exit 3; shift; exec "$@"')
    prefix, why = session.launcher()
    assert prefix is not None and prefix[-1] == "-n" and why == "sudo -n"


def test_root_uses_pdeathsig_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session.os, "geteuid", lambda: 0)
    prefix, why = session.launcher()
    assert why == "root"
    if session.shutil.which("setpriv"):
        assert prefix[1:] == ["--pdeathsig", "TERM"]


def test_readiness_reports_missing_bpftrace(monkeypatch: pytest.MonkeyPatch) -> None:
    from aorta.ebpf.engine import check_readiness

    monkeypatch.setenv("BPFTRACE", "/nonexistent/bpftrace")
    ready = check_readiness(mount_tracefs=False)
    assert not ready.ok and "bpftrace not found" in (ready.reason or "")
    assert os.environ["BPFTRACE"] == "/nonexistent/bpftrace"
