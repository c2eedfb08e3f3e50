"""Statistics over samples and op intervals: plain functions, no torch.

Definitions (also in docs/metrics.md):
- percentiles use linear interpolation between closest ranks (numpy's default);
- a run is flagged unstable when IQR / median > 0.10;
- intra-stream gap: start of an op minus the end of the previous op on the same stream, same
  iteration; inter-stream gap: start of an op minus the end of the op its lane finished most
  recently before it started, when that op belongs to a
  different stream (lane = CPU: the hardware queue; GPU: the device);
- switch overhead = median(inter-stream gaps) − median(intra-stream gaps);
- achieved concurrency = Σ over streams of busy time (union of its op intervals) / window time.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

INSTABILITY_IQR_RATIO = 0.10


def summarize(samples: Sequence[float]) -> dict[str, float | int] | None:
    """mean, std, min, max, p50/p95/p99, median and IQR of `samples`; None when empty."""
    if len(samples) == 0:
        return None
    arr = np.asarray(samples, dtype=float)
    q1, p50, q3, p95, p99 = np.percentile(arr, [25, 50, 75, 95, 99])
    return {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "median": float(p50),
        "iqr": float(q3 - q1),
    }


def stability_warning(stats: dict[str, Any] | None) -> str | None:
    """A warning when IQR/median exceeds 10 %, else None."""
    if not stats or stats["median"] <= 0:
        return None
    ratio = stats["iqr"] / stats["median"]
    if ratio > INSTABILITY_IQR_RATIO:
        return (f"unstable: IQR/median = {ratio:.0%} (> {INSTABILITY_IQR_RATIO:.0%}); "
                "use more iterations or a quieter machine")
    return None


def throughput(work: float, seconds: float, unit_scale: float) -> float | None:
    """Work per second in the unit (e.g. FLOPs / 1e9 for GFLOPS); None without elapsed time."""
    if seconds <= 0:
        return None
    return work / seconds / unit_scale


def merged_busy_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals."""
    total = 0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def per_stream_busy_ms(ops: Sequence[Any], stream_count: int) -> list[float]:
    """Busy time (union of op intervals) per stream, in ms."""
    by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for op in ops:
        by_stream[op.stream].append((op.start_ns, op.end_ns))
    return [merged_busy_ns(by_stream.get(s, [])) / 1e6 for s in range(stream_count)]


def per_stream_op_counts(ops: Sequence[Any], stream_count: int) -> list[int]:
    """Number of measured ops per stream."""
    counts = [0] * stream_count
    for op in ops:
        counts[op.stream] += 1
    return counts


def achieved_concurrency(busy_ms: Sequence[float], window_ms: float) -> float | None:
    """Average number of busy streams over the window."""
    if window_ms <= 0:
        return None
    return float(sum(busy_ms) / window_ms)


def stream_gaps(ops: Sequence[Any]) -> tuple[list[float], list[float]]:
    """(intra-stream gaps, inter-stream gaps) in ms; see the module docstring."""
    intra: list[float] = []
    by_stream: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for op in ops:
        by_stream[(op.stream, op.iteration)].append(op)
    for seq in by_stream.values():
        seq.sort(key=lambda o: o.start_ns)
        intra.extend((b.start_ns - a.end_ns) / 1e6 for a, b in itertools.pairwise(seq))

    inter: list[float] = []
    by_lane: dict[Any, list[Any]] = defaultdict(list)
    for op in ops:
        by_lane[op.queue].append(op)
    for lane_ops in by_lane.values():
        ends = sorted(lane_ops, key=lambda o: o.end_ns)
        end_times = [o.end_ns for o in ends]
        for op in lane_ops:
            # the op this lane finished most recently before `op` started; a switch if it
            # belongs to another stream (same iteration: no gaps across iteration boundaries)
            i = bisect.bisect_right(end_times, op.start_ns) - 1
            if i >= 0 and ends[i].stream != op.stream and ends[i].iteration == op.iteration:
                inter.append((op.start_ns - ends[i].end_ns) / 1e6)
    return intra, inter


def switch_analysis(ops: Sequence[Any]) -> dict[str, Any]:
    """Switch overhead from measured gaps, or null with the reason when not measurable."""
    intra, inter = stream_gaps(ops)
    result: dict[str, Any] = {
        "definition": "median(inter-stream gap) - median(intra-stream gap) on one lane",
        "intra_gap_count": len(intra),
        "inter_gap_count": len(inter),
        "intra_gap_median_ms": float(np.median(intra)) if intra else None,
        "inter_gap_median_ms": float(np.median(inter)) if inter else None,
        "switch_overhead_ms": None,
        "reason": None,
    }
    if not ops:
        result["reason"] = "no ops recorded"
    elif not intra:
        result["reason"] = "no stream ran two ops in a row: no intra-stream baseline"
    elif not inter:
        result["reason"] = "no stream switches on a shared lane were observed"
    else:
        result["switch_overhead_ms"] = result["inter_gap_median_ms"] - result["intra_gap_median_ms"]
    return result


def ready_to_start_delays_ms(ops: Sequence[Any]) -> list[float]:
    """Per op: start minus ready (queue wait + dispatch), where the backend knows `ready`."""
    return [(op.start_ns - op.ready_ns) / 1e6 for op in ops if op.ready_ns is not None]


def per_label_summary(ops: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Per op label: count and duration statistics in ms."""
    by_label: dict[str, list[float]] = defaultdict(list)
    for op in ops:
        by_label[op.label].append((op.end_ns - op.start_ns) / 1e6)
    return {label: summarize(durations) for label, durations in sorted(by_label.items())}
