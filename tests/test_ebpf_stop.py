"""Stopping paths with a real bpftrace: Ctrl+C, SIGTERM and a hard kill of the benchmark never
leave bpftrace running nor its temp folder behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import wait_until_measuring

pytestmark = [pytest.mark.ebpf, pytest.mark.slow]


def _bpftrace_children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == pid and comm == "bpftrace":
            found.append(int(entry.name))
    return found


def _start_run() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "run",
            "hetero_kernels",
            "--streams",
            "4",
            "-d",
            "cpu",
            "-i",
            "100000",
            "-w",
            "1",
            "--ebpf-trace",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = _bpftrace_children(proc.pid)
        if kids:  # past the handshake (queue threads idle until then), inside the window
            wait_until_measuring(proc)
            return proc, kids[0]
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"bpftrace never started: {proc.communicate()[1][-500:]}")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat[stat.rindex(")") + 2] == "Z":  # exited, waiting to be reaped
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_bpftrace(ebpf_ready: None, sig: signal.Signals) -> None:
    proc, bpf = _start_run()
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode in (130, 143), proc.returncode
    assert _gone(bpf, 10), "bpftrace outlived the benchmark"
    # this test's own TMPDIR (conftest): no session folder of any pid may remain in it
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_hard_kill_does_not_orphan_bpftrace(ebpf_ready: None) -> None:
    if os.geteuid() != 0:
        pytest.skip("pdeathsig guard applies to root launches")
    proc, bpf = _start_run()
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(bpf, 10), "bpftrace orphaned after SIGKILL of the benchmark"
