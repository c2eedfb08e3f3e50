"""Console table of a policy sweep: one row per policy, settings in effect, best lines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report.console import fmt

if TYPE_CHECKING:
    from rich.console import JustifyMethod

_VERDICT_WORD = {"improvement": "better", "regression": "worse", "unchanged": "same", "inconclusive": "n.s."}


def _delta(cmp: JsonObject | None) -> str:
    if not cmp:
        return "—"
    word = _VERDICT_WORD.get(cmp.get("verdict") or "", cmp.get("verdict"))
    ci = cmp.get("change_ci_pct")
    ci_text = f" [{ci[0]:+.0f}, {ci[1]:+.0f}] {cmp['change_ci_level']:.0%}" if ci else ""
    return f"{fmt(cmp.get('change_pct'), '+.1f', '%')}{ci_text} {word}"


def _num(value: float | None) -> str:
    """A throughput with as many decimals as its size needs (25876, 38.04, 0.002462)."""
    if value is None:
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.4g}"


def effect_text(row: JsonObject) -> str:
    """Settings in effect as one short phrase (read back, not requested)."""
    if row.get("status") == "not_applicable":
        return str(row.get("reason"))
    if row.get("status") == "failed":
        return f"failed: {row.get('reason')}"
    eff = row.get("in_effect") or {}
    parts = []
    if eff.get("queue_pool_size") is not None:
        parts.append(f"pool {eff['queue_pool_size']}")
    env = {k: v for k, v in (eff.get("env") or {}).items() if v is not None}
    if env:
        parts.append(" ".join(f"{k}={v}" for k, v in env.items()))
    if eff.get("env_mismatch"):
        parts.append(f"NOT in child env: {', '.join(eff['env_mismatch'])}")
    if eff.get("clock_mhz") is not None:
        level = eff.get("clock_level")
        parts.append(f"clock {'L' + str(level) + ' ' if level is not None else ''}{eff['clock_mhz']:g} MHz")
    if eff.get("power_limit_w") is not None:
        parts.append(f"cap {eff['power_limit_w']:g} W")
    if eff.get("gpu_verified") is False:
        parts.append("NOT verified")
    return ", ".join(parts) or "as found"


def reference_of(summary: JsonObject) -> JsonObject:
    """The policy the Δ columns compare against (files before `summary.reference`: baseline)."""
    return summary.get("reference") or {"policy": "baseline", "why": "listed in the sweep"}


def render_policy_table(data: JsonObject, console: Any) -> None:
    """The comparison table, then best-throughput / best-P99 lines and the queue-pool note."""
    from rich.table import Table

    summary = data["summary"]
    rows = summary["rows"]
    unit = next((r.get("throughput_unit") for r in rows if r.get("throughput_unit")), "")
    table = Table(
        title=f"POLICY SWEEP: {data['workload']} on {data['streams']} streams "
        f"({data['backend']} backend, {data['repeats']} repeat(s))"
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("Policy", "left"),
        (f"Tput {unit}", "right"),
        ("Δ tput", "right"),
        ("P50 ms", "right"),
        ("P95 ms", "right"),
        ("P99 ms", "right"),
        ("Δ latency", "right"),
        ("Switch µs", "right"),
        ("In flight", "right"),
        ("Pool", "right"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    ci_note = "" if data["repeats"] < 2 else " [CI of the change, %]"
    for row in rows:
        lat = row.get("latency_ms") or {}
        vs = row.get("vs_baseline") or {}
        switch = row.get("switch_overhead_ms")
        pool = (row.get("in_effect") or {}).get("queue_pool_size")
        ci = row.get("throughput_ci") or {}
        tput = (
            _num(row.get("throughput"))
            if ci.get("low") is None
            else f"{_num(ci['median'])} [{_num(ci['low'])}, {_num(ci['high'])}]"
        )
        table.add_row(
            row["policy"],
            tput,
            _delta(vs.get("throughput")),
            fmt(lat.get("p50"), ".3f"),
            fmt(lat.get("p95"), ".3f"),
            fmt(lat.get("p99"), ".3f"),
            _delta(vs.get("latency")),
            fmt(None if switch is None else switch * 1000, ".1f"),
            fmt(row.get("concurrency"), ".2f"),
            fmt(pool, "d", none="—"),
        )
    if not console.is_terminal:  # files and pipes: no 80-column squeeze
        console.width = max(console.width, 200)
    console.print(table)
    console.print("Settings in effect (read back from the child run and the device):")
    for row in rows:
        ignored = row.get("ignored_env")
        extra = f" (no effect on this backend: {', '.join(ignored)})" if ignored else ""
        console.print(f"  {row['policy']}: {effect_text(row)}{extra}", markup=False)
    reference = reference_of(summary)
    console.print(f"Compared against: {reference['policy']} ({reference['why']})", markup=False)
    for label, key in (("Best throughput:", "best_throughput"), ("Best P99:       ", "best_p99")):
        best = summary.get(key)
        if best and best.get("text"):
            console.print(f"{label} {best['text']}", markup=False)
    if summary.get("not_applicable"):
        console.print(
            f"Not ranked (not applicable here): {', '.join(summary['not_applicable'])}", markup=False
        )
    if summary.get("queue_pool_changed"):
        pools = ", ".join(f"{k} {v}" for k, v in summary["queue_pools"].items())
        console.print(
            f"Queue pool differs between policies ({pools}): GPU_MAX_HW_QUEUES sets the "
            "pool of hardware queues the streams share, so these policies change the "
            "measurement."
        )
    target = data.get("gpu_control_target") or ""
    if "simulated" in target and data.get("backend") == "cpu":
        console.print(
            f"Clock/power acted on {target}, not on the device that ran the workload "
            "(CPU backend): their rows measure nothing about clocks or power."
        )
    console.print(
        "Tput = median over repeats of the window throughput [CI of the median with "
        "≥ 2 repeats]; P50/P95/P99 = median over repeats of each repeat's percentile. "
        f"Δ = change of those medians vs {reference['policy']}{ci_note} with a verdict (better / "
        f"worse / same / n.s. = not significant) from compare's statistics, {summary['verdict_rule']}.",
        markup=False,
        style="dim",
    )
