"""Compare result files: pair points by (workload, streams, policy), test each metric, diff eBPF.

Reads aorta run / sweep / policy-sweep files and the upstream tool's layouts (a run, or
`{"results": [...]}`, latency under `latency_ms.p50` or `latency.p50_ms`). Never pairs by position.
No torch import: this runs in CI on machines without it.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.results import load_result
from aorta.hw_queue_eval.scaling import flatten_numbers
from aorta.hw_queue_eval.stats import ALPHA, compare_samples
from aorta.hw_queue_eval.validation import check_input
from aorta.hw_queue_eval.workloads.base import UNIT_SCALE

EBPF_SECTIONS = ("ebpf_queue_metrics", "ebpf_memory_metrics", "ebpf_vs_cuda_comparison")
#: upstream name of a section → ours
EBPF_ALIASES = {"ebpf_vs_cuda": "ebpf_vs_cuda_comparison"}
#: settings that make two points incomparable when they differ (when both files record them)
MUST_MATCH = ("size", "backend", "sync_mode")
LATENCY_KEYS = ("mean", "p50", "p95", "p99", "min", "max", "std")

Key = tuple[str, int, str | None]


@dataclass
class Point:
    """One comparable measurement: a run, or one point of a sweep / policy sweep."""

    workload: str
    streams: int
    policy: str | None
    iteration_ms: list[float]
    throughput: float | None
    throughput_unit: str | None
    work_per_iteration: float | None
    latency: dict[str, float]
    settings: dict[str, Any]
    single: dict[str, float | None]
    ebpf: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.workload, self.streams, self.policy)


def key_text(key: Key) -> str:
    """'hetero_kernels @ 4 streams [policy]' for messages and tables."""
    workload, streams, policy = key
    return f"{workload} @ {streams} streams" + (f" [{policy}]" if policy else "")


def normalize_latency(result: dict[str, Any]) -> dict[str, float]:
    """Latency statistics from `latency_ms.p50` (ours, upstream runs) or `latency.p50_ms` (older)."""
    lat = result.get("latency_ms")
    if isinstance(lat, dict):
        return {k: float(lat[k]) for k in LATENCY_KEYS if isinstance(lat.get(k), (int, float))}
    old = result.get("latency")
    if isinstance(old, dict):
        return {k: float(old[f"{k}_ms"]) for k in LATENCY_KEYS
                if isinstance(old.get(f"{k}_ms"), (int, float))}
    return {}


def _policy_of(result: dict[str, Any], point_key: dict[str, Any] | None) -> str | None:
    for source in (point_key or {}, result, (result.get("config") or {}).get("extra") or {}):
        for name in ("policy", "policy_name"):
            if isinstance(source.get(name), str):
                return source[name]
    return None


def point_from_result(result: dict[str, Any], point_key: dict[str, Any] | None = None,
                      policy: str | None = None) -> Point:
    """A Point from one run-like dict (ours or upstream); UsageError when it lacks the basics."""
    workload = result.get("workload_name") or (point_key or {}).get("workload")
    streams = result.get("stream_count", (point_key or {}).get("streams"))
    if not isinstance(workload, str) or not isinstance(streams, int):
        raise UsageError("a result has no workload_name/stream_count: not a run result")
    config = result.get("config") or (result.get("metadata") or {}).get("config") or {}
    samples = result.get("iteration_times_ms") or []
    ebpf = {}
    for name in (*EBPF_SECTIONS, *EBPF_ALIASES):
        if isinstance(result.get(name), dict):
            ebpf[EBPF_ALIASES.get(name, name)] = result[name]
    switch = (result.get("switch_latency") or {})
    return Point(
        workload=workload, streams=streams,
        policy=policy if policy is not None else _policy_of(result, point_key),
        iteration_ms=[float(x) for x in samples if isinstance(x, (int, float))],
        throughput=result.get("throughput"), throughput_unit=result.get("throughput_unit"),
        work_per_iteration=(result.get("metadata") or {}).get("work_per_iteration"),
        latency=normalize_latency(result),
        settings={k: config.get(k) for k in MUST_MATCH if config.get(k) is not None},
        single={"switch_overhead_ms": switch.get("switch_overhead_ms"),
                "concurrency": (result.get("concurrency") or {}).get("achieved")},
        ebpf=ebpf)


def pool_repeats(points: list[Point]) -> list[Point]:
    """Repeats of one policy-sweep point (same key) pooled into one Point.

    Iteration samples are concatenated, latency statistics recomputed from them; throughput and
    single values are the median over the repeats.
    """
    from aorta.hw_queue_eval.metrics import summarize

    groups: dict[Key, list[Point]] = {}
    for point in points:
        groups.setdefault(point.key, []).append(point)
    pooled = []
    for group in groups.values():
        if len(group) == 1:
            pooled.append(group[0])
            continue
        samples = [t for p in group for t in p.iteration_ms]
        stats = summarize(samples) or {}

        def median(values: list[float | None]) -> float | None:
            clean = [v for v in values if v is not None]
            return statistics.median(clean) if clean else None

        pooled.append(dataclasses.replace(
            group[0], iteration_ms=samples,
            throughput=median([p.throughput for p in group]),
            latency={k: float(stats[k]) for k in LATENCY_KEYS if k in stats} or group[0].latency,
            single={k: median([p.single.get(k) for p in group]) for k in group[0].single}))
    return pooled


def load_points(path: str | os.PathLike[str]) -> tuple[str, list[Point], list[str]]:
    """(file kind, comparable points, notes on skipped points) of a result file."""
    data = load_result(path)
    check_input(path, data)
    kind = data.get("kind")
    notes: list[str] = []
    points: list[Point] = []
    try:
        if kind in ("sweep", "policy_sweep", "policy-sweep") or isinstance(data.get("points"), list):
            for entry in data.get("points") or []:
                key = entry.get("key") or {}
                if entry.get("status") != "ok" or not entry.get("result"):
                    notes.append(f"{path}: skipped point {key} ({entry.get('status')})")
                    continue
                points.append(point_from_result(entry["result"], key))
            if kind in ("policy_sweep", "policy-sweep"):  # --repeats: one point per repeat
                points = pool_repeats(points)
        elif isinstance(data.get("results"), list):  # upstream sweep
            points = [point_from_result(r) for r in data["results"] if isinstance(r, dict)]
        elif isinstance(data.get("policies"), dict):  # upstream policy evaluation
            points = [point_from_result(r, policy=name) for name, r in data["policies"].items()
                      if isinstance(r, dict)]
        elif kind in (None, "run"):
            if data.get("status", "ok") != "ok":
                raise UsageError(f"{path}: run status is {data.get('status')!r} "
                                 f"({data.get('error')}); compare needs an ok run")
            points = [point_from_result(data)]
        else:
            raise UsageError(f"{path}: unknown result kind {kind!r}: compare reads run, sweep "
                             "and policy-sweep files")
    except UsageError as exc:
        raise UsageError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    if not points:
        raise UsageError(f"{path}: no finished points to compare")
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):
        raise UsageError(f"{path}: the same (workload, streams, policy) appears twice: "
                         "points cannot be paired unambiguously")
    return str(kind or "run"), points, notes


def throughput_samples(point: Point) -> list[float]:
    """Per-iteration throughput (work / iteration time) in the point's unit; [] when unknown."""
    if not point.iteration_ms or not point.work_per_iteration or point.throughput_unit not in UNIT_SCALE:
        return []
    times_s = np.asarray(point.iteration_ms, dtype=float) / 1e3
    times_s = times_s[times_s > 0]
    return list(point.work_per_iteration / times_s / UNIT_SCALE[point.throughput_unit])


def _change(base: float | None, test: float | None) -> float | None:
    if base is None or test is None or base == 0:
        return None
    return (test - base) / abs(base) * 100.0


def _metric_rows(base: Point, test: Point, threshold: float) -> list[dict[str, Any]]:
    rows = []
    lat = compare_samples(base.iteration_ms, test.iteration_ms, threshold, higher_is_better=False)
    rows.append({"metric": "iteration time", "unit": "ms", "higher_is_better": False,
                 **lat.to_dict()})
    b_tp, t_tp = throughput_samples(base), throughput_samples(test)
    if b_tp and t_tp:
        tp = compare_samples(b_tp, t_tp, threshold, higher_is_better=True).to_dict()
        rows.append({"metric": "throughput (per iteration)", "unit": base.throughput_unit,
                     "higher_is_better": True, **tp})
    else:
        rows.append({"metric": "throughput", "unit": base.throughput_unit, "higher_is_better": True,
                     "base_median": base.throughput, "test_median": test.throughput,
                     "base_iqr": None, "test_iqr": None, "base_n": 1, "test_n": 1,
                     "change_pct": _change(base.throughput, test.throughput), "p_value": None,
                     "test_method": None, "verdict": "inconclusive",
                     "reason": "one value per file (no per-iteration work recorded)"})
    return rows


def _info_rows(base: Point, test: Point) -> list[dict[str, Any]]:
    rows = []
    for name in ("p95", "p99"):
        rows.append({"metric": f"latency {name}", "unit": "ms", "base": base.latency.get(name),
                     "test": test.latency.get(name),
                     "change_pct": _change(base.latency.get(name), test.latency.get(name))})
    for name, value in base.single.items():
        rows.append({"metric": name, "unit": "", "base": value, "test": test.single.get(name),
                     "change_pct": _change(value, test.single.get(name))})
    return rows


def ebpf_diff(base: Point, test: Point) -> dict[str, Any]:
    """Numeric eBPF values present in both points with their change, and which side was traced."""
    rows = []
    for section in EBPF_SECTIONS:
        b = flatten_numbers(base.ebpf.get(section) or {})
        t = flatten_numbers(test.ebpf.get(section) or {})
        for key in sorted(set(b) & set(t)):
            rows.append({"section": section, "key": key, "base": b[key], "test": t[key],
                         "change_pct": _change(b[key], t[key])})
    b_traced, t_traced = bool(base.ebpf), bool(test.ebpf)
    note = None
    if t_traced and not b_traced:
        note = ("test was traced with eBPF and base was not: the verdicts above measure the "
                "tracing overhead")
    elif b_traced and not t_traced:
        note = "base was traced with eBPF and test was not"
    return {"base_traced": b_traced, "test_traced": t_traced, "rows": rows, "note": note}


def _check_compatible(base: Point, test: Point) -> None:
    for name in MUST_MATCH:
        b, t = base.settings.get(name), test.settings.get(name)
        if b is not None and t is not None and b != t:
            raise UsageError(f"{key_text(base.key)}: base ran with {name} {b!r}, test with {t!r}: "
                             "not comparable; rerun with the same setting")
    if base.throughput_unit and test.throughput_unit and base.throughput_unit != test.throughput_unit:
        raise UsageError(f"{key_text(base.key)}: throughput units differ ({base.throughput_unit} vs "
                         f"{test.throughput_unit})")


def compare_files(base_path: str, test_paths: list[str], threshold: float = 5.0) -> dict[str, Any]:
    """The whole comparison as a JSON-ready dict (UsageError for unreadable or unpairable files)."""
    if not threshold > 0:
        raise UsageError(f"--threshold must be > 0 (percent), got {threshold}")
    base_kind, base_points, notes = load_points(base_path)
    base_by_key = {p.key: p for p in base_points}
    tests = []
    for path in test_paths:
        kind, points, test_notes = load_points(path)
        notes += test_notes
        pairs = []
        for point in sorted(points, key=lambda p: (p.workload, p.streams, p.policy or "")):
            base = base_by_key.get(point.key)
            if base is None:
                continue
            _check_compatible(base, point)
            metrics = _metric_rows(base, point, threshold)
            pairs.append({"workload": point.workload, "streams": point.streams,
                          "policy": point.policy, "metrics": metrics,
                          "info": _info_rows(base, point), "ebpf": ebpf_diff(base, point)})
        if not pairs:
            raise UsageError(f"nothing to pair: base {base_path} has "
                             f"{sorted(key_text(k) for k in base_by_key)}, test {path} has "
                             f"{sorted(key_text(p.key) for p in points)}; points pair by "
                             "(workload, streams, policy)")
        test_keys = {p.key for p in points}
        regressions = sum(1 for pair in pairs for m in pair["metrics"]
                          if m["verdict"] == "regression")
        tests.append({"file": path, "kind": kind, "pairs": pairs, "regressions": regressions,
                      "only_in_base": [key_text(k) for k in base_by_key if k not in test_keys],
                      "only_in_test": [key_text(k) for k in test_keys if k not in base_by_key]})
    return {"kind": "comparison", "base": base_path, "base_kind": base_kind,
            "threshold_pct": threshold, "alpha": ALPHA, "tests": tests, "notes": notes,
            "regression": any(t["regressions"] for t in tests)}
