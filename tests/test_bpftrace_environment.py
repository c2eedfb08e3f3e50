"""bpftrace runs as root: it starts with a fixed PATH and the locale, never the caller's library
or path variables, and `env` is run by absolute path (a planted `env` on PATH never runs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from aorta.ebpf import engine
from aorta.ebpf.program import Program
from aorta.ebpf.session import ENV_BINARY, SAFE_PATH, TraceSession, bpftrace_environment

PLANTED = {
    "LD_PRELOAD": "/tmp/planted/evil.so",
    "LD_LIBRARY_PATH": "/tmp/planted",
    "PATH": "/tmp/planted:/usr/bin",
    "BPFTRACE_BTF": "/tmp/planted/btf",
    "PYTHONPATH": "/tmp/planted",
    "LANG": "C.UTF-8",
}


def test_only_the_locale_and_aortas_settings_pass() -> None:
    env = bpftrace_environment({"BPFTRACE_MAP_KEYS_MAX": "4096"}, PLANTED)
    assert env == {"LANG": "C.UTF-8", "PATH": SAFE_PATH, "BPFTRACE_MAP_KEYS_MAX": "4096"}


def test_env_is_run_by_absolute_path_from_the_safe_path() -> None:
    assert os.path.isabs(ENV_BINARY) and os.access(ENV_BINARY, os.X_OK)
    assert str(Path(ENV_BINARY).parent) in SAFE_PATH.split(":")


@pytest.mark.ebpf
@pytest.mark.slow
def test_the_real_bpftrace_gets_none_of_the_planted_variables(
    ebpf_ready: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted `env` first on PATH would leave a mark; the running bpftrace's own environment
    (/proc/PID/environ) holds none of the planted variables."""
    ready = engine.check_readiness()
    mark = tmp_path / "planted-env-ran"
    planted_env = tmp_path / "env"
    planted_env.write_text(f'#!/bin/sh\ntouch {mark}\nexec /usr/bin/env "$@"\n')
    planted_env.chmod(0o755)
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value.replace("/tmp/planted", str(tmp_path)))
    session = TraceSession(
        Program(text="tracepoint:syscalls:sys_enter_getpid { @n = count(); }\n", token=1, families=[]),
        str(ready.bpftrace),
        list(ready.prefix or []),
        map_keys_max=4096,
    )
    session._spawn()
    try:
        assert session._proc is not None
        environ_file = Path(f"/proc/{session._proc.pid}/environ")
        deadline = time.monotonic() + 30
        seen: dict[str, str] = {}
        while time.monotonic() < deadline:  # until `env` has exec'd bpftrace with its variables
            raw = environ_file.read_bytes()
            seen = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
            if "BPFTRACE_MAP_KEYS_MAX" in seen:
                break
            time.sleep(0.01)
    finally:
        session.abort()
    assert seen.get("BPFTRACE_MAP_KEYS_MAX") == "4096", seen
    assert seen["PATH"] == SAFE_PATH
    assert not {"LD_PRELOAD", "LD_LIBRARY_PATH", "BPFTRACE_BTF", "PYTHONPATH"} & set(seen), seen
    assert not mark.exists(), "the planted env on PATH ran"
