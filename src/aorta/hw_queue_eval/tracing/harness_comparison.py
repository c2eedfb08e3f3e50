"""eBPF vs harness on the CPU backend: one population (submissions) on one clock, kernel vs harness.

On the CPU backend a submission is a doorbell ring: the host writes a queue's eventfd when it hands
work to that idle queue (backends/cpu.py). Both sides see every ring, so per submission
(docs/ebpf.md, "Comparison formula"):

* kernel  k_i = doorbell write (sys_enter_write) → the worker's first switch onto a CPU after it;
* harness h_i = the host's clock right before the write → the worker starting the work it was
  handed (for an op: the op's start), CLOCK_MONOTONIC like the kernel's `nsecs`;
* a kernel record matches harness submission i when it has the same queue and ring number and its
  write time lies inside the harness's before/after bracket of that write.

`coverage_pct` (printed as "Coverage: matched of harness submissions"; `accuracy_pct` is its
legacy alias, the guide's "Measurement accuracy") = 100 · matched / harness submissions: a count
of the harness's submissions that the kernel trace saw, not an agreement of times (over the first
`per_submission_cap_per_queue` rings of each queue when a run has more; `beyond_record_cap` says
how many were left out, and the total counts are still compared exactly). The timing check is
separate: a worker must be on a CPU before it starts the work it was handed, so per matched
submission write + k_i ≤ the harness's start; `timing_inconsistent` counts those where the kernel's
dispatch comes later (wrong kernel-side times). `kernel_visible_share_pct` = 100 · Σ k_i / Σ h_i
over the matched ones: how much of the hand-off delay was scheduler wait (the rest is user-space
work: Python wake-up, GIL, dequeue). Means are over the matched submissions, with the counts
beside them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.backends.base import HandoffTotals

FORMULA = (
    "per submission (doorbell ring): kernel = doorbell write → worker on a CPU; harness = "
    "doorbell write → worker starts the handed work; coverage = 100 * matched / harness "
    "submissions (a count: accuracy_pct is its legacy alias); timing check: doorbell write + kernel "
    "≤ harness start per matched submission; kernel-visible share = 100 * sum(kernel) / "
    "sum(harness) over matched"
)
COVERAGE_MEANING = (
    "share of the harness's submissions (hand-offs to an idle queue) that the kernel "
    "trace matched: same queue, same ring number, write time inside the harness's "
    "bracket; < 50 % means events were missed. A count: it says nothing about "
    "whether the kernel's times are right (see timing_check_meaning)"
)
ACCURACY_MEANING = (
    "legacy alias of coverage_pct (the guide's 'Measurement accuracy'): the share of "
    "harness submissions matched by a kernel record, a count, not an agreement of timings"
)
TIMING_CHECK_MEANING = (
    "per matched submission, the worker must be on a CPU before it starts the work it was "
    "handed: doorbell write + kernel submit→dispatch ≤ harness start. timing_inconsistent "
    "counts the submissions where the kernel's dispatch comes later: kernel-side times that "
    "are wrong (too late); it cannot catch times that are too early"
)
HARNESS_LABEL_CPU = "Harness submit→start"  # the CPU backend's own name: there is no CUDA here
NO_HANDOFFS = (
    "the harness cannot see hand-offs on this backend (GPU launches go to user-mode "
    "queues), so there is no common population to compare"
)


def compare_with_harness(
    queue_section: JsonObject,
    submissions: list[Any] | None,
    kernel_records: list[list[Any]] | None,
    totals: HandoffTotals | None = None,
) -> JsonObject:
    """The comparison section; null values carry a reason.

    `submissions` may hold only each queue's first rings (backends/cpu.py keeps at least the
    kernel's per-queue record cap); `totals` (Backend.handoff_totals) then counts them all.
    """
    if queue_section.get("status") != "ok":
        return {
            "status": queue_section.get("status"),
            "error": queue_section.get("error"),
            "formula": FORMULA,
        }
    source = queue_section.get("source")
    base: JsonObject = {
        "status": "ok",
        "error": None,
        "formula": FORMULA,
        "kernel_source": source,
        "lost_events": queue_section.get("lost_events"),
    }
    if source != "cpu_sched" or submissions is None:
        return {
            **base,
            "kernel_submit_to_dispatch_ms": _ms(queue_section.get("submit_to_dispatch_avg_us")),
            "kernel_submit_to_dispatch_count": queue_section.get("total_dispatches"),
            "harness_submit_to_start_ms": None,
            "coverage_pct": None,
            "accuracy_pct": None,
            "kernel_visible_share_pct": None,
            "reason": NO_HANDOFFS,
        }
    harness_n = totals.count if totals else len(submissions)
    kernel_n = queue_section.get("total_submissions")
    # the kernel keeps per-submission records for the first `cap` rings of each queue only
    cap = queue_section.get("per_submission_cap_per_queue")
    recordable = [s for s in submissions if not isinstance(cap, int) or s.seq < cap]
    pairs, unmatched, late = match_submissions(recordable, kernel_records or [])
    coverage = 100.0 * len(pairs) / len(recordable) if recordable else None
    body = {
        **base,
        "population": "submissions: hand-offs of work to an idle queue (doorbell rings), window only",
        "harness_submissions": harness_n,
        "kernel_submissions": kernel_n,
        "submissions_equal": kernel_n == harness_n,
        "matched_submissions": len(pairs),
        "unmatched": unmatched,
        "beyond_record_cap": harness_n - len(recordable),
        "coverage_pct": coverage,
        "coverage_meaning": COVERAGE_MEANING,
        "accuracy_pct": coverage,
        "accuracy_meaning": ACCURACY_MEANING,
        "timing_checked": len(pairs),
        "timing_inconsistent": late if pairs else None,
        "timing_check_meaning": TIMING_CHECK_MEANING,
        "harness_label": HARNESS_LABEL_CPU,
        "first_task_kinds": (
            dict(totals.first_task_kinds) if totals else dict(Counter(s.first_kind for s in submissions))
        ),
    }
    if not pairs:
        return {
            **body,
            "kernel_submit_to_dispatch_ms": None,
            "harness_submit_to_start_ms": None,
            "kernel_visible_share_pct": None,
            "reason": "no submission in the window"
            if not harness_n
            else "no harness submission was matched by a kernel record",
        }
    body.update(_means(pairs, "kernel_submit_to_dispatch_ms", "harness_submit_to_start_ms"))
    body["kernel_meaning"] = "doorbell write → the worker's first switch onto a CPU after it (kernel)"
    body["harness_meaning"] = (
        "doorbell write → the worker starts the work it was handed (harness "
        "clock, CLOCK_MONOTONIC); over the same matched submissions"
    )
    ops = [(k, h) for k, h, kind in pairs if kind == "op"]
    body["op_submissions"] = (
        {"count": len(ops), **_means([(k, h, "op") for k, h in ops], "kernel_ms", "harness_to_op_start_ms")}
        if ops
        else {"count": 0}
    )
    return body


def match_submissions(
    submissions: list[Any], kernel_records: list[list[Any]]
) -> tuple[list[tuple[int, int, str]], dict[str, int], int]:
    """(kernel ns, harness ns, first task kind) per matched submission, why others did not match,
    and how many matched ones the kernel says got a CPU after the harness says their work began."""
    kernel = {(int(r[0]), int(r[1])): r for r in kernel_records}
    pairs: list[tuple[int, int, str]] = []
    why = Counter({"no_kernel_record": 0, "write_outside_bracket": 0, "not_dispatched": 0})
    late = 0
    for s in submissions:
        record = kernel.get((s.queue, s.seq))
        if record is None:
            why["no_kernel_record"] += 1
        elif not s.ring_ns <= int(record[2]) <= s.rung_ns:
            why["write_outside_bracket"] += 1
        elif record[3] is None:
            why["not_dispatched"] += 1
        else:
            pairs.append((int(record[3]), s.start_ns - s.ring_ns, s.first_kind))
            late += int(record[2]) + int(record[3]) > s.start_ns
    return pairs, dict(why), late


def _means(pairs: list[tuple[int, int, str]], kernel_key: str, harness_key: str) -> JsonObject:
    """Both means over the same pairs, their count, and the kernel's share of the harness sum."""
    k_total = sum(k for k, _, _ in pairs)
    h_total = sum(h for _, h, _ in pairs)
    return {
        kernel_key: k_total / len(pairs) / 1e6,
        harness_key: h_total / len(pairs) / 1e6,
        "compared": len(pairs),
        "kernel_visible_share_pct": 100.0 * k_total / h_total if h_total > 0 else None,
    }


def _ms(us: Any) -> float | None:
    return us / 1e3 if isinstance(us, (int, float)) else None
