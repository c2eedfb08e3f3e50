"""Summary tables as plain rows (headers + strings), shared by the console and the HTML report."""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.report.console import fmt
from aorta.hw_queue_eval.scaling import dispatch_avg_us, dispatch_p99_us


def sweep_table(sweep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per point (by stream count): status, throughput, latency, switch, concurrency, eBPF."""
    unit = sweep.get("throughput_unit") or ""
    analysis = sweep.get("analysis") or {}
    eff = dict(zip(analysis.get("stream_counts") or [], analysis.get("efficiency") or [], strict=False))
    points = sorted(sweep.get("points", []), key=lambda p: p.get("key", {}).get("streams", 0))
    traced = any(p.get("result") and p["result"].get("ebpf_queue_metrics") for p in points)
    headers = ["Streams", "Status", f"Throughput ({unit})", "Efficiency", "P50 ms", "P95 ms",
               "P99 ms", "Switch ovh µs", "In flight (wall)", "Queues"]
    if traced:
        headers += ["eBPF dispatch avg µs", "eBPF dispatch P99 µs"]
    rows = []
    for point in points:
        streams = point.get("key", {}).get("streams")
        result = point.get("result") or {}
        if point.get("status") != "ok" or not result:
            row = [str(streams), point.get("status", "?")]
            rows.append(row + ["—"] * (len(headers) - len(row)))
            continue
        lat = result.get("latency_ms") or {}
        sw = (result.get("switch_latency") or {}).get("switch_overhead_ms")
        qmap = result.get("queue_mapping") or {}
        queues = (f"{qmap.get('queues_created')}/{qmap.get('pool_size')}"
                  if qmap.get("pool_size") is not None else fmt(qmap.get("queues_created"), "d"))
        row = [str(streams), "ok", fmt(result.get("throughput"), ".2f"),
               fmt(eff.get(streams), ".0%"), fmt(lat.get("p50"), ".3f"), fmt(lat.get("p95"), ".3f"),
               fmt(lat.get("p99"), ".3f"), fmt(None if sw is None else sw * 1000, ".1f"),
               fmt((result.get("concurrency") or {}).get("achieved"), ".2f"), queues]
        if traced:
            row += [fmt(dispatch_avg_us(result), ".1f"), fmt(dispatch_p99_us(result), ".1f")]
        rows.append(row)
    return headers, rows


def render_sweep(sweep: dict[str, Any], console: Any) -> None:
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
            console.print(f"  {point.get('key', {}).get('streams')} streams {point.get('status')}: "
                          f"{point.get('error')}", markup=False)
    analysis = sweep.get("analysis")
    if analysis:
        console.print(f"\n[bold]SCALING[/bold]\n  peak: {analysis['peak_throughput']:.2f} "
                      f"{sweep.get('throughput_unit')} at {analysis['peak_streams']} streams")
        pool = analysis.get("pool_size")
        console.print(f"  hardware-queue pool: {pool if pool is not None else 'unknown'} "
                      f"({analysis.get('pool_source')})")
        console.print(f"  verdict: {analysis['verdict']}")
    else:
        console.print("\nscaling: fewer than two points finished ok; no analysis")
