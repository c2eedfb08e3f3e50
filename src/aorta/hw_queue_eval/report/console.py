"""Console blocks for a run result (rich; plain text when not a terminal).

Blocks render from the result dict, so a saved JSON renders the same as a live run.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.run.stream_order import edge_names, order_sentences


def make_console(stderr: bool = False) -> Any:
    """A rich Console; rich drops colour and live widgets by itself when not on a TTY.

    Every string it renders (table cells, titles, lines) has its control characters written out
    (common/controls.py); it writes to the real stream, so only its own styling is escape codes.
    """
    from rich.console import Console

    from aorta.common.controls import raw_stream, visible

    class VisibleConsole(Console):
        def render_str(self, text: str, *args: Any, **kwargs: Any) -> Any:
            return super().render_str(own_markup_only(visible(text)), *args, **kwargs)

    stream = raw_stream(sys.stderr if stderr else sys.stdout)
    return VisibleConsole(file=stream, highlight=False, soft_wrap=True)


#: the only markup tags aorta's own console text uses; any other `[` is text (it may come from a file)
OWN_TAGS = re.compile(r"\[(?!(?:/?(?:bold|dim|yellow))?\])")
OWN_TAG_PAIR = re.compile(r"\[(bold|dim|yellow)\](.*?)\[/\1\]", re.S)


def own_markup_only(text: str) -> str:
    """`text` with every `[` escaped except aorta's own tags; all of them when those do not pair.

    Rich reads `[link=…]` as an OSC 8 hyperlink and an unmatched `[/bold]` as an error, and a
    workload name or a reason read from a file may hold either; only our tags may style."""
    from rich.markup import escape

    text = OWN_TAGS.sub(r"\\[", text)
    bare = OWN_TAG_PAIR.sub(r"\2", text)
    if re.search(r"(?<!\\)\[/?(?:bold|dim|yellow)\]", bare):  # a tag left over: not our pairing
        return escape(text.replace("\\[", "["))
    return text


def fmt(value: Any, spec: str = ".3f", unit: str = "", none: str = "n/a") -> str:
    """Format a number, or `none` for null (unmeasured) values."""
    if value is None:
        return none
    if isinstance(value, (int, float)):
        return f"{value:{spec}}{unit}"
    return str(value)


def quiet_line(result: JsonObject) -> str:
    """`run -q`: the run in one line (throughput, iteration P50/P99, status, warning count)."""
    lat = result.get("latency_ms") or {}
    unit = result.get("throughput_unit")
    warnings = len(result.get("warnings") or [])
    return (
        f"{result.get('workload_name')} @ {result.get('stream_count')} streams: "
        f"{fmt(result.get('throughput'), '.4g', f' {unit}')}, iteration P50 "
        f"{fmt(lat.get('p50'), '.3f', ' ms')} P99 {fmt(lat.get('p99'), '.3f', ' ms')}, "
        f"status {result.get('status')}" + (f", {warnings} warnings (in the JSON)" if warnings else "")
    )


def _block(console: Any, title: str, rows: list[tuple[str, str]]) -> None:
    console.print(f"\n[bold]{title}[/bold]")
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        console.print(f"  {key + ':':<{width + 1}}  {value}")


def render_run(result: JsonObject, console: Any) -> None:
    """Configuration, throughput, latency, queue switch analysis, timing, interpretation."""
    cfg = result.get("config", {})
    env = result.get("environment", {})
    qmap = result.get("queue_mapping") or {}
    _block(
        console,
        "CONFIGURATION",
        [
            ("Workload", f"{result['workload_name']} ({result.get('metadata', {}).get('category')})"),
            ("Streams", str(result["stream_count"])),
            ("Backend / device", f"{cfg.get('backend')} / {env.get('device_name') or cfg.get('device')}"),
            ("Size preset", str(cfg.get("size"))),
            ("Iterations / warm-up", f"{cfg.get('iterations')} / {cfg.get('warmup')}"),
            ("Sync mode", str(cfg.get("sync_mode"))),
            ("HW queue pool", fmt(qmap.get("pool_size"), "d", none="runtime-managed")),
        ],
    )
    _block(
        console,
        "THROUGHPUT",
        [
            ("Throughput", fmt(result.get("throughput"), ".2f", f" {result.get('throughput_unit')}")),
        ],
    )
    lat = result.get("latency_ms")
    if lat:
        rows = [
            (k.upper() if k.startswith("p") else k.capitalize(), fmt(lat[k], ".3f", " ms"))
            for k in ("mean", "p50", "p95", "p99", "min", "max", "std")
        ]
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
    rows = switch_rows(sw)
    rows.append(("Streams with an op in flight", fmt(conc.get("achieved"), ".2f", " (avg, wall clock)")))
    if conc.get("on_cpu_queues") is not None:
        rows.append(
            ("Queues running on a CPU", fmt(conc.get("on_cpu_queues"), ".2f", " (avg, kernel on-CPU time)"))
        )
    if qmap.get("stream_to_queue") is not None:
        rows.append(("Streams → queues", _mapping_text(qmap["stream_to_queue"])))
    _block(console, "QUEUE SWITCH ANALYSIS", rows)

    per_stream = result.get("per_stream_times_ms") or []
    counts = result.get("per_stream_op_counts") or []
    mem = result.get("memory") or {}
    rows = [("Window", fmt(result.get("total_time_ms"), ".2f", " ms"))]
    inst = result.get("instrumentation") or {}
    if inst.get("cost_ratio") is not None:
        rows.append(
            (
                "Instrumentation cost",
                f"{inst['cost_ratio']:+.1%} window time vs an "
                f"uninstrumented window ({inst['plain_window_ms']:.2f} ms; op timing "
                f"{'on' if inst.get('op_timing') else 'off'}, per-iteration sync "
                f"{'on' if inst.get('per_iteration_sync') else 'off'})",
            )
        )
    if per_stream:
        rows.append(("Per-stream busy (min/max)", f"{min(per_stream):.2f} / {max(per_stream):.2f} ms"))
        rows.append(("Ops measured", f"{sum(counts)} ({min(counts)}–{max(counts)} per stream)"))
    rows.append(
        (
            "Peak memory",
            fmt(
                (mem.get("peak_bytes") or 0) / 2**20 if mem.get("peak_bytes") else None,
                ".1f",
                f" MiB ({mem.get('kind')})",
            ),
        )
    )
    ver = result.get("verification") or {}
    rows.append(("Verification", "passed" if ver.get("passed") else f"FAILED ({ver})"))
    _block(console, "TIMING", rows)
    order = result.get("stream_order")
    if order:
        _block(console, "STREAM DEPENDENCIES (producer→consumer ×waits in the window)", order_rows(order))

    lines = interpret(result)
    if lines:
        console.print("\n[bold]INTERPRETATION[/bold]")
        for line in lines:
            console.print(f"  • {line}")


def order_rows(order: JsonObject) -> list[tuple[str, str]]:
    """The observed stream graph and both differences from the declared one (docs/metrics.md)."""
    if order.get("edges") is None:
        return [("Observed", f"n/a ({order.get('note')})")]
    return [
        ("Observed", edge_names(order["edges"], limit=12) or "no cross-stream waits"),
        ("Declared", f"{len(order['declared'])} stream pairs"),
        ("Missing synchronisation", edge_names(order["missing_synchronisation"], limit=12) or "none"),
        ("Needless serialisation", edge_names(order["needless_serialisation"], limit=12) or "none"),
    ]


SWITCH_LABEL = "Switch overhead (like for like, ready gaps)"


def switch_rows(sw: JsonObject) -> list[tuple[str, str]]:
    """Switch overhead rows (none shows an overhead when no switch happened), then launch waits."""
    switches = sw.get("switch_count")
    if switches is None:  # not measured (e.g. a v1 file without op intervals)
        return [("Switch overhead", f"n/a ({sw.get('reason')})")]
    if not switches:
        return [("Stream switches", f"0 ({sw.get('reason') or 'none observed'})"), starvation_row(sw)]
    overhead = sw.get("switch_overhead_ms")
    value = (
        f"{overhead * 1000:+.2f} µs (gap spread {(sw.get('spread_ms') or 0) * 1000:.2f} µs)"
        if overhead is not None
        else f"n/a ({sw.get('reason')})"
    )
    ready = (sw.get("gap_readiness") or {}).get("ready_switches")
    rows = [
        (SWITCH_LABEL if "gap_readiness" in sw else "Switch overhead (like for like)", value),
        (
            "Switches matched / all",
            f"{sw.get('matched_switch_count')} / {switches} "
            + (f"(next op ready: {ready}; " if ready is not None else "(")
            + f"same kinds before and after: "
            f"{sw.get('matched_on_both_kinds')}, same previous kind: "
            f"{sw.get('matched_on_previous_kind')}; "
            f"{sw.get('no_switch_count')} same-stream gaps)",
        ),
    ]
    every = sw.get("all_gaps") or {}
    if overhead is None and (sw.get("gap_readiness") or {}).get("unknown") and every:
        rows.append(
            (
                "Switch overhead, every gap (launch waits in)",
                fmt(_us(every.get("switch_overhead_ms")), "+.2f", " µs")
                + " (readiness unknown: includes any wait for the host's launch)",
            )
        )
    lanes = [
        f"{lane}: {info.get('reason')}"
        for lane, info in (sw.get("per_lane") or {}).items()
        if info.get("switch_overhead_ms") is None and info.get("switches")
    ]
    if lanes:
        rows.append(("Lanes without a like-for-like pair", "; ".join(lanes)))
    rows.append(starvation_row(sw))
    return rows


def starvation_label(block: JsonObject) -> str:
    """The host's launch alone where the window had no cross-stream waits, else both causes."""
    if block.get("cross_stream_waits") == 0:
        return "Host launch starvation"
    return "Lane waiting for its next op (launch or wait)"


def starvation_row(sw: JsonObject) -> tuple[str, str]:
    """Gaps whose next op was not ready when the lane freed: count, total, share, sizes."""
    block = sw.get("launch_starvation")
    if not block:
        return (
            "Host launch starvation",
            "n/a (not in this file: written before launch waits were split out)",
        )
    label = starvation_label(block)
    gaps = block.get("gaps")
    if gaps is None:
        return (label, f"n/a ({block.get('reason')})")
    known = block.get("gaps_with_known_readiness")
    if not gaps:
        return (label, f"none: every next op was ready when the lane freed ({known} lane gaps)")
    share = block.get("share_of_lane_time")
    return (
        label,
        f"{gaps} of {known} lane gaps waited for their op ({block.get('switch_gaps')} of them switches): "
        f"{block['wait_total_ms']:.2f} ms in all"
        + (f", {share:.1%} of lane time" if share is not None else "")
        + f"; wait p50 {_duration(block.get('wait_p50_ms'))}, "
        f"mean {_duration(block.get('wait_mean_ms'))}, max {_duration(block.get('wait_max_ms'))}",
    )


def _us(ms: float | None) -> float | None:
    return None if ms is None else ms * 1000


def _duration(ms: float | None) -> str:
    """A wait in µs below a millisecond, else in ms; n/a for null."""
    if ms is None or ms < 1:
        return fmt(_us(ms), ".2f", " µs")
    return f"{ms:.2f} ms"


def _mapping_text(mapping: list[int]) -> str:
    queues: dict[int, list[int]] = {}
    for stream, queue in enumerate(mapping):
        queues.setdefault(queue, []).append(stream)
    return ", ".join(f"q{q}←s{','.join(map(str, s))}" for q, s in sorted(queues.items()))


def interpret(result: JsonObject) -> list[str]:
    """A few plain sentences that explain the numbers; only claims the data supports."""
    lines = []
    streams = result["stream_count"]
    qmap = result.get("queue_mapping") or {}
    pool = qmap.get("pool_size")
    if pool is not None and streams > pool:
        lines.append(
            f"{streams} streams share {pool} hardware queues: streams on one queue "
            "run one after another (head-of-line blocking)."
        )
    line = concurrency_line(result.get("concurrency") or {}, streams)
    if line:
        lines.append(line)
    for line in (
        switch_line(result.get("switch_latency") or {}),
        starvation_line(result.get("switch_latency") or {}),
    ):
        if line:
            lines.append(line)
    lat = result.get("latency_ms")
    if lat and lat["p50"] > 0 and lat["p99"] > 3 * lat["p50"]:
        lines.append("P99 is over 3× the median: occasional stalls dominate the tail.")
    lines += order_sentences(result)
    lines += diagnosis_sentences(result)
    return lines


def diagnosis_sentences(result: JsonObject) -> list[str]:
    """What this run's own evidence supports as a limit (analysis/diagnosis.py; one run: at most
    confidence low)."""
    from aorta.hw_queue_eval.analysis.diagnosis import diagnose_run

    return [
        f"Limit (diagnosis, confidence {c['confidence']}, one run): {c['label']}: {c['text']}."
        for c in diagnose_run(result)["causes"]
    ]


def concurrency_line(conc: JsonObject, streams: int) -> str | None:
    """Parallelism: on-CPU queues where the kernel counted them, else streams in flight; says which."""
    wall, on_cpu = conc.get("achieved"), conc.get("on_cpu_queues")
    if on_cpu is not None:
        text = (
            f"Queue threads ran on {on_cpu:.2f} CPUs at once on average (kernel on-CPU time); "
            f"{fmt(wall, '.2f')} of {streams} streams had an op in flight (wall clock)"
        )
        if wall is not None and wall > on_cpu * 1.1:
            text += ": the difference is time ops waited for a CPU"
        return text + "."
    if wall is not None:
        return (
            f"On average {wall:.2f} of {streams} streams had an op in flight (wall clock; "
            "time on the device is not visible per stream)."
        )
    return None


def switch_line(sw: JsonObject) -> str | None:
    """The switch sentence, only when the like-for-like difference is outside the measured spread."""
    overhead, spread = sw.get("switch_overhead_ms"), sw.get("spread_ms")
    if overhead is None or not sw.get("outside_spread"):
        if overhead is not None and spread is not None:
            return (
                f"No switch cost measurable: the like-for-like difference "
                f"{overhead * 1000:+.2f} µs is inside the gaps' spread ({spread * 1000:.2f} µs)."
            )
        return None
    more = "more" if overhead > 0 else "less"
    ready = " whose next op was already queued" if "gap_readiness" in sw else ""
    return (
        f"Switching between streams on a lane costs {abs(overhead) * 1000:.2f} µs {more} than "
        f"continuing on the same stream between the same op kinds (spread "
        f"{(spread or 0) * 1000:.2f} µs; {sw.get('matched_switch_count')} switches{ready} matched)."
    )


STARVATION_SHARE = 0.01  # below 1 % of lane time the waits are not worth a sentence


def starvation_line(sw: JsonObject) -> str | None:
    """The launch-wait sentence, when lanes spent a noticeable share of their time waiting."""
    block = sw.get("launch_starvation") or {}
    share = block.get("share_of_lane_time")
    if not block.get("gaps") or share is None or share < STARVATION_SHARE:
        return None
    who = (
        "the host to launch their next op"
        if block.get("cross_stream_waits") == 0
        else "their next op (the host's launch or a cross-stream wait)"
    )
    return (
        f"Lanes sat idle {share:.1%} of their time waiting for {who}: "
        f"{block['wait_total_ms']:.2f} ms over {block['gaps']} gaps (p50 "
        f"{_duration(block.get('wait_p50_ms'))}); those gaps are left out of the "
        "switch overhead."
    )
