"""Repeats: one measurement point run N times, each in a fresh process, in an interleaved order.

Iterations inside one process share its caches, thread placement and load, so they are not
independent samples; runs are (docs/sweep-compare-report.md). This module schedules and runs the
repeats and writes their block; the per-run summaries and their aggregates are
analysis/summaries.py. No torch import here.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.summaries import aggregate, representative, run_summary

if TYPE_CHECKING:  # childrun is imported only where a repeat runs (run_repeated)
    from aorta.hw_queue_eval.sweeps.childrun import PointOutcome


def conditions() -> JsonObject:
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


@dataclass(frozen=True)
class RepeatOutcome:
    """One repeat of `run --repeats`: its number, what its child run did, and the machine's load
    when it started (`conditions`)."""

    repeat: int
    point: PointOutcome
    conditions: JsonObject | None = None

    @property
    def ok(self) -> bool:
        """The child ran to the end and handed back a result."""
        return self.point.status == "ok" and self.point.result is not None


def repeats_block(
    results: Sequence[JsonObject], outcomes: Sequence[RepeatOutcome], requested: int
) -> JsonObject:
    """The `repeats` key of a run result made of several child runs."""
    per_repeat = []
    for outcome in outcomes:
        entry = {
            "repeat": outcome.repeat,
            "status": outcome.point.status,
            "error": outcome.point.error,
            "duration_s": outcome.point.duration_s,
            "conditions": outcome.conditions,
        }
        if outcome.ok:
            entry.update(run_summary(outcome.point.result or {}))
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
    run_args: Sequence[str],
    repeats: int,
    timeout_s: float | None = None,
    on_repeat: Callable[[RepeatOutcome], None] | None = None,
) -> tuple[JsonObject | None, list[RepeatOutcome]]:
    """`run RUN_ARGS` `repeats` times, each in a fresh child: (one run result with `repeats`,
    or None when every repeat failed; the outcome of each repeat).

    The top level is the representative repeat's result (median throughput).
    `on_repeat(outcome)` reports progress.
    """
    from aorta.hw_queue_eval.sweeps.childrun import run_point

    outcomes: list[RepeatOutcome] = []
    for repeat in range(1, repeats + 1):
        cond = conditions()
        outcome = RepeatOutcome(repeat, run_point(list(run_args), timeout_s=timeout_s), cond)
        outcomes.append(outcome)
        if on_repeat is not None:
            on_repeat(outcome)
    ok = [o for o in outcomes if o.ok]
    results = [o.point.result for o in ok if o.point.result is not None]
    if not results:
        return None, outcomes
    combined = dict(results[representative(results)])
    combined["repeats"] = repeats_block(results, outcomes, repeats)
    failed = [o for o in outcomes if o not in ok]
    if failed:
        combined.setdefault("warnings", [])
        combined["warnings"] = [
            *combined["warnings"],
            *(f"repeat {o.repeat} {o.point.status}: {o.point.error}" for o in failed),
        ]
    return combined, outcomes
