"""Runtimes mapped after attach: when the kernel saw them mapped, from when their calls counted,
and what was not counted in between (docs/ebpf.md, "Late-loaded runtimes").

Ground truths: the traced process's own CLOCK_MONOTONIC timestamps (bpftrace's `nsecs` clock)
around its dlopen and around every call it makes, and the uprobe's breakpoint byte in its copy of
the function (tests/late_load_child.py); hand-made mapping records for the pure report.
"""

from __future__ import annotations

import _ctypes
import ctypes
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import late_report as lr
from aorta.ebpf.probes import gpu_runtime_loads as loads
from aorta.ebpf.probes.base import BpftraceDialect, RenderContext, TraceTarget
from aorta.ebpf.tracefs import Tracefs
from conftest import unavailable, vendor_library, wait_until
from gpu_standins import LAUNCH_ARGTYPES, Dim3, build, gcc
from late_load_child import HANDLES

CHILD = Path(__file__).parent / "late_load_child.py"
MS = 1_000_000

# the two formats as linux 6.18 (this VM) prints them; the fields are the same since 4.x
MMAP_FORMATS = {
    "sys_enter_mmap": (
        "name: sys_enter_mmap\nID: 174\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n"
        "\tfield:unsigned long addr;\toffset:16;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long len;\toffset:24;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long prot;\toffset:32;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long flags;\toffset:40;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long fd;\toffset:48;\tsize:8;\tsigned:0;\n"
        '\tfield:unsigned long off;\toffset:56;\tsize:8;\tsigned:0;\n\nprint fmt: ""\n'
    ),
    "sys_exit_mmap": (
        "name: sys_exit_mmap\nID: 173\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n"
        '\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n\nprint fmt: ""\n'
    ),
}


def _tracefs(root: Path, events: dict[str, str]) -> Tracefs:
    for name, text in events.items():
        folder = root / "events" / "syscalls" / name
        folder.mkdir(parents=True)
        (folder / "format").write_text(text)
    return Tracefs(root)


def _ctx(tracefs: Tracefs, pids: tuple[int, ...]) -> RenderContext:
    return RenderContext(tracefs, BpftraceDialect((0, 17, 0)), TraceTarget(pids), "@aorta_pids[pid]", "1")


# -- no eBPF needed ---------------------------------------------------------------------------------
def test_mapping_probes_record_numbers_of_traced_processes_only(tmp_path: Path) -> None:
    """Two blocks: PROT_EXEC file mappings (not anonymous) of traced pids; no string is read in
    BPF; nothing without traced pids or without the tracepoints, with the reason."""
    tracefs = _tracefs(tmp_path / "t", MMAP_FORMATS)
    probes = loads.render(_ctx(tracefs, (4242,)))
    assert probes.reason is None
    enter, leave = probes.blocks
    assert enter.startswith("tracepoint:syscalls:sys_enter_mmap\n/@aorta_pids[pid] && (args->prot & 0x4)")
    assert "!(args->flags & 0x20)" in enter
    assert leave.startswith("tracepoint:syscalls:sys_exit_mmap\n/@gpu_runtime_xmap_len[tid]/")
    assert f"@gpu_runtime_xmaps_n < {loads.MAX_RECORDS}" in leave
    assert "str(" not in enter + leave
    assert "no traced processes" in str(loads.render(_ctx(tracefs, ())).reason)
    bare = _tracefs(tmp_path / "bare", {"sys_enter_mmap": MMAP_FORMATS["sys_enter_mmap"]})
    assert loads.render(_ctx(bare, (4242,))).blocks == ()
    assert "missing on this kernel" in str(loads.render(_ctx(bare, (4242,))).reason)


def test_mapping_records_are_read_back_and_matched_by_address() -> None:
    maps = {
        "@gpu_runtime_xmaps": {
            "7,139672848171008,2843008": 300,  # 0x7f081e800000, as bpftrace prints it
            "7,4096,8192": 100,
            "8,139672848171008,2843008": 50,  # another process, same address
            "7,139672848171008,4096": 400,  # the same start remapped later, shorter
        },
        "@gpu_runtime_xmaps_over": 3,
    }
    found = loads.records(maps)
    assert [r.ns for r in found] == [50, 100, 300, 400]
    assert loads.dropped(maps) == 3 and loads.dropped({}) == 0
    start = 0x7F081E800000
    assert loads.mapped_at(found, 7, start + 0x1000) == loads.ExecMapping(7, start, 2843008, 300)
    assert loads.mapped_at(found, 7, start) == loads.ExecMapping(7, start, 4096, 400)  # the latest
    assert loads.mapped_at(found, 9, start) is None


WINDOW = lr.Window(start_ns=1_000 * MS, stop_ns=11_000 * MS)
START = 0x7F0000000000


def _lib(**kw: Any) -> lr.LateLibrary:
    base: dict[str, Any] = {
        "path": "/x/libcudart.so.12",
        "kind": "cudart",
        "starts": ((7, START),),
        "found_ns": 5_010 * MS,
        "live_ns": 6_200 * MS,
        "counted_from_ns": 6_200 * MS + 400_000,
    }
    return lr.LateLibrary(**{**base, **kw})


def test_late_row_times_the_gap_from_the_kernel_record() -> None:
    """Mapped 4000 ms into the window (the record covering the executable segment's start, made
    before the re-scan found it), live 1200 ms later, counted 0.4 ms after that."""
    found = [
        loads.ExecMapping(7, START - 0x1000, 0x1000, 4_000 * MS),  # a neighbour, not covering
        loads.ExecMapping(7, START, 0x2B6180, 5_000 * MS),
        loads.ExecMapping(8, START, 0x2B6180, 4_500 * MS),  # another process: not this library
        loads.ExecMapping(7, START, 0x2B6180, 5_020 * MS),  # after the re-scan: a later load
    ]
    row = lr.library_row(_lib(), found, WINDOW, None, 0)
    assert row["mapped_monotonic_ns"] == 5_000 * MS and row["mapped_pid"] == 7
    assert row["mapped_at_ms"] == 4_000.0
    assert row["found_at_ms"] == 4_010.0
    assert row["probes_live_at_ms"] == 5_200.0 and row["map_to_live_ms"] == 1_200.0
    assert row["counted_from_ms"] == 5_200.4 and row["not_counted_ms"] == 1_200.4
    assert row["calls_not_counted"] is None  # nothing could count them: never 0
    assert (
        "calls in the first 1200.4 ms after the runtime was mapped were not counted"
        in (row["calls_not_counted_reason"])
    )


def test_late_row_says_why_a_time_or_a_count_is_not_known() -> None:
    live_early = _lib(live_ns=500 * MS, counted_from_ns=WINDOW.start_ns, found_ns=400 * MS)
    row = lr.library_row(live_early, [loads.ExecMapping(7, START, 4096, 300 * MS)], WINDOW, None, 0)
    assert row["mapped_at_ms"] == -700.0 and row["not_counted_ms"] == 0
    assert row["calls_not_counted"] == 0  # live before the window opened: every call counted
    unprobed = _lib(live_ns=None, counted_from_ns=None, reason="at most 4 late programs: not probed")
    row = lr.library_row(unprobed, [loads.ExecMapping(7, START, 4096, 5_000 * MS)], WINDOW, None, 0)
    assert not row["probed"] and row["not_probed_reason"] == "at most 4 late programs: not probed"
    assert row["not_counted_ms"] == 6_000.0 and row["calls_not_counted"] is None  # up to the stop
    assert "not probed: calls in the last 6000.0 ms" in row["calls_not_counted_reason"]
    row = lr.library_row(_lib(), [], WINDOW, None, 2)
    assert row["mapped_monotonic_ns"] is None and row["map_to_live_ms"] is None
    assert row["not_counted_ms"] is None and row["calls_not_counted"] is None
    assert "2 later ones were not" in row["mapped_reason"]
    assert (
        "mapped before the mmap probes were live"
        in lr.library_row(_lib(), [], WINDOW, None, 0)["mapped_reason"]
    )
    assert "not recorded: no traced" in lr.library_row(_lib(), [], WINDOW, "no traced", 0)["mapped_reason"]


# -- real eBPF --------------------------------------------------------------------------------------
def _late_child(lib: Path, delay_s: float, call_s: float) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-I", str(CHILD), str(lib), str(delay_s), str(call_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def _attach_late(lib: Path, out: Path, delay_s: float, call_s: float, duration: str) -> tuple[Any, Any, str]:
    """ebpf-attach a child that dlopens `lib` `delay_s` into the window: the result, the child's
    own timings, the console output."""
    from ebpf_support import start_attach

    child = _late_child(lib, delay_s, call_s)
    try:
        attach = start_attach(child.pid, "-o", str(out), duration=duration)
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        timed = json.loads(child.stdout.readline())
        stdout, stderr = attach.communicate(timeout=180)
        assert attach.returncode == 0, stderr
    finally:
        child.kill()
        child.wait()
    return json.loads(out.read_text()), timed, stdout


def _row(metrics: Any, lib: Path) -> Any:
    rows = [r for r in metrics["late_runtimes"]["libraries"] if r["library"] == str(lib)]
    assert len(rows) == 1, metrics["late_runtimes"]
    return rows[0]


def _check_counted_from_the_gate(row: Any, calls: list[list[int]], counts: dict[str, int]) -> None:
    """Every call that began after the late gate opened (kernel time G) is counted, per stream;
    every call that ended before it is not; the one in flight at G (at most one) went one way or
    the other, and its stream's count says which. Calls made after the mapping and before G exist,
    and the report says they were not counted, over the span it gives."""
    gate = row["counted_from_monotonic_ns"]
    after = [c for c in calls if c[0] >= gate]
    before = [c for c in calls if c[1] < gate]
    straddle = [c for c in calls if c[0] < gate <= c[1]]
    assert len(straddle) <= 1 and after and before, (len(after), len(before), len(straddle))
    for handle in {c[2] for c in calls}:
        extra = counts.get(hex(handle), 0) - sum(1 for c in after if c[2] == handle)
        assert extra in ((0, 1) if any(c[2] == handle for c in straddle) else (0,)), (hex(handle), extra)
    assert all(row["mapped_monotonic_ns"] < c[0] for c in before)  # the uncounted: inside the gap
    assert row["not_counted_ms"] == round((gate - row["mapped_monotonic_ns"]) / MS, 3)
    assert row["calls_not_counted"] is None
    assert f"calls in the first {row['not_counted_ms']:.1f} ms" in row["calls_not_counted_reason"]
    # its uprobes were in place when it says they were live (the process saw the breakpoint)
    assert all(c[3] for c in calls if c[0] >= row["probes_live_monotonic_ns"])
    assert row["probes_live_monotonic_ns"] <= gate


@pytest.mark.slow
@pytest.mark.ebpf
def test_ebpf_attach_times_a_real_libcudart_dlopened_after_attach(tmp_path: Path) -> None:
    """NVIDIA's libcudart dlopened 4 s into a 10 s attach, called from the moment dlopen returns:
    the kernel's mapping time lies inside the child's own dlopen, every call from the late gate on
    is counted exactly per stream, the ones before are the reported gap's."""
    from ebpf_support import require_ebpf

    require_ebpf()
    lib = vendor_library("cudart")
    data, timed, console = _attach_late(lib, tmp_path / "late.json", 4.0, 4.0, "10s")
    family = data["ebpf_queue_metrics"]["families"]["gpu_runtime"]
    metrics = family["metrics"]
    row = _row(metrics, lib)
    assert data["late_runtimes"] == metrics["late_runtimes"]
    assert row["probed"] and row["mapped_pid"] in row["pids"]
    dlopen_start, dlopen_end = timed["dlopen"]
    assert dlopen_start <= row["mapped_monotonic_ns"] <= dlopen_end
    window_start = data["ebpf_queue_metrics"]["window"]["start_monotonic_ns"]
    assert row["mapped_at_ms"] == round((row["mapped_monotonic_ns"] - window_start) / MS, 3)
    assert 3_000 < row["mapped_at_ms"] < 6_000
    calls = timed["calls"]
    assert calls[-1][1] < data["ebpf_queue_metrics"]["window"]["stop_monotonic_ns"]  # all inside
    counts = {r["handle"]: r["by_api"].get("cudaLaunchKernel", 0) for r in metrics["streams"]}
    assert set(counts) == {hex(h) for h in HANDLES}
    _check_counted_from_the_gate(row, calls, counts)
    assert "uprobe:*" not in family["events_missing"]
    attached = {a["api"]: a for a in metrics["probes"]["attached"]}
    assert attached["cudaLaunchKernel"]["probed_path"] == str(lib)
    assert (
        attached["cudaLaunchKernel"]["late_attach_s"]
        == metrics["late_runtimes"]["programs"][0]["probes_live_after_s"]
    )
    assert "runtimes loaded later" in metrics["probe_cost"]["reason"]  # costs are timed at the start
    assert f"late runtime {lib.name}: mapped at {row['mapped_at_ms']:.1f} ms" in console


@pytest.fixture(scope="module")
def standin_cudart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gcc-built stand-in libcudart (tests/gpu_standins)."""
    if gcc() is None:
        unavailable("gcc not installed: cannot build the stand-in GPU runtimes", "gcc is required in CI")
    return build(tmp_path_factory.mktemp("standins"))["libcudart.so.12"]


@pytest.mark.slow
@pytest.mark.ebpf
def test_ebpf_attach_lists_a_runtime_mapped_in_its_last_second_as_not_probed(
    standin_cudart: Path, tmp_path: Path
) -> None:
    """Mapped when no program can be live before the window ends: listed with its kernel mapping
    time and the reason, never dropped; its calls till the end are said to be uncounted."""
    from ebpf_support import require_ebpf

    require_ebpf()
    data, timed, console = _attach_late(standin_cudart, tmp_path / "end.json", 2.4, 0.0, "3s")
    family = data["ebpf_queue_metrics"]["families"]["gpu_runtime"]
    row = _row(family["metrics"], standin_cudart)
    assert not row["probed"]
    assert (
        row["not_probed_reason"]
        == "mapped in the last second of the attach (after the last re-scan): not probed"
    )
    assert timed["dlopen"][0] <= row["mapped_monotonic_ns"] <= timed["dlopen"][1]
    stop = data["ebpf_queue_metrics"]["window"]["stop_monotonic_ns"]
    assert row["not_counted_ms"] == round((stop - row["mapped_monotonic_ns"]) / MS, 3)
    assert row["calls_not_counted"] is None
    assert family["events_missing"][f"uprobe:{standin_cudart}"].startswith("mapped after attach; mapped in")
    assert f"late runtime {standin_cudart.name}: mapped at" in console
    assert data["late_runtimes"]["programs"] == []


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.standin_configure.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
    lib.standin_configure(0, 0, 0)
    lib.cudaLaunchKernel.argtypes = LAUNCH_ARGTYPES
    return lib


def _trapped(lib: ctypes.CDLL) -> bool:
    """Whether the uprobe's breakpoint is in this process's copy of cudaLaunchKernel."""
    address = ctypes.cast(lib.cudaLaunchKernel, ctypes.c_void_p).value or 0
    return ctypes.c_ubyte.from_address(address).value == 0xCC


@pytest.mark.slow
@pytest.mark.ebpf
def test_run_tracer_probes_runtimes_the_measured_process_maps_after_it_attached(
    standin_cudart: Path, tmp_path: Path
) -> None:
    """`run --ebpf-gpu-runtime`'s tracer in this process: a runtime mapped during warm-up (after
    the tracer attached) is probed before the window and all its window calls count; one mapped
    inside the window counts from its late gate on, the calls before are the reported gap's."""
    from aorta.hw_queue_eval.tracing.window_context import WindowContext
    from aorta.hw_queue_eval.tracing.window_tracer import EbpfTracer
    from ebpf_support import FakeGpuBackend, require_ebpf

    require_ebpf()
    early, late = tmp_path / "early" / standin_cudart.name, tmp_path / "late" / standin_cudart.name
    for copy in (early, late):  # files of their own: not mapped by this process before
        copy.parent.mkdir()
        shutil.copy(standin_cudart, copy)
    backend = FakeGpuBackend([])
    tracer = EbpfTracer(False, False, gpu_runtime=True)
    tracer.prepare(backend, None)
    assert tracer.session is not None, tracer.error
    one = Dim3(1, 1, 1)
    loaded: list[ctypes.CDLL] = []
    calls: list[list[int]] = []
    try:
        loaded.append(_load(early))  # "warm-up": torch initialising CUDA lazily
        watch = tracer.late
        assert watch is not None
        wait_until(lambda: str(early) in watch.late.probed_paths(), "the early runtime's late program", 60)
        assert _trapped(loaded[0])
        tracer.window_start()
        for _ in range(10):
            loaded[0].cudaLaunchKernel(None, one, one, None, 0, 0x7300000)
        time.sleep(0.2)
        dlopen_start = time.monotonic_ns()
        loaded.append(_load(late))
        dlopen_end = time.monotonic_ns()
        # called from the moment dlopen returned until half a second after its breakpoint showed
        deadline, trapped_at = time.monotonic_ns() + 60_000 * MS, None
        while time.monotonic_ns() < deadline and (trapped_at is None or calls[-1][0] < trapped_at + 500 * MS):
            trap = _trapped(loaded[1])
            handle = HANDLES[len(calls) % 2]
            start = time.monotonic_ns()
            loaded[1].cudaLaunchKernel(None, one, one, None, 0, handle)
            calls.append([start, time.monotonic_ns(), handle, trap])
            trapped_at = start if trap and trapped_at is None else trapped_at
            time.sleep(0.0005)
        tracer.window_stop()
        sections = tracer.finish(WindowContext(backend=backend, stream_count=0))  # type: ignore[arg-type]
    except BaseException:
        tracer.abort()
        raise
    finally:
        for lib in loaded:  # unmapped again: later tests render this process's runtimes
            _ctypes.dlclose(lib._handle)  # type: ignore[attr-defined]
    section = sections.ebpf_queue_metrics
    assert section["status"] == "ok", section.get("error")
    metrics = section["families"]["gpu_runtime"]["metrics"]
    first, second = _row(metrics, early), _row(metrics, late)
    # live before the window: its gate opened right after the main one (two marker syscalls), so
    # only that instant went uncounted, and the report says so instead of claiming every call
    assert first["probed"] and first["mapped_at_ms"] < 0 and first["probes_live_at_ms"] < 0
    assert first["not_counted_ms"] == first["counted_from_ms"] < 50
    assert "after the window opened were not counted" in first["calls_not_counted_reason"]
    counts = {r["handle"]: r["by_api"].get("cudaLaunchKernel", 0) for r in metrics["streams"]}
    assert counts["0x7300000"] == 10
    assert second["probed"] and dlopen_start <= second["mapped_monotonic_ns"] <= dlopen_end
    _check_counted_from_the_gate(second, calls, counts)
