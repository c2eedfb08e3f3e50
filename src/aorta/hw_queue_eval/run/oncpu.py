"""On-CPU time of the CPU backend's queue threads over the window, from the kernel's schedstat.

"Streams with an op in flight" (wall clock) counts an op as running while its worker waits for a
CPU; the kernel's per-thread on-CPU time does not. Σ on-CPU time of the queue threads (each worker
and the intra-op threads it started, which inherit its name) / window = queues running on a CPU.
"""

from __future__ import annotations

import os
import re

from aorta.ebpf import procstat
from aorta.hw_queue_eval.results.models import OnCpu

QUEUE_THREAD_COMM = re.compile(r"^aorta-hwq\d+$")
SOURCE = "/proc/self/task/*/schedstat exec time of the queue threads, read at the window edges"


def snapshot(worker_tids: list[int]) -> dict[int, int] | None:
    """tid → on-CPU ns of queue threads now; None when there are no workers or no schedstat."""
    if not worker_tids:
        return None
    counters = procstat.task_counters([os.getpid()])
    wanted = set(worker_tids)
    out = {
        tid: c["exec_ns"]
        for tid, c in counters.items()
        if c.get("exec_ns") is not None and (tid in wanted or QUEUE_THREAD_COMM.match(c.get("comm") or ""))
    }
    return out if wanted & set(out) else None


def on_cpu_concurrency(start: dict[int, int] | None, stop: dict[int, int] | None, window_ms: float) -> OnCpu:
    """Average number of queue threads on a CPU over the window, or null with the reason."""
    if start is None or stop is None:
        return OnCpu(
            on_cpu_queues=None,
            on_cpu_ms=None,
            on_cpu_reason="no per-thread on-CPU counters (GPU backend, or no schedstat)",
        )
    if window_ms <= 0:
        return OnCpu(on_cpu_queues=None, on_cpu_ms=None, on_cpu_reason="empty window")
    # a thread born inside the window starts at 0 on-CPU time
    total_ns = sum(ns - start.get(tid, 0) for tid, ns in stop.items())
    return OnCpu(
        on_cpu_queues=total_ns / 1e6 / window_ms,
        on_cpu_ms=total_ns / 1e6,
        on_cpu_reason=None,
        on_cpu_source=SOURCE,
    )
