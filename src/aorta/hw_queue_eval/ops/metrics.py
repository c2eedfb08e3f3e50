"""Statistics over samples and op intervals: plain functions, no torch.

Definitions (also in docs/metrics.md):
- percentiles use linear interpolation between closest ranks (numpy's default);
- a run is flagged unstable when IQR / median > 0.10;
- lane gap: start of an op minus the end of the op its lane finished most recently before it
  started, same iteration (lane = CPU: the hardware queue; GPU: the device); a switch when that
  op belongs to another stream;
- a lane gap is ready when its next op was ready (enqueued, its waits satisfied: the record's
  ready time) at or before the lane's previous op ended; else it waited, for ready − that end
  (launch starvation: the lane idled for want of work); unknown without a ready time (GPU);
- switch overhead (like for like, ready gaps only): per (lane, previous op kind, next op kind)
  with switch gaps, median(switch gaps) − median(no-switch gaps between the same kinds, else
  after the same previous kind), averaged weighted by switch gaps; the same over every gap
  (launch waits included) is `all_gaps`;
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

from aorta.common.percent import percent_above
from aorta.hw_queue_eval.ops.loghist import LogHistogram, weighted_percentiles
from aorta.hw_queue_eval.results import upstream_keys
from aorta.hw_queue_eval.results.models import (
    AllGaps,
    GapReadiness,
    LaneSwitches,
    LaunchStarvation,
    Stats,
    SwitchLatency,
    SwitchPair,
)

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
            f"unstable: IQR/median = {percent_above(ratio, INSTABILITY_IQR_RATIO)} "
            f"(> {INSTABILITY_IQR_RATIO:.0%}); "
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
    """One gap on a lane: `after` finished, then `before` started; a switch when their streams differ.

    wait_ms: how long after `after` ended `before` became ready (0.0: it was ready by then, a
    ready gap); None where the record has no ready time (readiness unknown).
    """

    lane: Any
    after: str
    before: str
    switch: bool
    gap_ms: float
    wait_ms: float | None

    @property
    def ready(self) -> bool | None:
        """Whether the next op was ready when the lane's previous op ended (None: unknown)."""
        return None if self.wait_ms is None else self.wait_ms == 0.0


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
                        None if op.ready_ns is None else max(op.ready_ns - prev.end_ns, 0) / 1e6,
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


@dataclass(frozen=True)
class WaitFigures:
    """The launch waits (ms) of the gaps whose next op became ready after the lane's previous op ended."""

    count: int
    switch_count: int
    total_ms: float
    mean_ms: float | None
    p50_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, waits_ms: Sequence[float], switch_count: int) -> WaitFigures:
        """Exact figures over a list of waits."""
        if not len(waits_ms):
            return cls(0, 0, 0.0, None, None, None)
        arr = np.asarray(waits_ms, dtype=float)
        return cls(
            len(arr),
            switch_count,
            float(arr.sum()),
            float(arr.mean()),
            float(np.median(arr)),
            float(arr.max()),
        )


@dataclass
class LaneTally:
    """One lane's gap counts: switch / no-switch, and the switch gaps by readiness."""

    switches: int = 0
    no_switches: int = 0
    ready_switches: int = 0
    unknown_switches: int = 0
    ready_gaps: int = 0
    waited_gaps: int = 0
    unknown_gaps: int = 0

    def add(self, switch: bool, ready: bool | None, n: int = 1) -> None:
        """Count n gaps of one kind."""
        if switch:
            self.switches += n
            self.ready_switches += n if ready else 0
            self.unknown_switches += n if ready is None else 0
        else:
            self.no_switches += n
        if ready is None:
            self.unknown_gaps += n
        elif ready:
            self.ready_gaps += n
        else:
            self.waited_gaps += n

    def merge(self, other: LaneTally) -> None:
        """Add another lane's counts (totals over lanes)."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def switch_analysis(
    ops: Sequence[Any], window_ms: float | None = None, waits: int | None = None
) -> SwitchLatency:
    """Like-for-like switch overhead over ready gaps and the launch waits apart (see
    docs/metrics.md), or null figures with the reason.

    window_ms: the window's length (for the waits' share of lane time); waits: cross-stream waits
    enqueued in the window (says whether a launch wait can be anything but the host's launch).
    """
    gaps = lane_gaps(ops)
    tallies: dict[Any, LaneTally] = defaultdict(LaneTally)
    lane_waits: dict[Any, list[LaneGap]] = defaultdict(list)
    for g in gaps:
        tallies[g.lane].add(g.switch, g.ready)
        if g.ready is False:
            lane_waits[g.lane].append(g)
    waited = [g for g in gaps if g.ready is False]
    result = switch_summary(
        SwitchInputs(
            groups=match_gaps([g for g in gaps if g.ready])[0],
            all_groups=match_gaps(gaps)[0],
            tallies=tallies,
            waits=WaitFigures.of([g.wait_ms for g in waited], sum(g.switch for g in waited)),  # type: ignore[misc]
            lane_waits={
                lane: WaitFigures.of([g.wait_ms for g in w], sum(g.switch for g in w))  # type: ignore[misc]
                for lane, w in lane_waits.items()
            },
        ),
        bool(ops),
        window_ms,
        waits,
    )
    result.update(upstream_keys.upstream_switch(ops))  # type: ignore[typeddict-item]
    return result


def folded_switch_analysis(
    histograms: dict[tuple[Any, str, str, bool, bool | None], LogHistogram],
    waits: WaitFigures,
    lane_waits: dict[Any, WaitFigures],
    window_ms: float | None = None,
    cross_waits: int | None = None,
) -> SwitchLatency:
    """The switch analysis from lane-gap histograms (opfold), same definitions and matching;
    keys (lane, previous kind, next kind, switch, ready), the launch waits folded apart."""
    tallies: dict[Any, LaneTally] = defaultdict(LaneTally)
    ready_only: dict[tuple[Any, str, str, bool], LogHistogram] = {}
    every: dict[tuple[Any, str, str, bool], LogHistogram] = defaultdict(LogHistogram)
    for (lane, after, before, is_switch, ready), hist in histograms.items():
        tallies[lane].add(is_switch, ready, len(hist))
        every[(lane, after, before, is_switch)].merge(hist)
        if ready:
            ready_only[(lane, after, before, is_switch)] = hist
    result = switch_summary(
        SwitchInputs(_folded_groups(ready_only), _folded_groups(every), tallies, waits, lane_waits),
        bool(histograms) or None,
        window_ms,
        cross_waits,
    )
    result.update(upstream_keys.unmeasured_upstream_switch(FOLDED_UPSTREAM))  # type: ignore[typeddict-item]
    return result


def _folded_groups(histograms: dict[tuple[Any, str, str, bool], LogHistogram]) -> list[MatchedGroup]:
    """`match_gaps` over histograms keyed (lane, previous kind, next kind, switch)."""
    switch: dict[tuple[Any, str, str], LogHistogram] = {}
    same_pair: dict[tuple[Any, str, str], LogHistogram] = {}
    same_after: dict[tuple[Any, str], LogHistogram] = defaultdict(LogHistogram)
    for (lane, after, before, is_switch), hist in histograms.items():
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
    return groups


def _pair_order(group: MatchedGroup) -> tuple[int, str, str, str]:
    """Most switch gaps first; ties by lane and op kinds, so exact and folded runs agree."""
    return -len(group.switch), str(group.lane), group.after, group.before


@dataclass
class SwitchInputs:
    """What the switch section is built from, exact or folded alike."""

    groups: list[MatchedGroup]  # like-for-like groups over ready gaps
    all_groups: list[MatchedGroup]  # the same over every gap, ready or not
    tallies: dict[Any, LaneTally]
    waits: WaitFigures  # every lane's launch waits together
    lane_waits: dict[Any, WaitFigures]


FOLDED_UPSTREAM = (
    "the window's ops were folded into lane-gap histograms (more ops than rows kept): upstream's "
    "figure orders every op of an iteration by its end"
)
SWITCH_DEFINITION = (
    "over ready gaps (the next op was ready when the lane's previous op ended): switch-weighted "
    "mean over (lane, previous op kind, next op kind) of median(gap after another stream's op) - "
    "median(gap after the same stream's op between the same kinds, else after the same previous kind)"
)
READY_DEFINITION = (
    "a lane gap is ready when its next op's ready time (enqueued by the host, its stream's previous "
    "op done, its cross-stream waits satisfied) is at or before the end of the lane's previous op; "
    "waited when later; unknown where the op record has no ready time (GPU)"
)
STARVATION_DEFINITION = (
    "lane gaps whose next op became ready only after the lane's previous op ended; wait = ready - "
    "that end, the time the lane sat idle for want of its next op"
)
ALL_GAPS_DEFINITION = (
    "the same like-for-like figure over every lane gap, ready or not: it includes the launch waits "
    "(files written before the split reported this as switch_overhead_ms)"
)
UNKNOWN_READINESS = (
    "readiness unknown: the op records carry no ready time (GPU backend: an op's host launch is "
    "timed on the host clock, its start on the device's timing events, which are not comparable), "
    "so no gap is known to have had its next op ready"
)


def switch_summary(
    inputs: SwitchInputs,
    recorded: bool | None,
    window_ms: float | None = None,
    cross_waits: int | None = None,
) -> SwitchLatency:
    """The switch_latency section (ready-gap overhead, every-gap figure, launch starvation).

    `recorded`: whether any op was recorded (False gives the "no ops recorded" reason; None: ops
    were recorded but no lane gap survived the fold).
    """
    groups, tallies = inputs.groups, inputs.tallies
    overhead, spread, matched = _like_for_like(groups)
    total = LaneTally()
    for tally in tallies.values():
        total.merge(tally)
    per_lane: dict[str, LaneSwitches] = {}
    for lane in sorted(tallies, key=str):
        lane_overhead, _, lane_matched = _like_for_like([g for g in groups if g.lane == lane])
        tally = tallies[lane]
        lane_waits = inputs.lane_waits.get(lane, WaitFigures.of([], 0))
        known = tally.ready_gaps + tally.waited_gaps
        per_lane[str(lane)] = LaneSwitches(
            switches=tally.switches,
            matched_switches=lane_matched,
            switch_overhead_ms=lane_overhead,
            reason=None if lane_overhead is not None else _null_reason(tally),
            launch_wait_gaps=lane_waits.count if known else None,
            launch_wait_total_ms=lane_waits.total_ms if known else None,
        )
    both = sum(len(g.switch) for g in groups if g.matched_on == "previous and next op kind")
    all_overhead, all_spread, all_matched = _like_for_like(inputs.all_groups)
    result = SwitchLatency(
        definition=SWITCH_DEFINITION,
        switch_count=total.switches,
        no_switch_count=total.no_switches,
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
        gap_readiness=GapReadiness(
            definition=READY_DEFINITION,
            ready=total.ready_gaps,
            waited=total.waited_gaps,
            unknown=total.unknown_gaps,
            ready_switches=total.ready_switches,
        ),
        launch_starvation=_starvation(inputs.waits, total, len(tallies), window_ms, cross_waits),
        all_gaps=AllGaps(
            definition=ALL_GAPS_DEFINITION,
            switch_overhead_ms=all_overhead,
            spread_ms=all_spread,
            matched_switch_count=all_matched,
        ),
    )
    if recorded is False:
        result["reason"] = "no ops recorded"
    elif overhead is None:
        result["reason"] = _null_reason(total)
    return result


def _starvation(
    waits: WaitFigures, total: LaneTally, lanes: int, window_ms: float | None, cross_waits: int | None
) -> LaunchStarvation:
    """The launch_starvation block: gaps that waited for their next op, null where unknown."""
    known = total.ready_gaps + total.waited_gaps
    block = LaunchStarvation(
        definition=STARVATION_DEFINITION,
        cause=_wait_cause(cross_waits),
        cross_stream_waits=cross_waits,
        gaps=waits.count if known else None,
        switch_gaps=waits.switch_count if known else None,
        gaps_with_known_readiness=known,
        wait_total_ms=waits.total_ms if known else None,
        wait_mean_ms=waits.mean_ms,
        wait_p50_ms=waits.p50_ms,
        wait_max_ms=waits.max_ms,
        share_of_lane_time=None,
        share_definition="wait_total_ms / (window_ms x lanes with a lane gap)",
        reason=None,
    )
    if known and window_ms:
        block["share_of_lane_time"] = waits.total_ms / (window_ms * lanes)
    if not known:
        block["reason"] = UNKNOWN_READINESS if total.unknown_gaps else "no lane gaps"
    elif not waits.count:
        block["reason"] = "no gap waited: every next op was ready when the lane's previous op ended"
    elif not window_ms:
        block["reason"] = "share_of_lane_time: the window length was not given"
    return block


def _wait_cause(cross_waits: int | None) -> str:
    """What a launch wait can be: the host's launch alone only when nothing waited across streams."""
    if cross_waits == 0:
        return "host launch (the window had no cross-stream waits)"
    if cross_waits is None:
        return "host launch, or a cross-stream wait the op sat behind (not counted here)"
    return (
        f"host launch, or a cross-stream wait the op sat behind (the window had {cross_waits}; "
        "the op record does not tell the two apart)"
    )


def unmeasured_switch_analysis(reason: str) -> SwitchLatency:
    """The switch_latency layout with every figure null and the reason (nothing was measured)."""
    result = switch_analysis([])
    result["switch_count"] = result["no_switch_count"] = result["matched_switch_count"] = None
    result["matched_on_both_kinds"] = result["matched_on_previous_kind"] = None
    result["reason"] = reason
    readiness = result["gap_readiness"]
    readiness["ready"] = readiness["waited"] = readiness["unknown"] = readiness["ready_switches"] = None
    result["launch_starvation"]["gaps_with_known_readiness"] = None
    result["launch_starvation"]["reason"] = reason
    result["all_gaps"]["matched_switch_count"] = None
    result.update(upstream_keys.unmeasured_upstream_switch(reason))  # type: ignore[typeddict-item]
    return result


def _null_reason(tally: LaneTally) -> str:
    """Why the ready-gap switch overhead of a lane (or of every lane together) is null."""
    if not tally.switches:
        return "no stream switches on a shared lane were observed"
    if not tally.ready_switches:
        if tally.unknown_switches == tally.switches:
            return UNKNOWN_READINESS + " (all_gaps compares every gap)"
        return (
            "no switch gap had its next op ready when the lane's previous op ended: "
            f"{tally.switches - tally.ready_switches - tally.unknown_switches} waited for it "
            "(launch_starvation)"
        )
    return (
        "no like-for-like pairs: no ready switch gap has a ready same-stream gap after the same op "
        "kind on the same lane"
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
