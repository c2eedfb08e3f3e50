"""Ground truth for the headline queue figures: an independent bpftrace program beside a real run.

The independent tracer is written here, not in aorta: it learns the queue workers' doorbell fds
from their own 8-byte reads (threads named aorta-hwqN), opens and closes its window on the same
marker syscalls (any token of the traced process), and times doorbell write → the worker's first
switch onto a CPU → its doorbell read on raw tracepoints. Three runs, one with a CPU hog beside it:
submissions must be equal exactly (to the harness's own count too), the submit→dispatch mean
within 5 %, and the comparison block must show full coverage with the same counts.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf.interrupt import Interrupter
from aorta.ebpf.marker import MAGIC

pytestmark = pytest.mark.ebpf

READY_CMD = 77  # a marker command aorta never sends: the independent tracer's attach handshake

INDEPENDENT = f"""
tracepoint:syscalls:sys_enter_prctl
/args->option == {MAGIC}/
{{
  $c = args->arg2;
  if ($c == {READY_CMD}) {{ printf("independent_ready\\n"); }}
  if ($c == 2) {{ @open[pid] = 1; }}
  if ($c == 3) {{ @open[pid] = 0; }}
}}

tracepoint:syscalls:sys_enter_read
/args->count == 8 && strncmp(comm, "aorta-hwq", 9) == 0/
{{
  @bellfd[(int64)pid, (int64)args->fd] = (int64)tid;
}}

tracepoint:syscalls:sys_enter_write
/@open[pid]/
{{
  $w = @bellfd[(int64)pid, (int64)args->fd];
  if ($w) {{
    @subs[pid] = count();
    @pending[$w] = nsecs;
    delete(@oncpu_after[$w]);
  }}
}}

tracepoint:sched:sched_switch
{{
  $n = (int64)args->next_pid;
  $t = @pending[$n];
  if ($t) {{
    @oncpu_after[$n] = nsecs - $t + 1;
    delete(@pending[$n]);
  }}
}}

tracepoint:syscalls:sys_exit_read
/args->ret == 8/
{{
  $k = (int64)tid;
  $t = @pending[$k];
  $l = @oncpu_after[$k];
  if ($t || $l) {{
    if ($t) {{ @delay[pid] = stats(0); }} else {{ @delay[pid] = stats($l - 1); }}
    delete(@pending[$k]);
    delete(@oncpu_after[$k]);
  }}
}}

END
{{
  clear(@open); clear(@bellfd); clear(@pending); clear(@oncpu_after);
}}
"""


class IndependentTracer:
    """bpftrace with the program above; started before the run so it sees the warm-up reads."""

    def __init__(self, folder: Path) -> None:
        script = folder / "independent.bt"
        script.write_text(INDEPENDENT)
        self.proc = subprocess.Popen(
            [shutil.which("bpftrace") or "bpftrace", "-f", "json", str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        libc = ctypes.CDLL(None, use_errno=True)
        stdout = self.proc.stdout
        assert stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            libc.prctl(
                ctypes.c_int(MAGIC),
                ctypes.c_ulong(READY_CMD),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
            )
            if select.select([stdout], [], [], 0.05)[0] and "independent_ready" in stdout.readline():
                return
        self.proc.kill()
        raise AssertionError("independent bpftrace did not attach")

    def stop(self) -> dict[str, Any]:
        """SIGINT when bpftrace can take it (`aorta.ebpf.interrupt`: one sent while it reads
        events is noticed only at its next event, and CI lost one so), then the printed maps:
        submissions and the delay (count, total ns)."""
        interrupter = Interrupter(self.proc.pid)
        deadline = time.monotonic() + 60
        while True:
            interrupter.send_if_due(time.monotonic(), 0)
            try:
                out, _ = self.proc.communicate(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise
        maps: dict[str, Any] = {}
        for line in out.splitlines():
            record = json.loads(line) if line.startswith("{") else {}
            if record.get("type") in ("map", "stats"):
                maps.update(record["data"])
        return maps


def _hog() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@pytest.mark.slow
@pytest.mark.parametrize("load", ["idle", "idle-again", "cpu-hog"])
def test_independent_tracer_agrees_with_the_run(ebpf_ready: None, cli, tmp_path: Path, load: str) -> None:
    tracer = IndependentTracer(tmp_path)
    hog = _hog() if load == "cpu-hog" else None
    try:
        out = tmp_path / "r.json"
        proc = cli(
            "run",
            "tiny_kernel_stress",
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
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        independent = tracer.stop()
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    q, cmp = data["ebpf_queue_metrics"], data["ebpf_vs_cuda_comparison"]
    handoffs = data["ops"]["handoffs"]["count"]
    assert q["lost_events"] == 0
    assert handoffs > 0
    # the independent tracer sees every aorta process on the machine: take the run's own
    pid = str(data["environment"]["pid"])
    subs, delay = independent["@subs"][pid], independent["@delay"][pid]
    assert subs == q["total_submissions"] == handoffs
    n, total = delay["count"], delay["total"]
    assert n == q["total_dispatches"] == handoffs
    mean_us = total / n / 1e3
    print(
        f"{load}: submissions {handoffs} (independent {subs}), submit→dispatch "
        f"aorta {q['submit_to_dispatch_avg_us']:.1f} us, independent {mean_us:.1f} us"
    )
    assert abs(q["submit_to_dispatch_avg_us"] - mean_us) <= 0.05 * mean_us, (q, mean_us)
    assert cmp["harness_submissions"] == cmp["kernel_submissions"] == handoffs
    assert cmp["matched_submissions"] == cmp["compared"] == handoffs
    assert cmp["coverage_pct"] == 100.0
    assert abs(cmp["kernel_submit_to_dispatch_ms"] * 1e3 - mean_us) <= 0.05 * mean_us


def _realtime_allowed() -> bool:
    """Whether a thread may take SCHED_FIFO here (a container without a real-time budget refuses
    it even to root): the known delay is forced by a real-time spinner."""
    thread = threading.Thread(target=time.sleep, args=(0.2,))
    thread.start()
    try:
        os.sched_setscheduler(thread.native_id, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        return False
    finally:
        thread.join()
    return True


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs: host on one, queue on the other")
@pytest.mark.skipif(
    not _realtime_allowed(),
    reason="SCHED_FIFO refused here (no real-time budget, "
    "e.g. a container): the forced hand-off delay needs a real-time spinner",
)
def test_known_delays_are_recovered(
    ebpf_ready: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ops busy-wait 2 ms, hand-offs are forced to wait ~4 ms: both sides must say so within 10 %."""
    from aorta.hw_queue_eval.config.run_config import RunConfig
    from aorta.hw_queue_eval.run.harness import run_benchmark
    from aorta.hw_queue_eval.tracing.window_tracer import EbpfTracer
    from aorta.hw_queue_eval.workloads import registry
    from known_delay_workload import BUSY_NS, KnownDelay, Spinner

    iterations, warmup = 20, 2
    monkeypatch.setitem(registry._WORKLOADS, "known_delay", KnownDelay)
    spinner = Spinner(cpu=1, page_path=str(tmp_path / "spin.page"))
    monkeypatch.setattr(KnownDelay, "spinner", spinner)
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})  # this (host) thread and the workers it starts: CPU 0
    try:
        result = run_benchmark(
            RunConfig("known_delay", 1, iterations=iterations, warmup=warmup, device="cpu"),
            EbpfTracer(queue=True, memory=False),
        )
    finally:
        os.sched_setaffinity(0, affinity)
        spinner.close()
    forced = KnownDelay.forced_waits_ns[warmup:]
    assert len(forced) == iterations
    forced_ms = sum(forced) / len(forced) / 1e6
    q, cmp = result.ebpf_queue_metrics, result.ebpf_vs_cuda_comparison
    assert q is not None
    assert cmp is not None
    assert q["lost_events"] == 0
    # one hand-off per iteration (its synchronize marker joins the busy op's batch), plus the
    # marker of the window's final synchronize, handed to an idle queue
    assert result.ops["handoffs"]["count"] == q["total_submissions"] == iterations + 1
    assert cmp["first_task_kinds"] == {"op": iterations, "marker": 1}
    ops = cmp["op_submissions"]
    print(
        f"known delays: forced {forced_ms:.3f} ms, kernel {ops['kernel_ms']:.3f} ms, harness "
        f"{ops['harness_to_op_start_ms']:.3f} ms, busy {result.ops['per_label']['busy']['mean']:.3f} ms"
    )
    assert ops["count"] == ops["compared"] == iterations
    assert cmp["coverage_pct"] == 100.0
    # the forced wait, recovered by the kernel (doorbell → on CPU) and by the harness (doorbell →
    # op start: the kernel's interval plus the worker's own steps once on CPU, so never shorter).
    # The harness is held to the kernel's figure, its independent witness, rather than to the
    # forced wait directly: on a busy machine both see the same extra wake-up delay (kernel 4.24,
    # harness 4.50 for 4.04 forced was seen in a full CI run), which is real, not a harness error
    assert abs(ops["kernel_ms"] - forced_ms) <= 0.10 * forced_ms, (ops, forced_ms)
    assert ops["kernel_ms"] <= ops["harness_to_op_start_ms"], (ops, forced_ms)
    assert ops["harness_to_op_start_ms"] - ops["kernel_ms"] <= 0.10 * forced_ms, (ops, forced_ms)
    # the op's known length: its harness duration, and the worker's on-CPU time in the kernel
    # (the median: the spin ends by wall time, so one preemption of the worker by another process
    # stretches that op by the whole slice; a mean of 20 moved 20 % on one such op, 2.42 ms)
    busy_ms = BUSY_NS / 1e6
    assert abs(result.ops["per_label"]["busy"]["median"] - busy_ms) <= 0.10 * busy_ms
    worker = next(r for r in q["families"]["cpu_sched"]["metrics"]["threads"] if r["queue"] == 0)
    # on CPU: every op's busy-wait, plus the worker loop's own Python steps per task (the hand-off
    # read, the marker, the record), which grow when a loaded machine slows the interpreter;
    # 0.5 ms per iteration bounds those (0.22 ms seen at load 3 on 2 cores); a window counted
    # twice, or another thread's time, is far outside
    assert worker["on_cpu_ms"] >= 0.90 * iterations * busy_ms, worker
    assert worker["on_cpu_ms"] <= iterations * (busy_ms + 0.5), worker
