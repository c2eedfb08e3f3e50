"""Scaling analysis of a stream sweep: efficiency, peak, saturation knee, verdict. Pure functions.

Definitions (docs/sweep-compare-report.md):
- ideal throughput growth from point a to b: W_b / W_a when work grows with the streams
  (work_scaling "per_stream", W = work per iteration), else n_b / n_a ("fixed" work split over more
  streams);
- efficiency(n) = (T_n / T_1st) / ideal growth from the first point to n;
- a step a→b *scales* when it captures at least KNEE_GAIN_FRACTION of the ideal extra throughput:
  (T_b / T_a − 1) / (ideal − 1) ≥ KNEE_GAIN_FRACTION; steps without extra ideal work are skipped;
- knee = the stream count before the first step that does not scale;
- a latency (or kernel-measured dispatch P99) jump at b: value_b / value_a ≥ JUMP_RATIO. On an
  ideal machine neither grows with the streams (per-stream work: iteration time stays constant;
  fixed work: it falls), so a rise of JUMP_RATIO is contention, not extra work.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass
from typing import Any

KNEE_GAIN_FRACTION = 0.2
JUMP_RATIO = 1.5


@dataclass(frozen=True)
class ScalingPoint:
    """What the analysis needs from one ok sweep point."""

    streams: int
    throughput: float
    work_per_iteration: float | None
    latency_p99_ms: float | None
    dispatch_p99_us: float | None


_DISPATCH_P99 = re.compile(r"dispatch.*p99|p99.*dispatch")
_DISPATCH_AVG = re.compile(r"dispatch.*(avg|mean)|(avg|mean).*dispatch")


def _flatten(section: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict as {'a.b.c': value} (bools excluded)."""
    out: dict[str, float] = {}
    if isinstance(section, dict):
        for key, value in section.items():
            out.update(_flatten(value, f"{prefix}{key}."))
    elif isinstance(section, (int, float)) and not isinstance(section, bool):
        out[prefix[:-1]] = float(section)
    return out


def flatten_numbers(section: Any) -> dict[str, float]:
    """Public form of `_flatten`, used by compare's eBPF diff and the report tables."""
    return _flatten(section)


def _ebpf_dispatch_us(result: dict[str, Any], pattern: re.Pattern[str]) -> float | None:
    """First numeric `ebpf_queue_metrics` leaf whose key matches `pattern`, in µs (keys ending _ms
    are converted); None when the run was not traced or has no such value."""
    flat = _flatten(result.get("ebpf_queue_metrics") or {})
    for key in sorted(flat):
        if pattern.search(key.lower()):
            return flat[key] * 1000.0 if key.lower().endswith("_ms") else flat[key]
    return None


def dispatch_p99_us(result: dict[str, Any]) -> float | None:
    """Kernel-measured submit→dispatch P99 (µs) of a traced run."""
    return _ebpf_dispatch_us(result, _DISPATCH_P99)


def dispatch_avg_us(result: dict[str, Any]) -> float | None:
    """Kernel-measured submit→dispatch average (µs) of a traced run."""
    return _ebpf_dispatch_us(result, _DISPATCH_AVG)


def point_from_result(result: dict[str, Any]) -> ScalingPoint | None:
    """A ScalingPoint from a run result, or None when it has no throughput."""
    if result.get("throughput") is None:
        return None
    lat = result.get("latency_ms") or {}
    return ScalingPoint(
        streams=int(result["stream_count"]),
        throughput=float(result["throughput"]),
        work_per_iteration=(result.get("metadata") or {}).get("work_per_iteration"),
        latency_p99_ms=lat.get("p99"),
        dispatch_p99_us=dispatch_p99_us(result))


def ideal_growth(a: ScalingPoint, b: ScalingPoint, work_scaling: str) -> float:
    """Throughput ratio b/a a perfectly parallel machine would show."""
    if work_scaling == "per_stream" and a.work_per_iteration and b.work_per_iteration:
        return b.work_per_iteration / a.work_per_iteration
    return b.streams / a.streams


def efficiencies(points: list[ScalingPoint], work_scaling: str) -> list[float | None]:
    """Per point: achieved throughput growth from the first point over the ideal growth."""
    if not points or points[0].throughput <= 0:
        return [None] * len(points)
    first = points[0]
    return [p.throughput / first.throughput / ideal_growth(first, p, work_scaling) for p in points]


def find_knee(points: list[ScalingPoint], work_scaling: str) -> tuple[int | None, list[dict]]:
    """Stream count where throughput stops scaling (None: scales to the end) and each step's gain.

    The knee starts the final run of steps that do not scale: a flat step followed by one that
    scales again (noise, or a second regime) is not where scaling stopped.
    """
    steps = []
    knee = None
    for a, b in itertools.pairwise(points):
        ideal = ideal_growth(a, b, work_scaling)
        if ideal <= 1.0 or a.throughput <= 0:
            steps.append({"from": a.streams, "to": b.streams, "captured": None,
                          "note": "no extra ideal throughput in this step"})
            continue
        captured = (b.throughput / a.throughput - 1.0) / (ideal - 1.0)
        steps.append({"from": a.streams, "to": b.streams, "captured": captured})
        if captured < KNEE_GAIN_FRACTION:
            knee = a.streams if knee is None else knee
        else:
            knee = None
    return knee, steps


def find_jump(points: list[ScalingPoint], field: str) -> int | None:
    """First stream count where `field` grows by JUMP_RATIO or more over the previous point."""
    for a, b in itertools.pairwise(points):
        va, vb = getattr(a, field), getattr(b, field)
        if va is not None and vb is not None and va > 0 and vb / va >= JUMP_RATIO:
            return b.streams
    return None


@dataclass(frozen=True)
class ScalingAnalysis:
    """Result of `analyze`: stored in the sweep file and shown by sweep and report."""

    stream_counts: list[int]
    efficiency: list[float | None]
    peak_streams: int | None
    peak_throughput: float | None
    knee_streams: int | None
    steps: list[dict]
    latency_jump_streams: int | None
    dispatch_jump_streams: int | None
    pool_size: int | None
    pool_source: str
    cpu_cores: int | None
    backend: str | None
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pool_size_of(result: dict[str, Any]) -> tuple[int | None, str]:
    """Hardware-queue pool size of a run: its queue mapping, else GPU_MAX_HW_QUEUES it ran with."""
    pool = (result.get("queue_mapping") or {}).get("pool_size")
    if isinstance(pool, int):
        return pool, "queue_mapping.pool_size"
    knob = ((result.get("environment") or {}).get("env_knobs") or {}).get("GPU_MAX_HW_QUEUES")
    if knob and str(knob).strip().isdigit():
        return int(knob), "GPU_MAX_HW_QUEUES"
    return None, "not known (runtime-managed, GPU_MAX_HW_QUEUES unset)"


def verdict_text(knee: int | None, last: int, pool: int | None, cores: int | None,
                 backend: str | None, latency_jump: int | None, dispatch_jump: int | None) -> str:
    """One line that only claims what the data shows."""
    if knee is None:
        text = f"throughput still scales up to {last} streams (the largest measured)"
    elif pool is not None and knee == pool:
        text = (f"throughput stops scaling at {knee} streams = the hardware-queue pool: "
                "streams beyond it share queues")
    elif backend == "cpu" and cores is not None and knee == cores:
        text = (f"throughput stops scaling at {knee} streams = the CPU core count ({cores}): "
                "worker queues compete for cores"
                + (f" before the queue pool ({pool}) is full" if pool and pool > knee else ""))
    else:
        pool_text = f"pool {pool}" if pool is not None else "pool size unknown"
        core_text = f", {cores} cores" if backend == "cpu" and cores else ""
        text = f"throughput stops scaling at {knee} streams ({pool_text}{core_text})"
    if latency_jump is not None:
        text += f"; P99 iteration latency jumps at {latency_jump} streams"
    if dispatch_jump is not None:
        text += f"; kernel-measured dispatch P99 jumps at {dispatch_jump} streams"
    return text


def analyze(results: list[dict[str, Any]], work_scaling: str) -> ScalingAnalysis | None:
    """Scaling analysis of ok run results (any order); None with fewer than two usable points."""
    pairs = [(point_from_result(r), r) for r in results]
    usable = sorted(((p, r) for p, r in pairs if p is not None), key=lambda pr: pr[0].streams)
    if len(usable) < 2:
        return None
    points = [p for p, _ in usable]
    first_result = usable[0][1]
    pool, pool_source = pool_size_of(first_result)
    env = first_result.get("environment") or {}
    backend = env.get("backend") or (first_result.get("config") or {}).get("backend")
    cores = env.get("cpu_count")
    knee, steps = find_knee(points, work_scaling)
    peak = max(points, key=lambda p: p.throughput)
    lat_jump = find_jump(points, "latency_p99_ms")
    disp_jump = find_jump(points, "dispatch_p99_us")
    return ScalingAnalysis(
        stream_counts=[p.streams for p in points], efficiency=efficiencies(points, work_scaling),
        peak_streams=peak.streams, peak_throughput=peak.throughput, knee_streams=knee,
        steps=steps, latency_jump_streams=lat_jump, dispatch_jump_streams=disp_jump,
        pool_size=pool, pool_source=pool_source, cpu_cores=cores, backend=backend,
        verdict=verdict_text(knee, points[-1].streams, pool, cores, backend, lat_jump, disp_jump))
