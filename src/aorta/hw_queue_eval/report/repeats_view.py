"""Console block of a run made of repeats: each repeat's numbers, then median, CI and spread."""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report.console import fmt


def ci_text(stat: JsonObject | None, spec: str = ".4g") -> str:
    """'median [low, high] (75 % CI, n=3)' or 'median (n=1, no CI)' or 'n/a'."""
    if not stat:
        return "n/a"
    if stat.get("low") is None:
        return f"{stat['median']:{spec}} (n={stat['n']}, no CI)"
    return (
        f"{stat['median']:{spec}} [{stat['low']:{spec}}, {stat['high']:{spec}}] "
        f"({stat['level']:.0%} CI, n={stat['n']})"
    )


def render_repeats(result: JsonObject, console: Any) -> None:
    """The REPEATS block: per-repeat numbers and the statistics compare will use."""
    block = result.get("repeats")
    if not block:
        return
    unit = result.get("throughput_unit") or ""
    console.print(
        f"\n[bold]REPEATS[/bold] ({block['ok']} of {block['requested']} ok, each in a "
        "fresh process; the blocks above are the representative repeat "
        f"{block.get('representative_repeat')})"
    )
    for rep in block["per_repeat"]:
        if rep["status"] != "ok":
            console.print(f"  repeat {rep['repeat']}: {rep['status']}: {rep.get('error')}", markup=False)
            continue
        load = (rep.get("conditions") or {}).get("loadavg_1m")
        console.print(
            f"  repeat {rep['repeat']}: {fmt(rep.get('throughput'), '.4g')} {unit}, "
            f"P50 {fmt(rep.get('latency_p50_ms'), '.3f')} ms, "
            f"P99 {fmt(rep.get('latency_p99_ms'), '.3f')} ms"
            + (
                f", eBPF dispatch P99 {rep['ebpf_dispatch_p99_us']:.1f} µs"
                if rep.get("ebpf_dispatch_p99_us") is not None
                else ""
            )
            + f", load {fmt(load, '.2f')}",
            markup=False,
        )
    stats = block.get("stats") or {}
    tput = stats.get("throughput") or {}
    console.print(
        f"  throughput median: {ci_text(tput)} {unit}; run-to-run CV "
        f"{fmt(tput.get('cv_pct'), '.1f', '%')}, spread (max−min)/median "
        f"{fmt(tput.get('spread_pct'), '.1f', '%')}",
        markup=False,
    )
    console.print(
        f"  P50 median: {ci_text(stats.get('latency_p50_ms'), '.3f')} ms; "
        f"P99 median: {ci_text(stats.get('latency_p99_ms'), '.3f')} ms",
        markup=False,
    )
