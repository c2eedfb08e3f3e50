"""Scaling analysis of a stream sweep: efficiency, peak, saturation knee, verdict. Pure functions.

Definitions (docs/sweep-compare-report.md):
- ideal throughput growth from point a to b: W_b / W_a when work grows with the streams
  (work_scaling "per_stream", W = work per iteration), else n_b / n_a ("fixed" work split over more
  streams);
- efficiency(n) = (T_n / T_1st) / ideal growth from the first point to n;
- a step a→b *scales* when it captures at least KNEE_GAIN_FRACTION of the ideal extra throughput:
  (T_b / T_a − 1) / (ideal − 1) ≥ KNEE_GAIN_FRACTION; steps without extra ideal work are skipped;
- knee = the smallest stream count K from which scaling never resumes: no later point b captures
  KNEE_GAIN_FRACTION of the ideal extra throughput over K (so the knee never sits after the
  peak's rise and never contradicts the table);
- with repeats every throughput is the median over the point's runs and has an order-statistic
  CI; a step is rising/falling/flat only when the CIs say so (else "uncertain"), and the verdict
  names its confidence: "unknown" with fewer than MIN_RUNS runs per point, "high" when the CIs
  separate the knee from its neighbours, else "low"; unstable points weaken it;
- a latency (or kernel-measured dispatch P99) jump at b: value_b / value_a ≥ JUMP_RATIO. On an
  ideal machine neither grows with the streams (per-stream work: iteration time stays constant;
  fixed work: it falls), so a rise of JUMP_RATIO is contention, not extra work.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass, field

from aorta.common.finite import ratio
from aorta.common.jsontypes import JsonObject
from aorta.common.percent import percent_above
from aorta.hw_queue_eval.ops.metrics import INSTABILITY_IQR_RATIO

KNEE_GAIN_FRACTION = 0.2
JUMP_RATIO = 1.5
FLAT_TOLERANCE = 0.05  # a step is flat when its whole CI of the ratio lies within ±5 %
MIN_RUNS = 3  # runs per point for a confidence other than "unknown"


@dataclass(frozen=True)
class ScalingPoint:
    """What the analysis needs from one sweep stream count (medians over its ok runs)."""

    streams: int
    throughput: float
    work_per_iteration: float | None
    latency_p99_ms: float | None
    dispatch_p99_us: float | None
    runs: int = 1
    throughput_low: float | None = None  # CI of the median throughput (None with one run)
    throughput_high: float | None = None
    ci_level: float | None = None
    iqr_over_median: float | None = None  # worst run's iteration IQR/median
    throughput_runs: list[float] = field(default_factory=list)


def _ebpf_dispatch_us(result: JsonObject, key: str) -> float | None:
    """A documented figure of the run's `ebpf_queue_metrics` (the summary of the family that saw
    the traced submissions, named by its `source`); None when the run was not traced, tracing
    failed, or no family measured it. Read by name: a figure of another family never stands in."""
    section = result.get("ebpf_queue_metrics")
    if not isinstance(section, dict) or section.get("status") != "ok":
        return None
    value = section.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def dispatch_p99_us(result: JsonObject) -> float | None:
    """Kernel-measured submit→dispatch P99 (µs) of a traced run."""
    return _ebpf_dispatch_us(result, "submit_to_dispatch_p99_us")


def dispatch_avg_us(result: JsonObject) -> float | None:
    """Kernel-measured submit→dispatch average (µs) of a traced run."""
    return _ebpf_dispatch_us(result, "submit_to_dispatch_avg_us")


def scaling_point(result: JsonObject) -> ScalingPoint | None:
    """A ScalingPoint from a run result, or None when it has no throughput."""
    if result.get("throughput") is None:
        return None
    lat = result.get("latency_ms") or {}
    return ScalingPoint(
        streams=int(result["stream_count"]),
        throughput=float(result["throughput"]),
        work_per_iteration=(result.get("metadata") or {}).get("work_per_iteration"),
        latency_p99_ms=lat.get("p99"),
        dispatch_p99_us=dispatch_p99_us(result),
    )


def _median(values: list[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def group_points(results: list[JsonObject]) -> list[ScalingPoint]:
    """One ScalingPoint per stream count: medians over its runs, the CI of the throughput."""
    from aorta.hw_queue_eval.analysis.stats import median_ci

    by_streams: dict[int, list[ScalingPoint]] = {}
    iqr: dict[int, list[float]] = {}
    for result in results:
        point = scaling_point(result)
        if point is None:
            continue
        by_streams.setdefault(point.streams, []).append(point)
        lat = result.get("latency_ms") or {}
        numbers = all(isinstance(lat.get(k), (int, float)) for k in ("iqr", "p50"))
        spread = ratio(lat["iqr"], lat["p50"]) if numbers else None
        if spread is not None:
            iqr.setdefault(point.streams, []).append(spread)
    points = []
    for streams in sorted(by_streams):
        group = by_streams[streams]
        tputs = [p.throughput for p in group]
        ci = median_ci(tputs)
        points.append(
            ScalingPoint(
                streams=streams,
                throughput=ci.median,
                work_per_iteration=group[0].work_per_iteration,
                latency_p99_ms=_median([p.latency_p99_ms for p in group]),
                dispatch_p99_us=_median([p.dispatch_p99_us for p in group]),
                runs=len(group),
                throughput_low=ci.low,
                throughput_high=ci.high,
                ci_level=ci.level,
                iqr_over_median=max(iqr[streams]) if iqr.get(streams) else None,
                throughput_runs=tputs,
            )
        )
    return points


def ideal_growth(a: ScalingPoint, b: ScalingPoint, work_scaling: str) -> float:
    """Throughput ratio b/a a perfectly parallel machine would show."""
    if work_scaling == "per_stream" and a.work_per_iteration and b.work_per_iteration:
        growth = ratio(b.work_per_iteration, a.work_per_iteration)
        if growth is not None:
            return growth
    return b.streams / a.streams


def efficiencies(points: list[ScalingPoint], work_scaling: str) -> list[float | None]:
    """Per point: achieved throughput growth from the first point over the ideal growth."""
    if not points or points[0].throughput <= 0:
        return [None] * len(points)
    first = points[0]
    out = []
    for p in points:
        growth = ratio(p.throughput, first.throughput)
        out.append(None if growth is None else ratio(growth, ideal_growth(first, p, work_scaling)))
    return out


def captured(
    a: ScalingPoint, b: ScalingPoint, work_scaling: str, t_a: float | None = None, t_b: float | None = None
) -> float | None:
    """Fraction of the ideal extra throughput the step a→b captured (None: no extra ideal work).

    `t_a`/`t_b` replace the medians (CI bounds give the step's best and worst case).
    """
    ideal = ideal_growth(a, b, work_scaling)
    t_a = a.throughput if t_a is None else t_a
    t_b = b.throughput if t_b is None else t_b
    growth = ratio(t_b, t_a) if ideal > 1.0 and t_a > 0 else None
    return None if growth is None else ratio(growth - 1.0, ideal - 1.0)


def step_trend(a: ScalingPoint, b: ScalingPoint) -> str:
    """rising / falling / flat when the CIs say so; uncertain when they overlap; unknown
    without CIs (one run per point)."""
    if None in (a.throughput_low, a.throughput_high, b.throughput_low, b.throughput_high):
        return "unknown"
    assert a.throughput_low is not None and a.throughput_high is not None
    assert b.throughput_low is not None and b.throughput_high is not None
    if b.throughput_low > a.throughput_high:
        return "rising"
    if b.throughput_high < a.throughput_low:
        return "falling"
    low, high = ratio(b.throughput_low, a.throughput_high), ratio(b.throughput_high, a.throughput_low)
    if (
        a.throughput_low > 0
        and low is not None
        and high is not None
        and low >= 1 - FLAT_TOLERANCE
        and high <= 1 + FLAT_TOLERANCE
    ):
        return "flat"
    return "uncertain"


def find_knee(points: list[ScalingPoint], work_scaling: str) -> tuple[int | None, list[JsonObject]]:
    """Stream count where throughput stops scaling (None: scales to the end) and each step.

    The knee is the smallest K (not the last point) such that no later point b captures
    KNEE_GAIN_FRACTION of the ideal extra throughput over K: scaling never resumes after it.
    """
    steps = []
    for a, b in itertools.pairwise(points):
        gain = captured(a, b, work_scaling)
        step: JsonObject = {
            "from": a.streams,
            "to": b.streams,
            "captured": gain,
            "trend": step_trend(a, b),
        }
        if gain is None:
            step["note"] = "no extra ideal throughput in this step"
        steps.append(step)
    for index, k in enumerate(points[:-1]):
        gains = [captured(k, b, work_scaling) for b in points[index + 1 :]]
        if any(g is not None for g in gains) and all(g is None or g < KNEE_GAIN_FRACTION for g in gains):
            return k.streams, steps
    return None, steps


def find_jump(points: list[ScalingPoint], field: str) -> int | None:
    """First stream count where `field` grows by JUMP_RATIO or more over the previous point."""
    for a, b in itertools.pairwise(points):
        va, vb = getattr(a, field), getattr(b, field)
        jump = ratio(vb, va) if va is not None and vb is not None and va > 0 else None
        if jump is not None and jump >= JUMP_RATIO:
            return b.streams
    return None


@dataclass(frozen=True)
class UnstablePoint:
    """A stream count whose worst run's iteration IQR/median was above INSTABILITY_IQR_RATIO."""

    streams: int
    iqr_over_median: float


@dataclass(frozen=True)
class ScalingAnalysis:
    """Result of `analyze`: stored in the sweep file and shown by sweep and report."""

    stream_counts: list[int]
    efficiency: list[float | None]
    peak_streams: int | None
    peak_throughput: float | None
    knee_streams: int | None
    steps: list[JsonObject]
    latency_jump_streams: int | None
    dispatch_jump_streams: int | None
    pool_size: int | None
    pool_source: str
    cpu_cores: int | None
    backend: str | None
    verdict: str
    knee_reason: str | None = None  # knee_reason(): why the knee is there and not at the peak
    runs_per_point: list[int] = field(default_factory=list)
    throughput_ci: list[list[float] | None] = field(default_factory=list)  # [low, high] each
    ci_level: float | None = None  # the lowest CI level over the points
    confidence: str = "unknown"  # high | low | unknown
    confidence_reason: str = ""
    unstable_points: list[UnstablePoint] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)  # per point, stream_counts order

    def to_dict(self) -> JsonObject:
        """The JSON analysis, with upstream AORTA's keys (results/upstream_keys.py)."""
        from aorta.hw_queue_eval.results.upstream_keys import scaling_keys

        return {**asdict(self), **scaling_keys(self.stream_counts, self.throughputs, self.peak_streams)}


def pool_size_of(result: JsonObject) -> tuple[int | None, str]:
    """Hardware-queue pool size of a run: its queue mapping, else GPU_MAX_HW_QUEUES it ran with."""
    pool = (result.get("queue_mapping") or {}).get("pool_size")
    if isinstance(pool, int):
        return pool, "queue_mapping.pool_size"
    knob = ((result.get("environment") or {}).get("env_knobs") or {}).get("GPU_MAX_HW_QUEUES")
    if knob and str(knob).strip().isdigit():
        return int(knob), "GPU_MAX_HW_QUEUES"
    return None, "not known (runtime-managed, GPU_MAX_HW_QUEUES unset)"


def verdict_text(
    knee: int | None,
    last: int,
    pool: int | None,
    cores: int | None,
    backend: str | None,
    latency_jump: int | None,
    dispatch_jump: int | None,
) -> str:
    """One line that only claims what the data shows."""
    if knee is None:
        text = f"throughput still scales up to {last} streams (the largest measured)"
    elif pool is not None and knee == pool:
        text = (
            f"throughput stops scaling at {knee} streams = the hardware-queue pool: "
            "streams beyond it share queues"
        )
    elif backend == "cpu" and cores is not None and knee == cores:
        text = (
            f"throughput stops scaling at {knee} streams = the CPU core count ({cores}): "
            "worker queues compete for cores"
            + (f" before the queue pool ({pool}) is full" if pool and pool > knee else "")
        )
    else:
        pool_text = f"pool {pool}" if pool is not None else "pool size unknown"
        core_text = f", {cores} cores" if backend == "cpu" and cores else ""
        text = f"throughput stops scaling at {knee} streams ({pool_text}{core_text})"
    if latency_jump is not None:
        text += f"; P99 iteration latency jumps at {latency_jump} streams"
    if dispatch_jump is not None:
        text += f"; kernel-measured dispatch P99 jumps at {dispatch_jump} streams"
    return text


def knee_reason(points: list[ScalingPoint], knee: int | None, work_scaling: str) -> str | None:
    """Why the knee sits where it does, from the figures that placed it: the best share of the
    ideal extra throughput any later point captures over K, and the rise to a later peak."""
    if knee is None:
        return None
    index = {p.streams: i for i, p in enumerate(points)}
    k = points[index[knee]]
    later = [(b, captured(k, b, work_scaling)) for b in points[index[knee] + 1 :]]
    scored = [(b, g) for b, g in later if g is not None]
    if not scored:
        return None
    best, gain = max(scored, key=lambda bg: bg[1])
    text = (
        f"from {knee} streams on, no added stream captures {KNEE_GAIN_FRACTION:.0%} of the ideal "
        f"extra throughput (best: {knee}→{best.streams} captures {gain:.0%})"
    )
    peak = max(points, key=lambda p: p.throughput)
    if peak.streams > knee and k.throughput > 0:
        rise = (peak.throughput / k.throughput - 1.0) * 100.0
        ideal = (ideal_growth(k, peak, work_scaling) - 1.0) * 100.0
        text += (
            f"; throughput still rises to the peak at {peak.streams} streams by {rise:.1f}% "
            f"over {knee} (ideal +{ideal:.0f}%)"
        )
    return text


def confidence_of(points: list[ScalingPoint], knee: int | None, work_scaling: str) -> tuple[str, str]:
    """(high | low | unknown, why): whether the CIs separate the knee from its neighbours."""
    fewest = min(p.runs for p in points)
    if fewest < MIN_RUNS:
        return "unknown", (
            f"{fewest} run(s) at some point: run-to-run noise not measured; "
            f"rerun with --repeats {MIN_RUNS} (or more)"
        )
    level = min(p.ci_level or 0.0 for p in points)
    index = {p.streams: i for i, p in enumerate(points)}
    doubts = []
    if knee is not None:
        k = points[index[knee]]
        for b in points[index[knee] + 1 :]:  # best case for b, worst for K: still below?
            gain = captured(k, b, work_scaling, k.throughput_low, b.throughput_high)
            if gain is not None and gain >= KNEE_GAIN_FRACTION:
                doubts.append(f"{knee}→{b.streams} may still scale within the CIs")
                break
        rise_to = k
    else:
        rise_to = points[-1]
    i = index[rise_to.streams]
    if i > 0:  # the last rise before the knee (or to the end) must hold in the worst case
        a = points[i - 1]
        gain = captured(a, rise_to, work_scaling, a.throughput_high, rise_to.throughput_low)
        if gain is not None and gain < KNEE_GAIN_FRACTION:
            doubts.append(f"the rise {a.streams}→{rise_to.streams} is within the CIs")
    if doubts:
        return "low", "; ".join(doubts) + f" ({fewest}+ runs per point, {level:.0%} CIs)"
    return "high", f"the {level:.0%} CIs of the medians separate it ({fewest}+ runs per point)"


def unstable_points(points: list[ScalingPoint]) -> list[UnstablePoint]:
    """Points whose worst run had iteration IQR/median above the per-run warning level."""
    return [
        UnstablePoint(p.streams, p.iqr_over_median)
        for p in points
        if p.iqr_over_median is not None and p.iqr_over_median > INSTABILITY_IQR_RATIO
    ]


def analyze(results: list[JsonObject], work_scaling: str) -> ScalingAnalysis | None:
    """Scaling analysis of ok run results (any order, repeats of a stream count grouped);
    None with fewer than two usable stream counts."""
    points = group_points(results)
    if len(points) < 2:
        return None
    first_result = min(
        (r for r in results if scaling_point(r) is not None), key=lambda r: int(r["stream_count"])
    )
    pool, pool_source = pool_size_of(first_result)
    env = first_result.get("environment") or {}
    backend = env.get("backend") or (first_result.get("config") or {}).get("backend")
    cores = env.get("cpu_count")
    knee, steps = find_knee(points, work_scaling)
    peak = max(points, key=lambda p: p.throughput)
    lat_jump = find_jump(points, "latency_p99_ms")
    disp_jump = find_jump(points, "dispatch_p99_us")
    confidence, why = confidence_of(points, knee, work_scaling)
    unstable = unstable_points(points)
    warnings = []
    if unstable:
        worst = percent_above(max(u.iqr_over_median for u in unstable), INSTABILITY_IQR_RATIO)
        warnings.append(
            f"unstable points (iteration IQR/median > {INSTABILITY_IQR_RATIO:.0%}, up "
            f"to {worst}): {', '.join(str(u.streams) for u in unstable)} "
            "streams; the verdict is weakened by them"
        )
        if confidence == "high":
            confidence, why = "low", why + "; weakened by unstable points"
    verdict = verdict_text(knee, points[-1].streams, pool, cores, backend, lat_jump, disp_jump)
    verdict += f" [confidence {confidence}: {why}]"
    if unstable:
        verdict += f"; unstable points at {', '.join(str(u.streams) for u in unstable)} streams"
    return ScalingAnalysis(
        stream_counts=[p.streams for p in points],
        throughputs=[p.throughput for p in points],
        efficiency=efficiencies(points, work_scaling),
        peak_streams=peak.streams,
        peak_throughput=peak.throughput,
        knee_streams=knee,
        steps=steps,
        latency_jump_streams=lat_jump,
        dispatch_jump_streams=disp_jump,
        pool_size=pool,
        pool_source=pool_source,
        cpu_cores=cores,
        backend=backend,
        verdict=verdict,
        knee_reason=knee_reason(points, knee, work_scaling),
        runs_per_point=[p.runs for p in points],
        throughput_ci=[
            None
            if p.throughput_low is None or p.throughput_high is None
            else [p.throughput_low, p.throughput_high]
            for p in points
        ],
        ci_level=min((p.ci_level for p in points if p.ci_level is not None), default=None),
        confidence=confidence,
        confidence_reason=why,
        unstable_points=unstable,
        warnings=warnings,
    )
