"""kill -9 of a tracing command while bpftrace attaches its probes never leaves bpftrace running
nor a temp folder behind (the parent-death signal used to be lost during attach)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from aorta.common.procs import is_ancestor
from aorta.ebpf import session
from conftest import process_identity, still_running, wait_until

pytestmark = [pytest.mark.ebpf, pytest.mark.slow]

KILLS_PER_COMMAND = int(os.environ.get("AORTA_KILL_LOOP", "4"))


def _bpftraces() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "bpftrace":
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def _temp_folders(owners: list[int]) -> list[str]:
    """Temp folders of these owners (other users of /tmp may create their own meanwhile)."""
    return [p.name for o in owners for p in Path(tempfile.gettempdir()).glob(f"{session.TEMP_PREFIX}{o}-*")]


def _commands(tmp: Path) -> dict[str, list[str]]:
    base = [sys.executable, "-m", "aorta.hw_queue_eval"]
    return {
        "run": [
            *base,
            "run",
            "hetero_kernels",
            "--streams",
            "2",
            "-d",
            "cpu",
            "-i",
            "100000",
            "-w",
            "1",
            "--ebpf-trace",
            "-o",
            str(tmp / "r.json"),
        ],
        "sweep": [
            *base,
            "sweep",
            "hetero_kernels",
            "-s",
            "1,2",
            "-d",
            "cpu",
            "-i",
            "100000",
            "-w",
            "1",
            "--ebpf-trace",
            "-o",
            str(tmp / "s.json"),
        ],
        "ebpf-attach": [*base, "ebpf-attach", "--pid", str(os.getpid()), "--duration", "60s", "--ebpf-trace"],
    }


def _kill_during_attach(
    cmd: list[str], delay_s: float, cwd: Path
) -> tuple[tuple[int, int] | None, int | None]:
    """Start `cmd`, wait for its bpftrace, SIGKILL `cmd` `delay_s` later; (the bpftrace's
    process_identity, its owner)."""
    before = _bpftraces()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    deadline, tracer, owner = time.monotonic() + 90, None, None
    while time.monotonic() < deadline and proc.poll() is None:
        mine = [p for p in _bpftraces() - before if is_ancestor(proc.pid, p)]
        if mine:  # the environment is readable a moment after exec renamed the process
            tracer, owner = process_identity(mine[0]), session._owner_of(mine[0])
            if owner is not None:
                break
        time.sleep(0.02)
    time.sleep(delay_s)
    proc.kill()
    proc.wait(30)
    return tracer, owner


@pytest.mark.parametrize("command", ["run", "sweep", "ebpf-attach"])
def test_kill_9_during_attach_leaves_nothing(ebpf_ready: None, tmp_path: Path, command: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("the root launch path is what this checks")
    rng = random.Random(f"kill-loop-{command}")
    tracers, owners = [], []
    for _ in range(KILLS_PER_COMMAND):
        tracer, owner = _kill_during_attach(_commands(tmp_path)[command], rng.uniform(0.0, 0.8), tmp_path)
        assert tracer is not None, f"{command}: bpftrace never started"
        assert owner is not None, f"{command}: bpftrace never started"
        tracers.append(tracer)
        owners.append(owner)
        deadline = time.monotonic() + 15
        while still_running(tracer) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not still_running(tracer), f"{command}: bpftrace {tracer} outlived its killed parent"
    assert not [t for t in tracers if still_running(t)]
    assert _temp_folders(owners) == []


def test_start_kills_stale_tracers_and_folders(tmp_path: Path) -> None:
    """A tracer whose owner is gone (pid dead, or reused by a non-ancestor) is killed at the next
    start; one whose owner is its live parent is kept; folders go only when their pid is dead."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    env = os.environ.copy()
    # comm "bpftrace" comes from the executable name: copy sleep under that name
    fake = tmp_path / "bpftrace"
    fake.write_bytes(Path("/bin/sleep").read_bytes())
    fake.chmod(0o755)
    orphan = subprocess.Popen([str(fake), "60"], env={**env, session.OWNER_ENV: str(dead.pid)})
    foreign = subprocess.Popen([str(fake), "60"], env={**env, session.OWNER_ENV: "1"})
    kept = subprocess.Popen([str(fake), "60"], env={**env, session.OWNER_ENV: str(os.getpid())})
    (tmp_path / f"{session.TEMP_PREFIX}{dead.pid}-abc").mkdir()
    (tmp_path / f"{session.TEMP_PREFIX}{os.getpid()}-abc").mkdir()
    (tmp_path / f"{session.TEMP_PREFIX}99999999999999999999-x").mkdir()
    try:
        for proc in (orphan, foreign, kept):  # the sweep reads comm: wait for each exec, not a guess
            wait_until(lambda: proc.pid in _bpftraces(), f"exec of fake bpftrace {proc.pid}")  # noqa: B023
        out = session.remove_stale_sessions(str(tmp_path))
        assert set(out["killed"]) == {orphan.pid, foreign.pid}
        assert orphan.wait(5) == -signal.SIGKILL
        assert foreign.wait(5) == -signal.SIGKILL
        assert kept.poll() is None
        assert [Path(f).name for f in out["folders"]] == [f"{session.TEMP_PREFIX}{dead.pid}-abc"]
        assert (tmp_path / f"{session.TEMP_PREFIX}{os.getpid()}-abc").is_dir()
    finally:
        for p in (orphan, foreign, kept):
            if p.poll() is None:
                p.kill()
                p.wait()
