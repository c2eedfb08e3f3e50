"""Summary tables as plain rows (headers + strings), shared by the console and the HTML report."""

from __future__ import annotations

import statistics
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.scaling import dispatch_avg_us, dispatch_p99_us
from aorta.hw_queue_eval.analysis.stats import median_ci
from aorta.hw_queue_eval.report.console import fmt


def _median(values: list[Any]) -> float | None:
    clean = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.median(clean) if clean else None


def throughput_cell(tputs: list[float], spec: str = ".2f") -> str:
    """Median throughput of a stream count, with its CI when it has several runs."""
    ci = median_ci(tputs)
    if ci.low is None:
        return fmt(ci.median, spec)
    return f"{ci.median:{spec}} [{ci.low:{spec}}, {ci.high:{spec}}]"


def sweep_table(sweep: JsonObject) -> tuple[list[str], list[list[str]]]:
    """One row per stream count: status, throughput (median over its runs, with the CI when
    repeated), latency, switch, concurrency, eBPF. The numbers the scaling verdict uses."""
    unit = sweep.get("throughput_unit") or ""
    analysis = sweep.get("analysis") or {}
    eff = dict(zip(analysis.get("stream_counts") or [], analysis.get("efficiency") or [], strict=False))
    groups: dict[Any, list[JsonObject]] = {}
    for point in sweep.get("points", []):
        groups.setdefault(point.get("key", {}).get("streams"), []).append(point)
    repeated = any("repeat" in (p.get("key") or {}) for p in sweep.get("points", []))
    traced = any(p.get("result") and p["result"].get("ebpf_queue_metrics") for p in sweep.get("points", []))
    level = analysis.get("ci_level")
    tput_head = f"Throughput ({unit})" + (f" median [{level:.0%} CI]" if repeated and level else "")
    headers = [
        "Streams",
        "Status",
        tput_head,
        "Efficiency",
        "P50 ms",
        "P95 ms",
        "P99 ms",
        "Switch ovh µs",
        "In flight (wall)",
        "Queues",
    ]
    if repeated:
        headers.insert(2, "Runs")
    if traced:
        headers += ["eBPF dispatch avg µs", "eBPF dispatch P99 µs"]
    rows = []
    for streams in sorted(groups, key=lambda s: s if isinstance(s, int) else 0):
        points = groups[streams]
        results = [p["result"] for p in points if p.get("status") == "ok" and p.get("result")]
        usable = [r for r in results if r.get("throughput") is not None]
        status = (
            "ok"
            if len(results) == len(points)
            else ", ".join(sorted({p.get("status", "?") for p in points if p.get("status") != "ok"}))
        )
        if repeated:
            status = f"{status} ({len(results)}/{len(points)})" if results else status
        if not usable:
            row = [str(streams), status] + ([str(len(results))] if repeated else [])
            rows.append(row + ["—"] * (len(headers) - len(row)))
            continue
        lats = [r.get("latency_ms") or {} for r in usable]
        sw = _median([(r.get("switch_latency") or {}).get("switch_overhead_ms") for r in usable])
        qmap = usable[0].get("queue_mapping") or {}
        queues = (
            f"{qmap.get('queues_created')}/{qmap.get('pool_size')}"
            if qmap.get("pool_size") is not None
            else fmt(qmap.get("queues_created"), "d")
        )
        row = [str(streams), status]
        if repeated:
            row.append(str(len(usable)))
        row += [
            throughput_cell([r["throughput"] for r in usable]),
            fmt(eff.get(streams), ".0%"),
            *[fmt(_median([lat.get(k) for lat in lats]), ".3f") for k in ("p50", "p95", "p99")],
            fmt(None if sw is None else sw * 1000, ".1f"),
            fmt(_median([(r.get("concurrency") or {}).get("achieved") for r in usable]), ".2f"),
            queues,
        ]
        if traced:
            row += [
                fmt(_median([dispatch_avg_us(r) for r in usable]), ".1f"),
                fmt(_median([dispatch_p99_us(r) for r in usable]), ".1f"),
            ]
        rows.append(row)
    return headers, rows


def diagnosis_lines(diagnosis: JsonObject | None) -> list[str]:
    """DIAGNOSIS block: the subject, one line per supported cause (cause, evidence, confidence),
    then the documented causes not measured in these runs."""
    if not diagnosis:
        return []
    lines = ["", "DIAGNOSIS", f"  {diagnosis['text']}"]
    for cause in diagnosis.get("causes") or []:
        lines.append(
            f"  cause: {cause['label']}: {cause['text']} [confidence {cause['confidence']}: "
            f"{cause.get('confidence_reason', '')}]"
        )
    missing = [c["cause"] for c in diagnosis.get("checked") or [] if c["status"] == "not_measured"]
    if missing:
        lines.append(f"  not measured in this sweep: {', '.join(missing)} (null in the JSON)")
    return lines


def render_sweep(sweep: JsonObject, console: Any) -> None:
    """The sweep summary table and the scaling verdict on the console."""
    from rich.table import Table

    headers, rows = sweep_table(sweep)
    table = Table(title=f"SWEEP SUMMARY: {sweep.get('workload')}", title_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 1 else "right")
    for row in rows:
        table.add_row(*row)
    if not console.is_terminal:  # piped output: do not squeeze the columns into 80
        console.width = max(console.width, 170)
    console.print(table)
    for point in sweep.get("points", []):
        if point.get("status") != "ok":
            console.print(
                f"  {point.get('key', {}).get('streams')} streams {point.get('status')}: "
                f"{point.get('error')}",
                markup=False,
            )
    analysis = sweep.get("analysis")
    if analysis:
        what = "median throughput" if max(analysis.get("runs_per_point") or [1]) > 1 else "throughput"
        console.print(
            f"\n[bold]SCALING[/bold]\n  peak {what}: {analysis['peak_throughput']:.2f} "
            f"{sweep.get('throughput_unit')} at {analysis['peak_streams']} streams"
        )
        pool = analysis.get("pool_size")
        console.print(
            f"  hardware-queue pool: {pool if pool is not None else 'unknown'} "
            f"({analysis.get('pool_source')})"
        )
        console.print(f"  verdict: {analysis['verdict']}", markup=False)
        if analysis.get("knee_reason"):
            console.print(f"  why: {analysis['knee_reason']}", markup=False)
        for warning in analysis.get("warnings") or []:
            console.print(f"  warning: {warning}", markup=False)
        for line in diagnosis_lines(analysis.get("diagnosis")):
            console.print(line, markup=False)
    else:
        console.print("\nscaling: fewer than two points finished ok; no analysis")
