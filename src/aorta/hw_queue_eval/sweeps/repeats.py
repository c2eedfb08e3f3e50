"""Repeats: one measurement point run N times, each in a fresh process; run-level summaries.

Iterations inside one process share its caches, thread placement and load, so they are not
independent samples; runs are (docs/sweep-compare-report.md). This module turns run results
into per-run summaries (the few numbers compare, scaling and policy-sweep decide on) and
aggregates them: median, a distribution-free CI of the median and the measured run-to-run noise
floor. No torch import here.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from aorta.hw_queue_eval.analysis.stats import median_ci

#: run-level values kept per repeat, with the direction that is better
RUN_METRICS: dict[str, bool] = {"throughput": True, "latency_p50_ms": False, "latency_p99_ms": False}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one run that decisions use: throughput, latency percentiles, key eBPF."""
    from aorta.hw_queue_eval.analysis.scaling import dispatch_avg_us, dispatch_p99_us

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


def aggregate(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per metric over the runs: median, CI of the median (with its level), CV, noise floor."""
    out: dict[str, Any] = {}
    for name in (*RUN_METRICS, "ebpf_dispatch_p99_us"):
        values = [s[name] for s in summaries if s.get(name) is not None]
        out[name] = median_ci(values).to_dict() if values else None
    return out


def representative(results: Sequence[dict[str, Any]]) -> int:
    """Index of the run whose throughput is the (lower) median: its details stand for the set."""
    order = sorted(
        range(len(results)),
        key=lambda i: (results[i].get("throughput") is None, results[i].get("throughput") or 0.0),
    )
    usable = [i for i in order if results[i].get("throughput") is not None] or order
    return usable[(len(usable) - 1) // 2]


def conditions() -> dict[str, Any]:
    """Machine load when a run starts (1-min load average, cores), to flag mixed conditions."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"loadavg_1m": load, "cpu_count": os.cpu_count(), "session_pid": os.getpid()}


def interleaved_schedule(items: Sequence[Any], repeats: int, seed: int) -> list[list[Any]]:
    """Rounds of `items`: as given for one repeat, else shuffled (seeded) in every round, so
    slow drift of the machine is spread over all points instead of landing on one."""
    if repeats == 1:
        return [list(items)]
    rng = random.Random(seed)
    rounds = []
    for _ in range(repeats):
        order = list(items)
        rng.shuffle(order)
        rounds.append(order)
    return rounds


def repeats_block(
    results: Sequence[dict[str, Any]], outcomes: Sequence[dict[str, Any]], requested: int
) -> dict[str, Any]:
    """The `repeats` key of a run result made of several child runs."""
    per_repeat = []
    for outcome in outcomes:
        entry = {
            "repeat": outcome["repeat"],
            "status": outcome["status"],
            "error": outcome.get("error"),
            "duration_s": outcome.get("duration_s"),
            "conditions": outcome.get("conditions"),
        }
        if outcome.get("result") is not None and outcome["status"] == "ok":
            entry.update(run_summary(outcome["result"]))
        per_repeat.append(entry)
    ok = [e for e in per_repeat if e["status"] == "ok"]
    rep = representative(results) if results else None
    return {
        "requested": requested,
        "ok": len(ok),
        "method": "each repeat in a fresh child process (`run` without --repeats), back to back",
        "representative_repeat": None if rep is None else ok[rep]["repeat"],
        "representative_note": "the other top-level fields of this file are those of the "
        "representative repeat (median throughput); statistics over all "
        "repeats are under repeats.stats",
        "per_repeat": per_repeat,
        "stats": aggregate(ok),
    }


def run_repeated(
    run_args: Sequence[str], repeats: int, timeout_s: float | None = None, on_repeat: Any = None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """`run RUN_ARGS` `repeats` times, each in a fresh child: (one run result with `repeats`,
    or None when every repeat failed; the outcome of each repeat).

    The top level is the representative repeat's result (median throughput).
    `on_repeat(i, outcome_dict)` reports progress.
    """
    from aorta.hw_queue_eval.sweeps.childrun import run_point

    outcomes: list[dict[str, Any]] = []
    for repeat in range(1, repeats + 1):
        cond = conditions()
        outcome = run_point(list(run_args), timeout_s=timeout_s)
        entry = {"repeat": repeat, **outcome.to_dict(), "result": outcome.result, "conditions": cond}
        outcomes.append(entry)
        if on_repeat is not None:
            on_repeat(repeat, entry)
    ok = [o for o in outcomes if o["status"] == "ok" and o["result"] is not None]
    results = [o["result"] for o in ok]
    if not results:
        return None, outcomes
    combined = dict(results[representative(results)])
    combined["repeats"] = repeats_block(results, outcomes, repeats)
    failed = [o for o in outcomes if o not in ok]
    if failed:
        combined.setdefault("warnings", [])
        combined["warnings"] = [
            *combined["warnings"],
            *(f"repeat {o['repeat']} {o['status']}: {o['error']}" for o in failed),
        ]
    return combined, outcomes
