"""'eBPF vs CUDA COMPARISON': the kernel's run-queue wait vs the harness's own dispatch delay.

Like with like on the CPU backend (docs/ebpf.md, "Comparison formula"), over the same window:

* kernel  K = Σ run-queue wait of queue worker threads after a wakeup *by the submitting (host)
  thread* (sched_wakeup → sched_switch in); `ebpf_submit_to_dispatch_ms` = K / such waits;
* harness H = Σ over ops of start − max(ready, end of the previous op on the same queue): the time
  a queue had ready work but was not running it (head-of-line blocking behind another stream's op
  on the same queue is excluded: it is not dispatch); `harness_dispatch_delay_ms` = H / ops, shown
  under the guide's label "CUDA switch overhead";
* `measurement_accuracy_pct` = 100 · K / H: the share of the dispatch delay that the kernel saw as
  CPU run-queue wait after a submission. The rest is user-space work (futex wake path, GIL
  acquisition, Python dequeue) that the scheduler does not see; lost events are reported apart.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

FORMULA = ("accuracy = 100 * sum(kernel run-queue wait of queue threads after a wakeup by the "
           "submitting thread) / sum(harness dispatch delay: start - max(ready, previous op end on "
           "the same queue)), same window")


def dispatch_delays_ns(ops: list[Any]) -> list[int]:
    """Per op: start − max(ready, previous op's end on the same queue), in ns (≥ 0)."""
    by_queue: dict[Any, list[Any]] = defaultdict(list)
    for op in ops:
        if op.ready_ns is not None:
            by_queue[op.queue].append(op)
    delays = []
    for queue_ops in by_queue.values():
        previous_end = None
        for op in sorted(queue_ops, key=lambda o: o.start_ns):
            base = op.ready_ns if previous_end is None else max(op.ready_ns, previous_end)
            delays.append(max(0, op.start_ns - base))
            previous_end = op.end_ns
    return delays


def compare_with_harness(queue_section: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """The comparison section; null values carry a reason."""
    if queue_section.get("status") != "ok":
        return {"status": queue_section.get("status"), "error": queue_section.get("error"),
                "formula": FORMULA}
    source = queue_section.get("source")
    base = {"status": "ok", "error": None, "formula": FORMULA, "kernel_source": source,
            "ebpf_submit_to_dispatch_ms": _ms(queue_section.get("submit_to_dispatch_avg_us"))}
    if source != "cpu_sched":
        return {**base, "harness_dispatch_delay_ms": None, "measurement_accuracy_pct": None,
                "reason": ("the harness measures ready→start only on the CPU backend; GPU ops have no "
                           "host-visible ready time, so there is nothing like-for-like to compare")}
    delays = dispatch_delays_ns(ops)
    if not delays:
        return {**base, "harness_dispatch_delay_ms": None, "measurement_accuracy_pct": None,
                "reason": "no ops with a ready time were recorded in the window"}
    kernel_total_ms = queue_section.get("runq_wait_after_submission_total_ms")
    harness_total_ms = sum(delays) / 1e6
    raw = [op.start_ns - op.ready_ns for op in ops if op.ready_ns is not None]
    accuracy = (100.0 * kernel_total_ms / harness_total_ms
                if kernel_total_ms is not None and harness_total_ms > 0 else None)
    return {**base,
            "ebpf_meaning": "mean run-queue wait of queue threads after a submission wakeup (kernel)",
            "harness_dispatch_delay_ms": harness_total_ms / len(delays),
            "harness_meaning": ("mean op dispatch delay: start − max(ready, previous op end on its "
                                "queue) (harness clock, CLOCK_MONOTONIC)"),
            "harness_ready_to_start_ms": sum(raw) / len(raw) / 1e6,
            "harness_ready_to_start_note": "includes head-of-line waits behind other streams' ops",
            "kernel_waits": queue_section.get("total_dispatches"),
            "harness_ops": len(delays),
            "kernel_runq_wait_total_ms": kernel_total_ms,
            "harness_dispatch_delay_total_ms": harness_total_ms,
            "measurement_accuracy_pct": accuracy,
            "accuracy_meaning": ("share of the harness-measured dispatch delay that the kernel saw as "
                                 "run-queue wait after a submission")}


def _ms(us: Any) -> float | None:
    return us / 1e3 if isinstance(us, (int, float)) else None
