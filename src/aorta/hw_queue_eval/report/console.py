"""Console blocks for a run result (rich; plain text when not a terminal).

Blocks render from the result dict, so a saved JSON renders the same as a live run.
"""

from __future__ import annotations

from typing import Any


def make_console(stderr: bool = False) -> Any:
    """A rich Console; rich drops colour and live widgets by itself when not on a TTY."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def fmt(value: Any, spec: str = ".3f", unit: str = "", none: str = "n/a") -> str:
    """Format a number, or `none` for null (unmeasured) values."""
    if value is None:
        return none
    if isinstance(value, (int, float)):
        return f"{value:{spec}}{unit}"
    return str(value)


def _block(console: Any, title: str, rows: list[tuple[str, str]]) -> None:
    console.print(f"\n[bold]{title}[/bold]")
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        console.print(f"  {key + ':':<{width + 1}}  {value}")


def render_run(result: dict[str, Any], console: Any) -> None:
    """Configuration, throughput, latency, queue switch analysis, timing, interpretation."""
    cfg = result.get("config", {})
    env = result.get("environment", {})
    qmap = result.get("queue_mapping") or {}
    _block(console, "CONFIGURATION", [
        ("Workload", f"{result['workload_name']} ({result.get('metadata', {}).get('category')})"),
        ("Streams", str(result["stream_count"])),
        ("Backend / device", f"{cfg.get('backend')} / {env.get('device_name') or cfg.get('device')}"),
        ("Size preset", str(cfg.get("size"))),
        ("Iterations / warm-up", f"{cfg.get('iterations')} / {cfg.get('warmup')}"),
        ("Sync mode", str(cfg.get("sync_mode"))),
        ("HW queue pool", fmt(qmap.get("pool_size"), "d", none="runtime-managed")),
    ])
    _block(console, "THROUGHPUT", [
        ("Throughput", fmt(result.get("throughput"), ".2f", f" {result.get('throughput_unit')}")),
    ])
    lat = result.get("latency_ms")
    if lat:
        rows = [(k.upper() if k.startswith("p") else k.capitalize(), fmt(lat[k], ".3f", " ms"))
                for k in ("mean", "p50", "p95", "p99", "min", "max", "std")]
        rows.append(("IQR", fmt(lat.get("iqr"), ".3f", " ms")))
        _block(console, "LATENCY (per iteration)", rows)
    else:
        _block(console, "LATENCY (per iteration)", [("Not measured", str(result.get("latency_note")))])
    if result.get("latency_note"):
        console.print(f"  [dim]{result['latency_note']}[/dim]")
    for warning in result.get("warnings", []):
        console.print(f"  [yellow]warning:[/yellow] {warning}")

    sw = result.get("switch_latency") or {}
    conc = result.get("concurrency") or {}
    rows = [
        ("Switch overhead", fmt(sw.get("switch_overhead_ms"), ".4f", " ms",
                                none=f"n/a ({sw.get('reason')})")),
        ("Intra-stream gap (median)", fmt(sw.get("intra_gap_median_ms"), ".4f", " ms")),
        ("Inter-stream gap (median)", fmt(sw.get("inter_gap_median_ms"), ".4f", " ms")),
        ("Gaps measured (intra/inter)", f"{sw.get('intra_gap_count')} / {sw.get('inter_gap_count')}"),
        ("Achieved concurrency", fmt(conc.get("achieved"), ".2f", " busy streams (avg)")),
    ]
    if qmap.get("stream_to_queue") is not None:
        rows.append(("Streams → queues", _mapping_text(qmap["stream_to_queue"])))
    _block(console, "QUEUE SWITCH ANALYSIS", rows)

    per_stream = result.get("per_stream_times_ms") or []
    counts = result.get("per_stream_op_counts") or []
    mem = result.get("memory") or {}
    rows = [("Window", fmt(result.get("total_time_ms"), ".2f", " ms"))]
    if per_stream:
        rows.append(("Per-stream busy (min/max)",
                     f"{min(per_stream):.2f} / {max(per_stream):.2f} ms"))
        rows.append(("Ops measured", f"{sum(counts)} ({min(counts)}–{max(counts)} per stream)"))
    rows.append(("Peak memory", fmt((mem.get("peak_bytes") or 0) / 2**20 if mem.get("peak_bytes")
                                    else None, ".1f", f" MiB ({mem.get('kind')})")))
    ver = result.get("verification") or {}
    rows.append(("Verification", "passed" if ver.get("passed") else f"FAILED ({ver})"))
    _block(console, "TIMING", rows)

    lines = interpret(result)
    if lines:
        console.print("\n[bold]INTERPRETATION[/bold]")
        for line in lines:
            console.print(f"  • {line}")


def _mapping_text(mapping: list[int]) -> str:
    queues: dict[int, list[int]] = {}
    for stream, queue in enumerate(mapping):
        queues.setdefault(queue, []).append(stream)
    return ", ".join(f"q{q}←s{','.join(map(str, s))}" for q, s in sorted(queues.items()))


def interpret(result: dict[str, Any]) -> list[str]:
    """A few plain sentences that explain the numbers; only claims the data supports."""
    lines = []
    streams = result["stream_count"]
    qmap = result.get("queue_mapping") or {}
    pool = qmap.get("pool_size")
    if pool is not None and streams > pool:
        lines.append(f"{streams} streams share {pool} hardware queues: streams on one queue "
                     "run one after another (head-of-line blocking).")
    conc = (result.get("concurrency") or {}).get("achieved")
    if conc is not None:
        lines.append(f"On average {conc:.2f} of {streams} streams were busy at once.")
    sw = (result.get("switch_latency") or {}).get("switch_overhead_ms")
    if sw is not None:
        lines.append(f"Switching between streams on a lane costs {sw * 1000:.1f} µs more than "
                     "continuing on the same stream (median gaps).")
    lat = result.get("latency_ms")
    if lat and lat["p50"] > 0 and lat["p99"] > 3 * lat["p50"]:
        lines.append("P99 is over 3× the median: occasional stalls dominate the tail.")
    return lines
