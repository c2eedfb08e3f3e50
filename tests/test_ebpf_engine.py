"""The engine against the real kernel: handshake, window gate, counts, stop, abort, end-to-end run."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import engine
from aorta.ebpf.probes.base import (
    CollectContext,
    FamilyResult,
    ProbeCode,
    ProbeFamily,
    RenderContext,
    TraceTarget,
)
from aorta.ebpf.probes.cpu_sched import CpuSchedFamily
from ebpf_support import GetppidFamily, path_without_bpftrace, start_attach

pytestmark = pytest.mark.ebpf


class FenceCount(ProbeFamily):
    """Test family: counts dma_fence_signaled in the window (a real tracepoint without a GPU)."""

    name = "t_fence"
    section = "queue"
    description = "test"

    def wanted_events(self) -> list[str]:
        return ["dma_fence:dma_fence_signaled"]

    def render(self, ctx: RenderContext) -> ProbeCode:
        a = ctx.dialect.arg
        return ProbeCode(
            probes=[
                f"tracepoint:dma_fence:dma_fence_signaled\n/{ctx.gate}/\n{{\n"
                f"  @t_fence_n[str({a('driver')})] = count();\n}}"
            ],
            used_events=["dma_fence:dma_fence_signaled"],
        )

    def collect(self, maps: dict[str, Any], context: CollectContext) -> FamilyResult:
        return FamilyResult(self.name, self.section, dict(maps), {})


def _session(families: list[ProbeFamily], target: TraceTarget):
    ready = engine.check_readiness()
    program = engine.make_program(True, False, target, ready.tracefs, ready.version, families=families)
    return program, engine.start_session(program, ready)


class DoorbellWorker:
    """A thread that blocks on its own eventfd, like a CPU-backend queue; `ring` waits until done."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_CLOEXEC)
        self.done = threading.Semaphore(0)
        self.tid = 0
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        self._started.set()
        while os.eventfd_read(self.fd) != 2:  # 2 = stop
            self.done.release()

    def ring(self, times: int) -> None:
        for _ in range(times):
            os.eventfd_write(self.fd, 1)
            self.done.acquire()

    def close(self) -> None:
        os.eventfd_write(self.fd, 2)
        self._thread.join(5)
        os.close(self.fd)


@pytest.mark.slow
def test_gate_counts_exactly_the_window(ebpf_ready: None) -> None:
    family = CpuSchedFamily()
    worker = DoorbellWorker()
    pid = os.getpid()
    target = TraceTarget(
        (pid,), thread_labels={worker.tid: "q0"}, doorbells=((pid, worker.fd, worker.tid, 0),)
    )
    _, session = _session([family, FenceCount(), GetppidFamily("t_ppid", "@t_ppid_n = count();")], target)
    try:
        worker.ring(40)
        for _ in range(40):
            os.getppid()
        session.window_start()
        for _ in range(100):
            os.getppid()
        worker.ring(100)
        session.window_stop()
        for _ in range(40):
            os.getppid()
        worker.ring(40)
    except BaseException:
        session.abort()
        raise
    finally:
        worker.close()
    out = session.stop()
    assert out.exit_code == 0, out.stderr
    assert out.lost_events == 0, out.stderr
    assert out.maps["@t_ppid_n"] == 100  # exactly the window: 40 before and 40 after not counted
    assert "@t_fence_n" not in out.maps or isinstance(out.maps["@t_fence_n"], dict)
    # exactly the 100 doorbells of the window, each consumed by the worker once
    assert out.maps["@cpu_sched_seq"] == {"0": 100}
    assert out.maps["@cpu_sched_s2d_s"]["0"]["count"] == 100
    assert "@cpu_sched_unconsumed" not in out.maps
    assert out.maps["@aorta_window_stop_ns"] > out.maps["@aorta_window_start_ns"]
    assert out.attach_s is not None
    assert out.attach_s < 10


@pytest.mark.slow
def test_abort_leaves_no_process_and_no_temp_file(ebpf_ready: None) -> None:
    _, session = _session([CpuSchedFamily()], TraceTarget((os.getpid(),)))
    proc = session._proc
    assert session._tmpdir is None  # removed as soon as bpftrace loaded it
    session.abort()
    assert proc is not None
    assert proc.poll() is not None


@pytest.mark.slow
def test_run_ebpf_trace_end_to_end(ebpf_ready: None, cli, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli(
        "run",
        "hetero_kernels",
        "--streams",
        "8",
        "-i",
        "10",
        "-w",
        "2",
        "-d",
        "cpu",
        "--ebpf-trace",
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "eBPF DRIVER-LEVEL QUEUE METRICS" in proc.stdout
    assert "eBPF vs HARNESS COMPARISON (CPU queue hand-offs)" in proc.stdout
    import json

    data = json.loads(out.read_text())
    from aorta.hw_queue_eval.results.run_result import validate_run_dict

    assert validate_run_dict(data) == []
    from factories import schema_problem

    assert schema_problem(data) is None  # the published schema, eBPF sections included
    from aorta.hw_queue_eval.results.models import QUEUE_SUMMARY_KEYS

    q = data["ebpf_queue_metrics"]
    assert set(QUEUE_SUMMARY_KEYS) <= set(q)
    assert q["status"] == "ok"
    assert q["lost_events"] == 0
    assert q["source"] == "cpu_sched"
    workers = {w["tid"]: w["queue"] for w in data["metadata"]["workers"]}
    rows = {r["tid"]: r for r in q["families"]["cpu_sched"]["metrics"]["threads"] if r["queue"] is not None}
    assert set(rows) == set(workers)
    for tid, row in rows.items():
        assert row["queue"] == workers[tid]
        assert row["on_cpu_ms"] > 0
    assert q["hw_rings_used"] == sorted(set(workers.values()))
    assert not any(r["comm"] == "bpftrace" for r in q["families"]["cpu_sched"]["metrics"]["threads"])
    # the kernel's doorbell count is the harness's own count of hand-offs, queue by queue
    handoffs = data["ops"]["handoffs"]
    assert q["total_submissions"] == handoffs["count"] == q["total_dispatches"]
    assert q["submissions_per_queue"] == handoffs["per_queue"]
    assert q["total_submissions"] == sum(r["submissions"] for r in rows.values())
    assert q["unconsumed_doorbells"] == 0
    host = [r for r in q["families"]["cpu_sched"]["metrics"]["threads"] if r["submitter"]]
    assert len(host) == 1
    assert host[0]["queue"] is None
    cmp = data["ebpf_vs_cuda_comparison"]
    assert cmp["status"] == "ok"
    assert cmp["harness_submissions"] == handoffs["count"]
    assert cmp["kernel_submissions"] == handoffs["count"]
    assert cmp["submissions_equal"] is True
    assert cmp["matched_submissions"] == cmp["compared"] == handoffs["count"]
    assert cmp["coverage_pct"] == 100.0
    assert cmp["lost_events"] == 0
    # the kernel's wait is part of the harness's delay for the same submissions
    assert cmp["kernel_submit_to_dispatch_ms"] <= cmp["harness_submit_to_start_ms"]
    assert abs(cmp["kernel_submit_to_dispatch_ms"] - q["submit_to_dispatch_avg_us"] / 1e3) < 1e-9
    assert cmp["accuracy_pct"] == cmp["coverage_pct"]  # the guide's name: a legacy alias
    assert cmp["timing_inconsistent"] == 0  # every kernel dispatch precedes the harness's start
    n = handoffs["count"]
    assert f"Coverage:             {n} of {n} harness submissions matched" in proc.stdout
    assert f"Timing check:         {n} of {n} matched" in proc.stdout
    assert q["window"]["duration_ms"] > 0


@pytest.mark.slow
def test_run_without_bpftrace_says_why(cli, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli(
        "run",
        "tiny_kernel_stress",
        "--streams",
        "2",
        "-i",
        "2",
        "-w",
        "1",
        "-d",
        "cpu",
        "--ebpf-trace",
        "-o",
        str(out),
        env={"PATH": path_without_bpftrace()},
    )
    assert proc.returncode == 0, proc.stderr
    assert "eBPF tracing is off" in proc.stderr
    import json

    data = json.loads(out.read_text())
    assert data["ebpf_queue_metrics"]["status"] == "unavailable"
    assert "bpftrace not found" in data["ebpf_queue_metrics"]["error"]
    assert data["ebpf_vs_cuda_comparison"]["status"] == "unavailable"
    assert any("tracing unavailable" in w for w in data["warnings"])


@pytest.mark.slow
def test_ebpf_attach_follows_threads_and_children(ebpf_ready: None, tmp_path: Path) -> None:
    """A child started once tracing is live (the "tracing pid" line) is followed; the attach ends
    when the traced process does, well before its --duration bound."""
    import subprocess
    import sys

    code = (
        "import subprocess, sys\n"
        "sys.stdin.readline()\n"  # the test's go: tracing is live
        "c = subprocess.Popen([sys.executable, '-c', 'import time\\nfor _ in range(300): "
        "time.sleep(0.002)'])\n"
        "c.wait()\n"
    )
    target = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, text=True)
    try:
        out = tmp_path / "a.json"
        attach = start_attach(target.pid, "-o", str(out))
        assert target.stdin is not None
        target.stdin.write("go\n")
        target.stdin.close()
        _out, err = attach.communicate(timeout=120)
        assert attach.returncode == 0, err
        import json

        data = json.loads(out.read_text())
        assert target.pid in data["traced_pids"]
        assert len(data["traced_pids"]) >= 2
        threads = data["ebpf_queue_metrics"]["families"]["cpu_sched"]["metrics"]["threads"]
        assert max(t["switches"] or 0 for t in threads) >= 100  # the child's 300 sleeps
    finally:
        target.kill()
        target.wait()


ATTACH_TARGET = """
import json, os, sys, time
from aorta.hw_queue_eval.backends.cpu import CpuBackend
backend = CpuBackend(4, pool_size=2)
streams = backend.streams
backend.synchronize()
print(json.dumps({"workers": {w.tid: w.queue for w in backend.workers()}}), flush=True)
sys.stdin.readline()  # the test's go: the attach window is open
backend.start_window()
for i in range(HANDOFFS):
    streams[i % len(streams)].launch(lambda: None, "noop")
    backend.synchronize()
backend.stop_window()
totals = backend.handoff_totals()
print(json.dumps({"per_queue": totals.per_queue, "exit_ns": time.monotonic_ns()}), flush=True)
os._exit(0)
"""


@pytest.mark.slow
def test_ebpf_attach_counts_a_live_cpu_runs_doorbells(ebpf_ready: None, tmp_path: Path) -> None:
    """ebpf-attach --pid on a live CPU-backend process: its queue workers are found as queues (not
    "(qN)" helpers with 0 doorbells), each queue's doorbell count equals the target's own count of
    hand-offs (its backend counts every ring), and the window ends when the target exits: duration_s
    is the traced window, not the requested 120 s."""
    import json
    import subprocess
    import sys

    handoffs = 200
    code = ATTACH_TARGET.replace("HANDOFFS", str(handoffs))
    target = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert target.stdout is not None and target.stdin is not None
        workers = {int(t): q for t, q in json.loads(target.stdout.readline())["workers"].items()}
        out = tmp_path / "a.json"
        attach = start_attach(target.pid, "-o", str(out))
        target.stdin.write("go\n")
        target.stdin.flush()
        own = json.loads(target.stdout.readline())
        _out, err = attach.communicate(timeout=120)
        assert attach.returncode == 0, err
        data = json.loads(out.read_text())
    finally:
        target.kill()
        target.wait()
    q = data["ebpf_queue_metrics"]
    rows = {r["tid"]: r for r in q["families"]["cpu_sched"]["metrics"]["threads"]}
    for tid, queue in workers.items():
        assert rows[tid]["queue"] == queue and rows[tid]["helper_of_queue"] is None
        assert rows[tid]["submissions"] == own["per_queue"][str(queue)] > 0
    assert q["source"] == "cpu_sched"
    assert q["submissions_per_queue"] == own["per_queue"]
    assert q["total_submissions"] == q["total_dispatches"] == sum(own["per_queue"].values())
    assert sum(own["per_queue"].values()) >= handoffs  # each hand-off to an idle queue rings once
    # the window ended at the target's exit, and duration_s says so
    assert data["process_exited_early"] is True
    assert data["requested_duration_s"] == 120.0
    window = q["window"]
    assert data["duration_s"] == pytest.approx(window["duration_ms"] / 1e3)
    assert data["duration_s"] < 60
    assert 0 <= window["stop_monotonic_ns"] - own["exit_ns"] < 0.5e9
    assert data["doorbells"]["complete"], data["doorbells"]
    assert {w["tid"]: w["queue"] for w in data["doorbells"]["found"]} == workers


@pytest.mark.slow
def test_probes_attach_in_declaration_order(ebpf_ready: None, tmp_path: Path) -> None:
    """The handshake relies on it: the last PING probe is attached after every family probe."""
    import subprocess

    ready = engine.check_readiness()
    program = engine.make_program(
        True,
        False,
        TraceTarget((os.getpid(),)),
        ready.tracefs,
        ready.version,
        families=[CpuSchedFamily(), FenceCount()],
    )
    script = tmp_path / "p.bt"
    script.write_text(program.text)
    from ebpf_support import VerboseAttach

    proc = subprocess.Popen(
        [ready.bpftrace or "bpftrace", "-v", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    reader = VerboseAttach(proc)
    reader.wait_attached(program.text)
    out = "".join(reader.stop())
    attached = [line.split()[1] for line in out.splitlines() if line.startswith("Attaching tracepoint")]
    declared = [line.split(",")[0] for line in program.text.splitlines() if line.startswith("tracepoint:")]
    assert attached, out[-2000:]
    assert attached[-1] == "tracepoint:syscalls:sys_enter_prctl"
    assert [a for a in attached if a in declared] == [d for d in declared if d in attached]


@pytest.mark.slow
def test_kfd_probes_count_ioctls_on_the_device(ebpf_ready: None, tmp_path: Path) -> None:
    """The KFD family's real probes, aimed at /dev/null (no GPU here): fds open before the start
    and opened while tracing are both followed; 'K' ioctls are counted in and outside the window."""
    import contextlib
    import fcntl

    from aorta.ebpf.probes.kfd import KfdFamily

    cmd = (3 << 30) | (96 << 16) | (0x4B << 8) | 0x02  # _IOWR('K', 2, 96): CREATE_QUEUE shape
    early = os.open("/dev/null", os.O_RDONLY)
    family = KfdFamily(device="/dev/null", force=True)
    _, session = _session([family], TraceTarget((os.getpid(),)))
    late = os.open("/dev/null", os.O_RDONLY)
    try:

        def poke(fd: int, times: int) -> None:
            for _ in range(times):
                with contextlib.suppress(OSError):
                    fcntl.ioctl(fd, cmd, bytearray(96))

        poke(early, 3)  # outside the window
        session.window_start()
        poke(early, 5)
        poke(late, 7)
        session.window_stop()
    except BaseException:
        session.abort()
        raise
    finally:
        os.close(early)
        os.close(late)
    out = session.stop()
    assert out.exit_code == 0, out.stderr
    result = family.collect(
        {k: v for k, v in out.maps.items() if k.startswith("@kfd_")},
        CollectContext(pids=(os.getpid(),), streams=4),
    )
    create = result.metrics["ioctls"]["CREATE_QUEUE"]
    assert create["window"] == 12
    assert create["outside_window"] == 3
    assert create["window_avg_us"] is not None
    assert result.metrics["queues_created"] == []  # every ioctl failed (ENOTTY): nothing created
