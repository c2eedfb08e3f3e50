"""'eBPF vs CUDA COMPARISON' on a GPU: runtime launches seen by uprobes vs ops the harness issued.

Over the same window (the uprobes are gated like every probe):

* `coverage_pct` (shown as Measurement accuracy) = 100 · launches the trace attributed to the
  harness's streams
  (joined by the torch stream handle, `cuda_stream`) / ops the harness issued in the window. The
  reading in docs/guide.md: < 50 % = events missed. One op may launch more than one kernel (and the
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

FORMULA = (
    "accuracy = 100 * launches on the harness's streams (uprobes, joined by stream handle) / "
    "ops the harness issued, same window"
)


def op_gaps_ns(ops: list[Any]) -> list[int]:
    """Per stream, next op start − previous op end (device timestamps), clipped at 0."""
    by_stream: dict[Any, list[Any]] = defaultdict(list)
    for op in ops:
        by_stream[op.stream].append(op)
    gaps = []
    for stream_ops in by_stream.values():
        ordered = sorted(stream_ops, key=lambda o: o.start_ns)
        gaps.extend(max(0, b.start_ns - a.end_ns) for a, b in itertools.pairwise(ordered))
    return gaps


def compare_gpu_runtime(queue_section: dict[str, Any], ops: list[Any], streams: int | None) -> dict[str, Any]:
    """The comparison section from the gpu_runtime family; null values carry a reason."""
    family = ((queue_section.get("families") or {}).get("gpu_runtime") or {}).get("metrics") or {}
    rows = family.get("streams") or []
    joined = [r for r in rows if r.get("stream_index") is not None]
    matched = sum(r["launches"] for r in joined)
    gaps = op_gaps_ns(ops)
    reason = None
    if not ops:
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
        "coverage_pct": 100.0 * matched / len(ops) if ops and joined else None,
        "coverage_meaning": (
            "launches the uprobes saw on the harness's streams per op the harness "
            "issued (< 50 %: events missed; > 100 %: ops launching several kernels)"
        ),
        "reason": reason,
        "launches_matched": matched,
        "launches_total": family.get("launches_total"),
        "harness_ops": len(ops),
        "per_stream": [
            {
                "stream": r["stream_index"],
                "handle": r["handle"],
                "launches": r["launches"],
                "ops": sum(1 for op in ops if op.stream == r["stream_index"]),
                "launch_call_avg_us": r.get("launch_avg_us"),
            }
            for r in joined
        ],
        "ebpf_launch_call_avg_us": (queue_section.get("launch_call_avg_us")),
        "ebpf_meaning": "host time inside the runtime's launch call (uprobe entry → return)",
        "harness_op_gap_avg_us": sum(gaps) / len(gaps) / 1e3 if gaps else None,
        "harness_meaning": (
            "mean device idle gap between consecutive ops on one stream (GPU "
            "events): next start − previous end"
        ),
        "hw_queues_used": family.get("hw_queues_used"),
        "streams": streams,
    }
