"""The engine against the real kernel: handshake, window gate, counts, stop, abort, end-to-end run."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import engine
from aorta.ebpf.probes.base import FamilyResult, ProbeCode, ProbeFamily, RenderContext, TraceTarget
from aorta.ebpf.probes.cpu_sched import CpuSchedFamily

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
        return ProbeCode(probes=[f"tracepoint:dma_fence:dma_fence_signaled\n/{ctx.gate}/\n{{\n"
                                 f"  @t_fence_n[str({a('driver')})] = count();\n}}"],
                         used_events=["dma_fence:dma_fence_signaled"])

    def collect(self, maps: dict[str, Any], context: dict[str, Any]) -> FamilyResult:
        return FamilyResult(self.name, self.section, dict(maps), {})


def _session(families: list[ProbeFamily], target: TraceTarget):
    ready = engine.check_readiness()
    program = engine.make_program(True, False, target, ready.tracefs, ready.version,
                                  families=families)
    return program, engine.start_session(program, ready)


def _sleeper(n: int, box: dict[str, int]) -> None:
    box["tid"] = threading.get_native_id()
    for _ in range(n):
        time.sleep(0.0005)


def test_gate_counts_exactly_the_window(ebpf_ready: None) -> None:
    family = CpuSchedFamily()
    _, session = _session([family, FenceCount()], TraceTarget((os.getpid(),)))
    try:
        box: dict[str, int] = {}
        before = threading.Thread(target=_sleeper, args=(40, box))
        before.start()
        before.join()
        session.window_start()
        inside: dict[str, int] = {}
        t = threading.Thread(target=_sleeper, args=(100, inside))
        t.start()
        t.join()
        session.window_stop()
        after = threading.Thread(target=_sleeper, args=(40, {}))
        after.start()
        after.join()
    except BaseException:
        session.abort()
        raise
    out = session.stop()
    assert out.exit_code == 0 and out.lost_events == 0, out.stderr
    threads = {r["tid"]: r for r in family.collect(
        {k: v for k, v in out.maps.items() if k.startswith("@cpu_sched_")}, {})
        .metrics["threads"]}
    # slept only before the window (its exit may still switch out inside it: no wakeups, though)
    assert threads.get(box["tid"], {}).get("wakeups", 0) == 0
    row = threads[inside["tid"]]
    assert 100 <= row["wakeups"] <= 103, row
    assert row["dispatches"] >= 100 and row["runq_avg_us"] is not None
    assert out.maps["@aorta_window_stop_ns"] > out.maps["@aorta_window_start_ns"]
    assert out.attach_s is not None and out.attach_s < 10


def test_abort_leaves_no_process_and_no_temp_file(ebpf_ready: None) -> None:
    _, session = _session([CpuSchedFamily()], TraceTarget((os.getpid(),)))
    proc = session._proc
    assert session._tmpdir is None  # removed as soon as bpftrace loaded it
    session.abort()
    assert proc is not None and proc.poll() is not None


def test_run_ebpf_trace_end_to_end(ebpf_ready: None, cli, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli("run", "hetero_kernels", "--streams", "8", "-i", "10", "-w", "2", "-d", "cpu",
               "--ebpf-trace", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "eBPF DRIVER-LEVEL QUEUE METRICS" in proc.stdout
    assert "eBPF vs CUDA COMPARISON" in proc.stdout
    import json

    data = json.loads(out.read_text())
    q = data["ebpf_queue_metrics"]
    assert q["status"] == "ok" and q["lost_events"] == 0 and q["source"] == "cpu_sched"
    workers = {w["tid"]: w["queue"] for w in data["metadata"]["workers"]}
    rows = {r["tid"]: r for r in q["families"]["cpu_sched"]["metrics"]["threads"]
            if r["queue"] is not None}
    assert set(rows) == set(workers)
    for tid, row in rows.items():
        assert row["queue"] == workers[tid] and row["wakeups"] > 0 and row["on_cpu_ms"] > 0
    assert q["hw_rings_used"] == sorted(set(workers.values()))
    assert q["total_submissions"] == sum(r["wakeups"] for r in rows.values())
    cmp = data["ebpf_vs_cuda_comparison"]
    assert cmp["status"] == "ok" and cmp["harness_ops"] == data["ops"]["count"]
    assert cmp["measurement_accuracy_pct"] is not None and cmp["measurement_accuracy_pct"] > 0
    assert q["window"]["duration_ms"] > 0


def test_run_without_bpftrace_says_why(cli, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli("run", "tiny_kernel_stress", "--streams", "2", "-i", "2", "-w", "1", "-d", "cpu",
               "--ebpf-trace", "-o", str(out), env={"BPFTRACE": "/nonexistent/bpftrace"})
    assert proc.returncode == 0, proc.stderr
    assert "eBPF tracing is off" in proc.stderr
    import json

    data = json.loads(out.read_text())
    assert data["ebpf_queue_metrics"]["status"] == "unavailable"
    assert "bpftrace not found" in data["ebpf_queue_metrics"]["error"]
    assert data["ebpf_vs_cuda_comparison"]["status"] == "unavailable"


def test_ebpf_attach_follows_threads_and_children(ebpf_ready: None, cli, tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import os, time, subprocess, sys\n"
            "time.sleep(3.0)\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time\\nfor _ in range(300): "
            "time.sleep(0.002)'])\n"
            "c.wait()\n")
    target = subprocess.Popen([sys.executable, "-c", code])
    try:
        out = tmp_path / "a.json"
        proc = cli("ebpf-attach", "--pid", str(target.pid), "--duration", "5s", "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        import json

        data = json.loads(out.read_text())
        assert target.pid in data["traced_pids"] and len(data["traced_pids"]) >= 2
        threads = data["ebpf_queue_metrics"]["families"]["cpu_sched"]["metrics"]["threads"]
        assert max(t["wakeups"] for t in threads) >= 100
    finally:
        target.kill()
        target.wait()
