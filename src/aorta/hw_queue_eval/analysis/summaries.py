"""Per-run summaries (the few numbers compare, scaling and policy-sweep decide on) and their aggregates.

Runs are the unit of evidence: the median over runs, a distribution-free CI of the median and the
measured run-to-run noise floor (docs/sweep-compare-report.md). No torch import here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.scaling import dispatch_avg_us, dispatch_p99_us
from aorta.hw_queue_eval.analysis.stats import median_ci

#: run-level values kept per repeat, with the direction that is better
RUN_METRICS: dict[str, bool] = {"throughput": True, "latency_p50_ms": False, "latency_p99_ms": False}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_summary(result: JsonObject) -> JsonObject:
    """The numbers of one run that decisions use: throughput, latency percentiles, key eBPF."""
    lat = result.get("latency_ms") or {}
    old = result.get("latency") or {}
    p50 = _number(lat.get("p50")) if lat else _number(old.get("p50_ms"))
    p99 = _number(lat.get("p99")) if lat else _number(old.get("p99_ms"))
    iqr = _number(lat.get("iqr"))
    queue = result.get("ebpf_queue_metrics") or {}
    traced = isinstance(queue, dict) and queue.get("status") == "ok"
    return {
        "throughput": _number(result.get("throughput")),
        "latency_p50_ms": p50,
        "latency_p95_ms": _number(lat.get("p95")),
        "latency_p99_ms": p99,
        "iteration_iqr_over_median": (iqr / p50) if iqr is not None and p50 else None,
        "ebpf_dispatch_p99_us": dispatch_p99_us(result) if traced else None,
        "ebpf_dispatch_avg_us": dispatch_avg_us(result) if traced else None,
        "ebpf_lost_events": queue.get("lost_events") if traced else None,
    }


def aggregate(summaries: Sequence[JsonObject]) -> JsonObject:
    """Per metric over the runs: median, CI of the median (with its level), CV, noise floor."""
    out: JsonObject = {}
    for name in (*RUN_METRICS, "ebpf_dispatch_p99_us"):
        values = [s[name] for s in summaries if s.get(name) is not None]
        out[name] = median_ci(values).to_dict() if values else None
    return out


def representative(results: Sequence[JsonObject]) -> int:
    """Index of the run whose throughput is the (lower) median: its details stand for the set."""
    order = sorted(
        range(len(results)),
        key=lambda i: (results[i].get("throughput") is None, results[i].get("throughput") or 0.0),
    )
    usable = [i for i in order if results[i].get("throughput") is not None] or order
    return usable[(len(usable) - 1) // 2]
