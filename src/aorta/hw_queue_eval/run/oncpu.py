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
        tid: c.exec_ns
        for tid, c in counters.items()
        if c.exec_ns is not None and (tid in wanted or QUEUE_THREAD_COMM.match(c.comm or ""))
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


WAIT_SOURCE = (
    "/proc/self/task/*/schedstat (on-CPU and run-queue wait) of the host thread and the queue "
    "threads, read at the window edges"
)


def wait_snapshot(worker_tids: list[int], host_tid: int) -> dict[int, tuple[bool, int, int]] | None:
    """tid → (is the host thread, on-CPU ns, run-queue wait ns) of the host and the queue threads
    now; None when there are no workers or no schedstat. The run-queue wait is the kernel's
    second schedstat field: time the thread was runnable but waited for a CPU."""
    if not worker_tids:
        return None
    counters = procstat.task_counters([os.getpid()])
    wanted = set(worker_tids)
    out = {
        tid: (tid == host_tid, c.exec_ns, c.run_delay_ns)
        for tid, c in counters.items()
        if c.exec_ns is not None
        and c.run_delay_ns is not None
        and (tid == host_tid or tid in wanted or QUEUE_THREAD_COMM.match(c.comm or ""))
    }
    has_host = any(v[0] for v in out.values())
    return out if has_host and wanted & set(out) else None


def cpu_wait(
    start: dict[int, tuple[bool, int, int]] | None,
    stop: dict[int, tuple[bool, int, int]] | None,
    window_ms: float,
) -> dict[str, float | str | None]:
    """Host thread's on-CPU time and run-queue wait as shares of the window, and the queue threads'
    run-queue wait (total, and share of the time they were on a CPU or waiting for one), or nulls
    with the reason."""
    if start is None or stop is None or window_ms <= 0:
        reason = "empty window" if start and stop else "no per-thread schedstat counters (GPU backend)"
        return {
            "host_on_cpu": None,
            "host_run_queue_wait": None,
            "queue_run_queue_wait_ms": None,
            "queue_run_queue_wait_share": None,
            "cpu_wait_reason": reason,
        }
    host_ns = host_wait = queue_exec = queue_wait = 0
    for tid, (is_host, exec_ns, wait_ns) in stop.items():
        _, exec0, wait0 = start.get(tid, (is_host, 0, 0))  # born in the window: from 0
        if is_host:
            host_ns += exec_ns - exec0
            host_wait += wait_ns - wait0
        else:
            queue_exec += exec_ns - exec0
            queue_wait += wait_ns - wait0
    wanted = queue_exec + queue_wait
    return {
        "host_on_cpu": host_ns / 1e6 / window_ms,
        "host_run_queue_wait": host_wait / 1e6 / window_ms,
        "queue_run_queue_wait_ms": queue_wait / 1e6,
        "queue_run_queue_wait_share": queue_wait / wanted if wanted else None,
        "cpu_wait_reason": None if wanted else "queue threads were never runnable in the window",
        "cpu_wait_source": WAIT_SOURCE,
    }
