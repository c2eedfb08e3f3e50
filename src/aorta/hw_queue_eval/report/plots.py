"""PNG plots for `report`, drawn headless on matplotlib's Agg canvas (no pyplot, no display).

Each function returns PNG bytes, or None when the result lacks the data (the caller says why).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_TIMELINE_ITERATIONS = 5
BOUND_KEYS = {"min", "max", "low", "high"}
DPI = 110


def _figure(width: float = 8.0, height: float = 4.5) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _mark_knee_and_pool(ax: Any, analysis: dict[str, Any] | None) -> None:
    if not analysis:
        return
    if analysis.get("knee_streams") is not None:
        ax.axvline(analysis["knee_streams"], color="tab:red", linestyle="-", alpha=0.6,
                   label=f"knee: {analysis['knee_streams']} streams")
    if analysis.get("pool_size") is not None:
        ax.axvline(analysis["pool_size"], color="tab:gray", linestyle="--",
                   label=f"hardware-queue pool: {analysis['pool_size']}")
    if analysis.get("backend") == "cpu" and analysis.get("cpu_cores"):
        ax.axvline(analysis["cpu_cores"], color="tab:olive", linestyle=":",
                   label=f"CPU cores: {analysis['cpu_cores']}")


def _stream_axis(ax: Any, streams: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(streams))
    ax.set_xticklabels([str(s) for s in streams])
    ax.set_xlabel("streams")
    ax.grid(True, alpha=0.3)


def sweep_throughput(sweep: dict[str, Any], results: list[dict[str, Any]]) -> bytes | None:
    """Throughput vs streams with the ideal line, the knee and the queue-pool size marked."""
    points = sorted((r["stream_count"], r["throughput"]) for r in results
                    if r.get("throughput") is not None)
    if len(points) < 1:
        return None
    analysis = sweep.get("analysis") or {}
    streams, tput = zip(*points, strict=True)
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(streams, tput, "o-", color="tab:blue", label="measured")
    eff = dict(zip(analysis.get("stream_counts") or [], analysis.get("efficiency") or [],
                   strict=False))
    ideal = [t / eff[s] for s, t in points if eff.get(s)]
    if len(ideal) == len(points):
        ax.plot(streams, ideal, ":", color="tab:green", label="ideal (work each point does)")
    _mark_knee_and_pool(ax, analysis)
    _stream_axis(ax, streams)
    ax.set_ylabel(f"throughput ({sweep.get('throughput_unit')})")
    ax.set_title(f"{sweep.get('workload')}: throughput vs streams")
    ax.legend(fontsize="small")
    return _png(fig)


def sweep_latency(sweep: dict[str, Any], results: list[dict[str, Any]]) -> bytes | None:
    """P50/P99 iteration latency vs streams (and kernel dispatch P99 when traced)."""
    from aorta.hw_queue_eval.scaling import dispatch_p99_us

    rows = sorted((r["stream_count"], r["latency_ms"]["p50"], r["latency_ms"]["p99"],
                   dispatch_p99_us(r)) for r in results if r.get("latency_ms"))
    if not rows:
        return None
    streams = [r[0] for r in rows]
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(streams, [r[2] for r in rows], "o-", color="tab:red", label="P99")
    ax.plot(streams, [r[1] for r in rows], "s--", color="tab:blue", label="P50")
    analysis = sweep.get("analysis") or {}
    _mark_knee_and_pool(ax, analysis)
    if analysis.get("latency_jump_streams") is not None:
        jump = analysis["latency_jump_streams"]
        ax.annotate("P99 jump", (jump, dict(zip(streams, [r[2] for r in rows], strict=True))[jump]),
                    textcoords="offset points", xytext=(8, 8), color="tab:red")
    _stream_axis(ax, streams)
    ax.set_ylabel("iteration latency (ms)")
    if any(r[3] is not None for r in rows):
        ax2 = ax.twinx()
        ax2.plot(streams, [r[3] for r in rows], "^-.", color="tab:purple",
                 label="eBPF submit→dispatch P99")
        ax2.set_ylabel("kernel dispatch P99 (µs)")
        ax2.legend(fontsize="small", loc="lower right")
    ax.set_title(f"{sweep.get('workload')}: P99 latency vs streams")
    ax.legend(fontsize="small", loc="upper left")
    return _png(fig)


def latency_distribution(result: dict[str, Any]) -> bytes | None:
    """Histogram and empirical CDF of the per-iteration latency samples."""
    samples = np.asarray(result.get("iteration_times_ms") or [], dtype=float)
    if samples.size == 0:
        return None
    fig = _figure(9.0, 4.0)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.hist(samples, bins=min(50, max(5, samples.size // 3)), color="tab:blue", alpha=0.8)
    ax1.set_xlabel("iteration latency (ms)")
    ax1.set_ylabel("iterations")
    ax1.set_title("histogram")
    ordered = np.sort(samples)
    ax2.step(ordered, np.arange(1, ordered.size + 1) / ordered.size, where="post")
    for q, style in ((50, "--"), (99, ":")):
        ax2.axvline(np.percentile(samples, q), linestyle=style, color="tab:red", label=f"P{q}")
    ax2.set_xlabel("iteration latency (ms)")
    ax2.set_ylabel("fraction of iterations ≤ x")
    ax2.set_title("CDF")
    ax2.legend(fontsize="small")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    return _png(fig)


def op_timeline(result: dict[str, Any]) -> tuple[bytes | None, str]:
    """One lane per stream, ops as bars coloured by label (first iterations only); and a caption."""
    table = result.get("op_intervals") or {}
    rows = table.get("rows") or []
    if not rows:
        return None, "no op intervals recorded"
    cols = {name: i for i, name in enumerate(table["columns"])}
    labels = table.get("labels") or []
    iterations = sorted({r[cols["iteration"]] for r in rows})
    shown = set(iterations[:MAX_TIMELINE_ITERATIONS])
    rows = [r for r in rows if r[cols["iteration"]] in shown]
    streams = int(result.get("stream_count") or 1 + max(r[cols["stream"]] for r in rows))
    fig = _figure(10.0, max(2.5, 0.35 * streams + 1.5))
    ax = fig.add_subplot()
    bars: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in rows:
        bars.setdefault((r[cols["label"]], r[cols["stream"]]), []).append(
            (r[cols["start_us"]] / 1e3, (r[cols["end_us"]] - r[cols["start_us"]]) / 1e3))
    seen: set[int] = set()
    for (label_index, stream), spans in sorted(bars.items()):
        name = labels[label_index] if label_index < len(labels) else str(label_index)
        ax.broken_barh(spans, (stream - 0.4, 0.8), facecolors=f"C{label_index % 10}",
                       label=None if label_index in seen else name)
        seen.add(label_index)
    ax.legend(fontsize="small", loc="upper right")
    mapping = (result.get("queue_mapping") or {}).get("stream_to_queue") or []
    ax.set_yticks(range(streams))
    ax.set_yticklabels([f"s{s}" + (f" (q{mapping[s]})" if s < len(mapping) else "")
                        for s in range(streams)])
    ax.invert_yaxis()
    ax.set_xlabel("time since window start (ms)")
    ax.set_title(f"{result.get('workload_name')}: ops per stream")
    ax.grid(True, axis="x", alpha=0.3)
    caption = (f"first {len(shown)} of {len(iterations)} measured iterations"
               if len(iterations) > len(shown) else f"all {len(iterations)} measured iterations")
    return _png(fig), caption


def find_histograms(section: Any, path: str = "") -> list[tuple[str, list[dict[str, Any]]]]:
    """bpftrace-style histograms in an eBPF section: lists of {count, min/max (or low/high)} buckets
    (bpftrace's JSON may omit `min` on the first bucket)."""
    found: list[tuple[str, list[dict[str, Any]]]] = []
    if isinstance(section, dict):
        for key, value in section.items():
            found += find_histograms(value, f"{path}.{key}" if path else str(key))
    elif isinstance(section, list) and section and all(
            isinstance(b, dict) and "count" in b and BOUND_KEYS & b.keys() for b in section):
        found.append((path, section))
    return found


def ebpf_histogram(name: str, buckets: list[dict[str, Any]]) -> bytes:
    """Bar chart of one kernel-side histogram."""
    fig = _figure(8.0, 3.5)
    ax = fig.add_subplot()
    lows = [b.get("min", b.get("low", f"≤{b.get('max', b.get('high'))}")) for b in buckets]
    ax.bar(range(len(buckets)), [b["count"] for b in buckets], color="tab:purple")
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels([str(low) for low in lows], rotation=45, fontsize="x-small")
    ax.set_xlabel("bucket lower bound")
    ax.set_ylabel("events")
    ax.set_title(f"eBPF: {name}")
    return _png(fig)
