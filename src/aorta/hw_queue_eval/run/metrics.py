"""Statistics over samples and op intervals: plain functions, no torch.

Definitions (also in docs/metrics.md):
- percentiles use linear interpolation between closest ranks (numpy's default);
- a run is flagged unstable when IQR / median > 0.10;
- lane gap: start of an op minus the end of the op its lane finished most recently before it
  started, same iteration (lane = CPU: the hardware queue; GPU: the device); a switch when that
  op belongs to another stream;
- switch overhead (like for like): per (lane, previous op kind, next op kind) with switch gaps,
  median(switch gaps) − median(no-switch gaps between the same kinds, else after the same
  previous kind), averaged weighted by switch gaps;
- streams with an op in flight (achieved concurrency, wall clock) = Σ over streams of busy time
  (union of its op intervals) / window time.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aorta.hw_queue_eval.results.models import LaneSwitches, Stats, SwitchLatency, SwitchPair
from aorta.hw_queue_eval.run.loghist import LogHistogram, weighted_percentiles

INSTABILITY_IQR_RATIO = 0.10
MAX_REPORTED_PAIRS = 20


def summarize(samples: Sequence[float]) -> Stats | None:
    """mean, std, min, max, p50/p95/p99, median and IQR of `samples`; None when empty."""
    if len(samples) == 0:
        return None
    arr = np.asarray(samples, dtype=float)
    q1, p50, q3, p95, p99 = np.percentile(arr, [25, 50, 75, 95, 99])
    return Stats(
        count=int(arr.size),
        mean=float(arr.mean()),
        std=float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        min=float(arr.min()),
        max=float(arr.max()),
        p50=float(p50),
        p95=float(p95),
        p99=float(p99),
        median=float(p50),
        iqr=float(q3 - q1),
    )


def stability_warning(stats: Stats | None) -> str | None:
    """A warning when IQR/median exceeds 10 %, else None."""
    if not stats or stats["median"] <= 0:
        return None
    ratio = stats["iqr"] / stats["median"]
    if ratio > INSTABILITY_IQR_RATIO:
        return (
            f"unstable: IQR/median = {ratio:.0%} (> {INSTABILITY_IQR_RATIO:.0%}); "
            "use more iterations or a quieter machine"
        )
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
    """Average number of streams with an op in flight over the window (wall clock)."""
    if window_ms <= 0:
        return None
    return float(sum(busy_ms) / window_ms)


@dataclass(frozen=True)
class LaneGap:
    """One gap on a lane: `after` finished, then `before` started; a switch when their streams differ."""

    lane: Any
    after: str
    before: str
    switch: bool
    gap_ms: float


def lane_gaps(ops: Sequence[Any]) -> list[LaneGap]:
    """Per op: the gap after the op its lane finished most recently before it (same iteration)."""
    by_lane: dict[Any, list[Any]] = defaultdict(list)
    for op in ops:
        by_lane[op.queue].append(op)
    gaps: list[LaneGap] = []
    for lane, lane_ops in by_lane.items():
        ends = sorted(lane_ops, key=lambda o: o.end_ns)
        end_times = [o.end_ns for o in ends]
        for op in lane_ops:
            i = bisect.bisect_right(end_times, op.start_ns) - 1
            if i >= 0 and ends[i].iteration == op.iteration:
                prev = ends[i]
                gaps.append(
                    LaneGap(
                        lane,
                        prev.label,
                        op.label,
                        prev.stream != op.stream,
                        (op.start_ns - prev.end_ns) / 1e6,
                    )
                )
    return gaps


@dataclass
class MatchedGroup:
    """Switch gaps of one (lane, previous kind, next kind) and the no-switch gaps they face."""

    lane: Any
    after: str
    before: str
    switch: Any  # gaps in ms (a list), or a LogHistogram of gaps in ns (a folded run)
    baseline: Any
    matched_on: str  # "previous and next op kind" or "previous op kind"


def match_gaps(gaps: Sequence[LaneGap]) -> tuple[list[MatchedGroup], int]:
    """Like-for-like groups, and the number of switch gaps left without a baseline.

    A switch gap is compared with the no-switch gaps on its lane between the same previous and
    next op kinds; where there are none, with the no-switch gaps after the same previous op kind
    (gaps are mostly set by what just finished). Otherwise it stays unmatched.
    """
    switch: dict[tuple[Any, str, str], list[float]] = defaultdict(list)
    same_pair: dict[tuple[Any, str, str], list[float]] = defaultdict(list)
    same_after: dict[tuple[Any, str], list[float]] = defaultdict(list)
    for g in gaps:
        if g.switch:
            switch[(g.lane, g.after, g.before)].append(g.gap_ms)
        else:
            same_pair[(g.lane, g.after, g.before)].append(g.gap_ms)
            same_after[(g.lane, g.after)].append(g.gap_ms)
    groups: list[MatchedGroup] = []
    unmatched = 0
    for (lane, after, before), values in switch.items():
        if same_pair.get((lane, after, before)):
            groups.append(
                MatchedGroup(
                    lane, after, before, values, same_pair[(lane, after, before)], "previous and next op kind"
                )
            )
        elif same_after.get((lane, after)):
            groups.append(
                MatchedGroup(lane, after, before, values, same_after[(lane, after)], "previous op kind")
            )
        else:
            unmatched += len(values)
    return groups, unmatched


def _median(sample: Any) -> float:
    """Median of a list of gaps (ms), or of a histogram of gaps (ns) within its relative error."""
    if isinstance(sample, LogHistogram):
        return sample.percentiles([50])[0] / 1e6
    return float(np.median(sample))


def _residual_iqr(groups: Sequence[MatchedGroup], medians: list[tuple[float, float]]) -> float:
    """IQR of every matched gap minus the median of its group (histograms: from representatives)."""
    if not any(isinstance(g.switch, LogHistogram) for g in groups):
        residuals: list[float] = []
        for group, (s_med, n_med) in zip(groups, medians, strict=True):
            residuals.extend(v - s_med for v in group.switch)
            residuals.extend(v - n_med for v in group.baseline)
        q1, q3 = np.percentile(residuals, [25, 75])
        return float(q3 - q1)
    values, counts = [], []
    for group, (s_med, n_med) in zip(groups, medians, strict=True):
        for hist, med in ((group.switch, s_med), (group.baseline, n_med)):
            reps, n = hist.items()
            values.append(reps / 1e6 - med)
            counts.append(n)
    q1, q3 = weighted_percentiles(np.concatenate(values), np.concatenate(counts), [25, 75])
    return q3 - q1


def _like_for_like(groups: Sequence[MatchedGroup]) -> tuple[float | None, float | None, int]:
    """(switch-weighted mean of median differences, spread, matched switches) over groups."""
    weighted = 0.0
    matched = 0
    medians = [(_median(g.switch), _median(g.baseline)) for g in groups]
    for group, (s_med, n_med) in zip(groups, medians, strict=True):
        weighted += len(group.switch) * (s_med - n_med)
        matched += len(group.switch)
    if not matched:
        return None, None, 0
    return weighted / matched, _residual_iqr(groups, medians), matched


def switch_analysis(ops: Sequence[Any]) -> SwitchLatency:
    """Like-for-like switch overhead (see docs/metrics.md), or null with the reason."""
    gaps = lane_gaps(ops)
    groups, _ = match_gaps(gaps)
    lane_counts: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
    for g in gaps:
        lane_counts[g.lane][0 if g.switch else 1] += 1
    return switch_summary(groups, lane_counts, bool(ops))


def folded_switch_analysis(histograms: dict[tuple[Any, str, str, bool], LogHistogram]) -> SwitchLatency:
    """The switch analysis from lane-gap histograms (opfold), same definitions and matching."""
    switch: dict[tuple[Any, str, str], LogHistogram] = {}
    same_pair: dict[tuple[Any, str, str], LogHistogram] = {}
    same_after: dict[tuple[Any, str], LogHistogram] = defaultdict(LogHistogram)
    lane_counts: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
    for (lane, after, before, is_switch), hist in histograms.items():
        lane_counts[lane][0 if is_switch else 1] += len(hist)
        if is_switch:
            switch[(lane, after, before)] = hist
        else:
            same_pair[(lane, after, before)] = hist
            same_after[(lane, after)].merge(hist)
    groups = []
    for (lane, after, before), hist in switch.items():
        if (lane, after, before) in same_pair:
            groups.append(
                MatchedGroup(
                    lane, after, before, hist, same_pair[(lane, after, before)], "previous and next op kind"
                )
            )
        elif (lane, after) in same_after:
            groups.append(
                MatchedGroup(lane, after, before, hist, same_after[(lane, after)], "previous op kind")
            )
    return switch_summary(groups, lane_counts, bool(histograms) or None)


def _pair_order(group: MatchedGroup) -> tuple[int, str, str, str]:
    """Most switch gaps first; ties by lane and op kinds, so exact and folded runs agree."""
    return -len(group.switch), str(group.lane), group.after, group.before


def switch_summary(
    groups: Sequence[MatchedGroup], lane_counts: dict[Any, list[int]], recorded: bool | None
) -> SwitchLatency:
    """The switch_latency section from matched groups and per-lane [switch, no-switch] counts.

    `recorded`: whether any op was recorded (False gives the "no ops recorded" reason; None: ops
    were recorded but no lane gap survived the fold).
    """
    overhead, spread, matched = _like_for_like(groups)
    switches = sum(c[0] for c in lane_counts.values())
    per_lane: dict[str, LaneSwitches] = {}
    for lane in sorted(lane_counts, key=str):
        lane_overhead, _, lane_matched = _like_for_like([g for g in groups if g.lane == lane])
        lane_switches = lane_counts[lane][0]
        per_lane[str(lane)] = LaneSwitches(
            switches=lane_switches,
            matched_switches=lane_matched,
            switch_overhead_ms=lane_overhead,
            reason=None if lane_overhead is not None else _null_reason(lane_switches),
        )
    both = sum(len(g.switch) for g in groups if g.matched_on == "previous and next op kind")
    result = SwitchLatency(
        definition=(
            "switch-weighted mean over (lane, previous op kind, next op kind) of "
            "median(gap after another stream's op) - median(gap after the same "
            "stream's op between the same kinds, else after the same previous kind)"
        ),
        switch_count=switches,
        no_switch_count=sum(c[1] for c in lane_counts.values()),
        matched_switch_count=matched,
        matched_on_both_kinds=both,
        matched_on_previous_kind=matched - both,
        switch_overhead_ms=overhead,
        spread_ms=spread,
        spread_definition="IQR of every matched gap minus the median of its group",
        outside_spread=None if overhead is None else abs(overhead) > (spread or 0.0),
        per_lane=per_lane,
        pairs=[
            SwitchPair(
                lane=None if g.lane is None else str(g.lane),
                after=g.after,
                before=g.before,
                matched_on=g.matched_on,
                switch_gaps=len(g.switch),
                no_switch_gaps=len(g.baseline),
                switch_gap_median_ms=_median(g.switch),
                no_switch_gap_median_ms=_median(g.baseline),
            )
            for g in sorted(groups, key=_pair_order)[:MAX_REPORTED_PAIRS]
        ],
        reason=None,
    )
    if recorded is False:
        result["reason"] = "no ops recorded"
    elif overhead is None:
        result["reason"] = _null_reason(switches)
    return result


def unmeasured_switch_analysis(reason: str) -> SwitchLatency:
    """The switch_latency layout with every figure null and the reason (nothing was measured)."""
    result = switch_analysis([])
    result.update(
        switch_count=None,
        no_switch_count=None,
        matched_switch_count=None,
        matched_on_both_kinds=None,
        matched_on_previous_kind=None,
        reason=reason,
    )
    return result


def _null_reason(switches: int) -> str:
    if not switches:
        return "no stream switches on a shared lane were observed"
    return (
        "no like-for-like pairs: no switch gap has a same-stream gap after the same op kind on the same lane"
    )


def ready_to_start_delays_ms(ops: Sequence[Any]) -> list[float]:
    """Per op: start minus ready (queue wait + dispatch), where the backend knows `ready`."""
    return [(op.start_ns - op.ready_ns) / 1e6 for op in ops if op.ready_ns is not None]


def per_label_summary(ops: Sequence[Any]) -> dict[str, Stats | None]:
    """Per op label: count and duration statistics in ms."""
    by_label: dict[str, list[float]] = defaultdict(list)
    for op in ops:
        by_label[op.label].append((op.end_ns - op.start_ns) / 1e6)
    return {label: summarize(durations) for label, durations in sorted(by_label.items())}
