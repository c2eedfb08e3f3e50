"""`ebpf-attach` without --pid: every process that maps a GPU runtime library (root only, capped).

Real processes (tests/vendor_driver.py) dlopen the real vendor libraries from the pinned test
wheels (tests/vendor_libs.py); a plain Python process maps none. Other processes on the machine
may map a runtime too, so the checks are about ours: traced (by the kernel's own pid set), with
the libraries they mapped, and the plain one never listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aorta.ebpf import runtime_procs
from conftest import REPO, run_cli_inprocess, vendor_library

DRIVER = Path(__file__).parent / "vendor_driver.py"


@pytest.fixture
def drivers():
    """One live process per real runtime (rocm: libamdhip64 + libhsa-runtime64; cudart)."""
    kids: dict[str, subprocess.Popen] = {}
    try:
        for key in ("rocm", "cudart"):
            child = subprocess.Popen(
                [sys.executable, "-I", str(DRIVER), key, str(vendor_library(key))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            kids[key] = child
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield kids
    finally:
        for child in kids.values():
            child.kill()
            child.wait()


@pytest.fixture
def plain():
    code = "import sys; sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.PIPE)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def _one_line_exit_2(proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_scan_finds_the_runtime_processes_and_applies_the_cap(drivers, plain):
    pids = sorted([*(c.pid for c in drivers.values()), plain.pid])
    scan = runtime_procs.find_runtime_processes(pids)
    by_pid = {t["pid"]: t for t in scan.traced}
    assert set(by_pid) == {c.pid for c in drivers.values()}
    names = {pid: {lib.rsplit("/", 1)[-1] for lib in t["libraries"]} for pid, t in by_pid.items()}
    assert names[drivers["rocm"].pid] >= {"libamdhip64.so", "libhsa-runtime64.so"}
    assert "libcudart.so.12" in names[drivers["cudart"].pid]
    assert scan.scanned == 3 and scan.skipped == []  # the plain process maps none: not listed
    capped = runtime_procs.find_runtime_processes(pids, cap=1)
    assert [t["pid"] for t in capped.traced] == [min(by_pid)]
    assert [s["pid"] for s in capped.skipped] == [max(by_pid)]
    assert capped.skipped[0]["reason"] == "over the cap of 1 processes per attach"


def test_none_found_exits_2(monkeypatch, plain):
    monkeypatch.setattr(runtime_procs, "all_pids", lambda: [plain.pid])
    proc = run_cli_inprocess("ebpf-attach", "--duration", "1s")
    _one_line_exit_2(proc, "no process maps a GPU runtime library", "among 1 scanned", "give --pid")


def test_not_root_exits_2(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    proc = run_cli_inprocess("ebpf-attach", "--duration", "1s")
    _one_line_exit_2(proc, "without --pid", "run it as root")


@pytest.mark.parametrize(
    "args, words",
    [
        (("--max-processes", "0"), ("--max-processes", "1..256")),
        (("--max-processes", "many"), ("--max-processes", "1..256")),
        (("--pid", "1", "--max-processes", "2"), ("bounds the scan without --pid",)),
    ],
)
def test_bad_cap_exits_2(args, words):
    _one_line_exit_2(run_cli_inprocess("ebpf-attach", *args, "--duration", "1s"), *words)


@pytest.mark.slow
@pytest.mark.ebpf
def test_attach_without_pid_traces_every_runtime_process(drivers, plain, tmp_path):
    from ebpf_support import require_ebpf

    require_ebpf()
    out = tmp_path / "attach.json"
    cli = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "aorta-hwq"), "ebpf-attach", "--duration", "3s", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    first = cli.stderr.readline()
    assert first.startswith("tracing pids "), first
    for child in drivers.values():  # calls into the real libraries inside the window
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("window\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
    stdout, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr
    data = json.loads(out.read_text())
    ours = {c.pid for c in drivers.values()}
    report = data["runtime_processes"]
    traced = {t["pid"]: t for t in report["traced"]}
    assert ours <= set(traced)
    assert plain.pid not in traced and plain.pid not in {s["pid"] for s in report["skipped"]}
    assert report["cap"] == runtime_procs.MAX_PROCESSES
    assert ours <= set(data["traced_pids"])  # the kernel-side pid set of the program
    assert data["ebpf_queue_metrics"]["error"] is None
    for pid in ours:
        assert f"  traced  {pid} " in stdout
    assert "Processes that map a GPU runtime:" in stdout
