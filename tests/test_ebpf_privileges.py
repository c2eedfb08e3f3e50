"""Privilege paths without needing a non-root user: sudo -n must fail fast, never prompt."""

from __future__ import annotations

import subprocess
import sys
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
    assert prefix is None
    assert "sudo not installed" in why
    assert "run with sudo" in why


def test_sudo_needing_a_password_fails_fast(not_root: Path) -> None:
    # a real sudo -n exits 1 at once; a prompt would block on stdin, which is /dev/null here
    _fake_sudo(not_root, 'echo "sudo: a password is required" >&2; read x; exit 1')
    t0 = time.monotonic()
    prefix, why = session.launcher()
    assert prefix is None
    assert "needs a password" in why
    assert time.monotonic() - t0 < 5


def test_sudo_n_that_works_is_used(not_root: Path) -> None:
    _fake_sudo(not_root, '[ "$1" = "-n" ] || exit 3; shift; exec "$@"')
    prefix, why = session.launcher()
    assert prefix is not None
    assert prefix[-1] == "-n"
    assert why == "sudo -n"


def test_root_launches_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root no wrapper: the parent-death guard is set in the child itself (die_with_parent)."""
    monkeypatch.setattr(session.os, "geteuid", lambda: 0)
    prefix, why = session.launcher()
    assert why == "root"
    assert prefix == []


def test_die_with_parent_kills_the_child_of_a_killed_parent() -> None:
    """A middle process starts `sleep` with the guard and is SIGKILLed: the sleep dies too."""
    code = (
        "import subprocess, sys, time; from aorta.common.procs import die_with_parent; "
        "p = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent()); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    middle = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    child = int(middle.stdout.readline())
    middle.kill()
    middle.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child outlived its SIGKILLed parent")


def test_readiness_reports_missing_bpftrace(monkeypatch: pytest.MonkeyPatch) -> None:
    from aorta.ebpf.engine import check_readiness
    from ebpf_support import path_without_bpftrace

    monkeypatch.setenv("PATH", path_without_bpftrace())
    ready = check_readiness(mount_tracefs=False)
    assert not ready.ok
    assert "bpftrace not found" in (ready.reason or "")
