"""'eBPF vs CUDA/HIP COMPARISON' on a GPU: runtime launches seen by uprobes vs ops the harness issued.

Over the same window (the uprobes are gated like every probe):

* `coverage_pct` (printed as "Coverage", launches / ops; `accuracy_pct` is its legacy alias,
  the guide's "Measurement accuracy": a count, not an agreement of timings) = 100 · launches
  the trace attributed to the harness's streams (joined by the torch stream handle,
  `cuda_stream`) / ops the harness issued in the window. The reading in docs/guide.md: < 50 % =
  events missed. One op may launch more than one kernel (and the
  runtime may add its own), so values above 100 % are possible and mean "more launches than ops";
* host launch cost: mean entry→return time of the launch calls (eBPF, host clock) shown beside the
  harness's mean per-op device gap (next op start − previous op end on the same stream, GPU
  events): the first is what the CPU pays per launch, the second what the GPU idles between ops;
* HW queues used (doorbell signals rung, HSA only) vs streams.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from aorta.common.jsontypes import JsonObject

FORMULA = (
    "coverage = 100 * launches on the harness's streams (uprobes, joined by stream handle) / "
    "ops the harness issued, same window"
)


def op_gaps_ns(ops: list[Any]) -> list[int]:
    """Per stream, next op start − previous op end (device timestamps), clipped at 0."""
    by_stream: dict[Any, list[Any]] = defaultdict(list)
    for op in ops:
        by_stream[op.stream].append(op)
    gaps: list[int] = []
    for stream_ops in by_stream.values():
        ordered = sorted(stream_ops, key=lambda o: o.start_ns)
        gaps.extend(max(0, b.start_ns - a.end_ns) for a, b in itertools.pairwise(ordered))
    return gaps


def _op_figures(ops: list[Any], folded: Any) -> tuple[int, dict[Any, int], int, int]:
    """(ops issued, ops per stream, Σ gaps ns, gaps) over every op of the window: from the rows,
    or from the fold (opfold.FoldedOps) when the window had more ops than rows."""
    if folded is not None:
        gap_sum, gap_count = folded.stream_gaps_ns()
        return folded.total, dict(enumerate(folded.per_stream_op_counts())), gap_sum, gap_count
    per_stream: dict[Any, int] = defaultdict(int)
    for op in ops:
        per_stream[op.stream] += 1
    gaps = op_gaps_ns(ops)
    return len(ops), per_stream, sum(gaps), len(gaps)


def compare_gpu_runtime(
    queue_section: JsonObject, ops: list[Any], streams: int | None, folded: Any = None
) -> JsonObject:
    """The comparison section from the gpu_runtime family; null values carry a reason.

    `ops`: the window's op rows; `folded`: its folded figures when it had more ops than rows."""
    family = ((queue_section.get("families") or {}).get("gpu_runtime") or {}).get("metrics") or {}
    rows = family.get("streams") or []
    joined = [r for r in rows if r.get("stream_index") is not None]
    matched = sum(r["launches"] for r in joined)
    issued, per_stream, gap_sum, gap_count = _op_figures(ops, folded)
    coverage = 100.0 * matched / issued if issued and joined else None
    reason = None
    if not issued:
        reason = "the harness recorded no ops in the window"
    elif not joined:
        reason = (
            "no launch was attributed to a harness stream: the backend recorded no stream "
            "handles, or the runtime was called with other handles"
        )
    return {
        "status": "ok",
        "error": None,
        "formula": FORMULA,
        "kernel_source": "gpu_runtime",
        "coverage_pct": coverage,
        "accuracy_pct": coverage,
        "accuracy_meaning": (
            "legacy alias of coverage_pct (the guide's 'Measurement accuracy'): launches per "
            "op issued, a count, not an agreement of timings"
        ),
        "coverage_meaning": (
            "launches the uprobes saw on the harness's streams per op the harness "
            "issued (< 50 %: events missed; > 100 %: ops launching several kernels)"
        ),
        "reason": reason,
        "launches_matched": matched,
        "launches_total": family.get("launches_total"),
        "harness_ops": issued,
        "per_stream": [
            {
                "stream": r["stream_index"],
                "handle": r["handle"],
                "launches": r["launches"],
                "ops": per_stream.get(r["stream_index"], 0),
                "launch_call_avg_us": r.get("launch_avg_us"),
            }
            for r in joined
        ],
        "ebpf_launch_call_avg_us": (queue_section.get("launch_call_avg_us")),
        "ebpf_meaning": "host time inside the runtime's launch call (uprobe entry → return)",
        "harness_op_gap_avg_us": gap_sum / gap_count / 1e3 if gap_count else None,
        "harness_meaning": (
            "mean device idle gap between consecutive ops on one stream (GPU "
            "events): next start − previous end"
        ),
        "hw_queues_used": family.get("hw_queues_used"),
        "streams": streams,
    }
