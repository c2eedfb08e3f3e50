"""PNG plots for `report`, drawn headless on matplotlib's Agg canvas (no pyplot, no display).

Each function returns PNG bytes, or None when the result lacks the data (the caller says why).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from aorta.common.jsontypes import JsonObject

MAX_TIMELINE_ITERATIONS = 5
BOUND_KEYS = {"min", "max", "low", "high"}
DPI = 110


def new_figure(width: float = 8.0, height: float = 4.5) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_of(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _mark_knee_and_pool(ax: Any, analysis: JsonObject | None) -> None:
    if not analysis:
        return
    if analysis.get("knee_streams") is not None:
        ax.axvline(
            analysis["knee_streams"],
            color="tab:red",
            linestyle="-",
            alpha=0.6,
            label=f"knee: {analysis['knee_streams']} streams",
        )
    if analysis.get("pool_size") is not None:
        ax.axvline(
            analysis["pool_size"],
            color="tab:gray",
            linestyle="--",
            label=f"hardware-queue pool: {analysis['pool_size']}",
        )
    if analysis.get("backend") == "cpu" and analysis.get("cpu_cores"):
        ax.axvline(
            analysis["cpu_cores"],
            color="tab:olive",
            linestyle=":",
            label=f"CPU cores: {analysis['cpu_cores']}",
        )


def _annotate_diagnosis(ax: Any, diagnosis: JsonObject | None) -> None:
    """The diagnosed cause(s) written at the knee (or the examined point), one line each."""
    where = (diagnosis or {}).get("knee_streams") or (diagnosis or {}).get("examined_streams")
    if not diagnosis or where is None:
        return
    causes = diagnosis.get("causes") or []
    lines = [f"cause: {c['label']} ({c['confidence']})" for c in causes] or ["no documented cause supported"]
    ax.annotate(
        "\n".join(lines),
        xy=(where, 0.04),
        xycoords=("data", "axes fraction"),
        xytext=(6, 0),
        textcoords="offset points",
        va="bottom",
        fontsize="small",
        color="tab:red",
        bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "tab:red", "alpha": 0.85},
    )


def _stream_axis(ax: Any, streams: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(streams))
    ax.set_xticklabels([str(s) for s in streams])
    ax.set_xlabel("streams")
    ax.grid(True, alpha=0.3)


def sweep_throughput(sweep: JsonObject, results: list[JsonObject]) -> bytes | None:
    """Throughput vs streams (median over repeats, CI band and every run when repeated) with the
    ideal line, the knee and the queue-pool size marked."""
    from aorta.hw_queue_eval.analysis.scaling import group_points

    grouped = group_points(results)
    if not grouped:
        return None
    points = [(p.streams, p.throughput) for p in grouped]
    analysis = sweep.get("analysis") or {}
    streams, tput = zip(*points, strict=True)
    fig = new_figure()
    ax = fig.add_subplot()
    repeated = any(p.runs > 1 for p in grouped)
    ax.plot(
        streams,
        tput,
        "o-",
        color="tab:blue",
        label="median over runs" if repeated else "measured (one run per point)",
    )
    if repeated:
        with_ci = [p for p in grouped if p.throughput_low is not None]
        if with_ci:
            level = min(p.ci_level or 0.0 for p in with_ci)
            ax.fill_between(
                [p.streams for p in with_ci],
                [p.throughput_low for p in with_ci],
                [p.throughput_high for p in with_ci],
                color="tab:blue",
                alpha=0.2,
                label=f"{level:.0%} CI of the median",
            )
        xs = [p.streams for p in grouped for _ in p.throughput_runs]
        ys = [t for p in grouped for t in p.throughput_runs]
        ax.plot(xs, ys, ".", color="tab:blue", alpha=0.45, label="each run")
    eff = dict(zip(analysis.get("stream_counts") or [], analysis.get("efficiency") or [], strict=False))
    ideal = [t / eff[s] for s, t in points if eff.get(s)]
    if len(ideal) == len(points):
        ax.plot(streams, ideal, ":", color="tab:green", label="ideal (work each point does)")
    _mark_knee_and_pool(ax, analysis)
    _annotate_diagnosis(ax, analysis.get("diagnosis"))
    _stream_axis(ax, streams)
    ax.set_ylabel(f"throughput ({sweep.get('throughput_unit')})")
    ax.set_title(f"{sweep.get('workload')}: throughput vs streams")
    ax.legend(fontsize="small")
    return png_of(fig)


def sweep_latency(sweep: JsonObject, results: list[JsonObject]) -> bytes | None:
    """P50/P99 iteration latency vs streams (and kernel dispatch P99 when traced)."""
    import statistics

    from aorta.hw_queue_eval.analysis.scaling import dispatch_p99_us

    per: dict[int, list[tuple[float, float, float | None]]] = {}
    for r in results:
        if r.get("latency_ms"):
            per.setdefault(r["stream_count"], []).append(
                (r["latency_ms"]["p50"], r["latency_ms"]["p99"], dispatch_p99_us(r))
            )

    def med(values: list[Any]) -> Any:
        clean = [v for v in values if v is not None]
        return statistics.median(clean) if clean else None

    rows = [
        (n, med([v[0] for v in per[n]]), med([v[1] for v in per[n]]), med([v[2] for v in per[n]]))
        for n in sorted(per)
    ]  # medians over repeats
    if not rows:
        return None
    streams = [r[0] for r in rows]
    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot(streams, [r[2] for r in rows], "o-", color="tab:red", label="P99")
    ax.plot(streams, [r[1] for r in rows], "s--", color="tab:blue", label="P50")
    analysis = sweep.get("analysis") or {}
    _mark_knee_and_pool(ax, analysis)
    if analysis.get("latency_jump_streams") is not None:
        jump = analysis["latency_jump_streams"]
        ax.annotate(
            "P99 jump",
            (jump, dict(zip(streams, [r[2] for r in rows], strict=True))[jump]),
            textcoords="offset points",
            xytext=(8, 8),
            color="tab:red",
        )
    _stream_axis(ax, streams)
    ax.set_ylabel("iteration latency (ms)")
    if any(r[3] is not None for r in rows):
        ax2 = ax.twinx()
        ax2.plot(streams, [r[3] for r in rows], "^-.", color="tab:purple", label="eBPF submit→dispatch P99")
        ax2.set_ylabel("kernel dispatch P99 (µs)")
        ax2.legend(fontsize="small", loc="lower right")
    ax.set_title(f"{sweep.get('workload')}: P99 latency vs streams")
    ax.legend(fontsize="small", loc="upper left")
    return png_of(fig)


def latency_distribution(result: JsonObject) -> bytes | None:
    """Histogram and empirical CDF of the per-iteration latency samples."""
    samples = np.asarray(result.get("iteration_times_ms") or [], dtype=float)
    if samples.size == 0:
        return None
    fig = new_figure(9.0, 4.0)
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
    return png_of(fig)


def op_timeline(result: JsonObject) -> tuple[bytes | None, str]:
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
    fig = new_figure(10.0, max(2.5, 0.35 * streams + 1.5))
    ax = fig.add_subplot()
    bars: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in rows:
        bars.setdefault((r[cols["label"]], r[cols["stream"]]), []).append(
            (r[cols["start_us"]] / 1e3, (r[cols["end_us"]] - r[cols["start_us"]]) / 1e3)
        )
    seen: set[int] = set()
    for (label_index, stream), spans in sorted(bars.items()):
        name = labels[label_index] if label_index < len(labels) else str(label_index)
        ax.broken_barh(
            spans,
            (stream - 0.4, 0.8),
            facecolors=f"C{label_index % 10}",
            label=None if label_index in seen else name,
        )
        seen.add(label_index)
    ax.legend(fontsize="small", loc="upper right")
    mapping = (result.get("queue_mapping") or {}).get("stream_to_queue") or []
    ax.set_yticks(range(streams))
    ax.set_yticklabels([f"s{s}" + (f" (q{mapping[s]})" if s < len(mapping) else "") for s in range(streams)])
    ax.invert_yaxis()
    ax.set_xlabel("time since window start (ms)")
    ax.set_title(f"{result.get('workload_name')}: ops per stream")
    ax.grid(True, axis="x", alpha=0.3)
    caption = (
        f"first {len(shown)} of {len(iterations)} measured iterations"
        if len(iterations) > len(shown)
        else f"all {len(iterations)} measured iterations"
    )
    return png_of(fig), caption


def find_histograms(section: Any, path: str = "") -> list[tuple[str, list[JsonObject]]]:
    """bpftrace-style histograms in an eBPF section: lists of {count, min/max (or low/high)} buckets
    (bpftrace's JSON may omit `min` on the first bucket)."""
    found: list[tuple[str, list[JsonObject]]] = []
    if isinstance(section, dict):
        for key, value in section.items():
            found += find_histograms(value, f"{path}.{key}" if path else str(key))
    elif (
        isinstance(section, list)
        and section
        and all(isinstance(b, dict) and "count" in b and BOUND_KEYS & b.keys() for b in section)
    ):
        found.append((path, section))
    return found


_TIME_UNITS = (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9))


def time_unit_of(name: str) -> float | None:
    """Nanoseconds per unit of a histogram named …_ns / …_us / …_ms / …_s (None: not a time)."""
    lowered = name.lower()
    for suffix, scale in (("_ns", 1.0), ("_us", 1e3), ("_ms", 1e6), ("_s", 1e9)):
        if lowered.endswith(suffix):
            return scale
    return None


def complete_buckets(buckets: list[JsonObject]) -> list[tuple[int, int, int]]:
    """(low, high exclusive, count) of every bucket from the first to the last one printed, the
    empty ones included: log-linear buckets (4 per power of two) or log2 buckets when the bounds
    are theirs, else the printed buckets as they are."""
    from aorta.ebpf import hist

    triples = sorted(hist.buckets(buckets))
    if not triples:
        return []
    counts = {low: count for low, _, count in triples}

    def is_loglinear(low: int, high: int) -> bool:
        return hist.loglinear_bounds(hist.loglinear_index(low)) == (low, high + 1)

    if all(is_loglinear(low, high) for low, high, _ in triples):
        first, last = (hist.loglinear_index(triples[i][0]) for i in (0, -1))
        spans = [hist.loglinear_bounds(i) for i in range(first, last + 1)]
    elif all(low > 0 and low & (low - 1) == 0 and high == 2 * low - 1 for low, high, _ in triples):
        first, last = (triples[i][0].bit_length() - 1 for i in (0, -1))
        spans = [(1 << e, 1 << (e + 1)) for e in range(first, last + 1)]
    else:
        return [(low, high + 1, count) for low, high, count in triples]
    return [(low, high, counts.get(low, 0)) for low, high in spans]


def _quantity(name: str) -> str:
    """'families.cpu_sched.metrics.submit_to_dispatch_hist_ns' → 'submit to dispatch'."""
    stem = name.rsplit(".", 1)[-1].lower()
    for suffix in ("_ns", "_us", "_ms", "_s", "_hist"):
        stem = stem.removesuffix(suffix)
    return stem.replace("_", " ")


def histogram_figure(name: str, buckets: list[JsonObject]) -> Any:
    """Figure of one kernel-side histogram: a bar per bucket (empty ones included) spanning its
    bounds on a log axis, in one readable time unit when the histogram holds times."""
    spans = complete_buckets(buckets)
    scale = time_unit_of(name)
    unit, per_unit = "", 1.0
    if scale is not None:
        top = max(high for _, high, _ in spans) * scale
        unit, per_unit = next(((u, f) for u, f in reversed(_TIME_UNITS) if top >= f), _TIME_UNITS[0])
        per_unit /= scale
    fig = new_figure(8.0, 3.5)
    ax = fig.add_subplot()
    lows = [max(low, high / 2) / per_unit for low, high, _ in spans]  # a [0, 1) bucket from 0.5
    widths = [high / per_unit - left for left, (_, high, _) in zip(lows, spans, strict=True)]
    ax.bar(lows, [c for _, _, c in spans], width=widths, align="edge", color="tab:purple", edgecolor="white")
    ax.set_xscale("log")
    empty = sum(1 for _, _, c in spans if c == 0)
    ax.set_xlabel(f"{_quantity(name)}" + (f" ({unit}, log scale)" if unit else " (log scale)"))
    ax.set_ylabel("events")
    ax.set_title(f"eBPF: {name}\n{len(spans)} buckets, {empty} empty", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def ebpf_histogram(name: str, buckets: list[JsonObject]) -> bytes:
    """PNG of `histogram_figure`."""
    return png_of(histogram_figure(name, buckets))


def policy_figure(data: JsonObject, metric: str = "throughput") -> Any:
    """Figure of a policy sweep: one bar per policy (median over repeats) with the CI of the
    median as error bar and each repeat as a dot; not-applicable / failed policies labelled."""
    rows = (data.get("summary") or {}).get("rows") or []
    names = [r["policy"] for r in rows]
    unit = next((r.get("throughput_unit") for r in rows if r.get("throughput_unit")), "")
    fig = new_figure(max(6.0, 1.1 * len(rows) + 2.0), 4.5)
    ax = fig.add_subplot()
    for i, row in enumerate(rows):
        if metric == "throughput":
            runs = [r["throughput"] for r in row.get("runs") or [] if r.get("throughput") is not None]
        else:
            runs = [r["latency_p99_ms"] for r in row.get("runs") or [] if r.get("latency_p99_ms") is not None]
        if not runs:
            ax.text(
                i,
                0.03,
                (row.get("status") or "n/a").replace("_", " "),
                rotation=90,
                ha="center",
                va="bottom",
                fontsize="small",
                color="tab:gray",
                transform=ax.get_xaxis_transform(),
            )
            continue
        median = float(np.median(runs))
        color = "tab:gray" if row["policy"] == "baseline" else "tab:blue"
        ax.bar(i, median, color=color, alpha=0.7)
        if len(runs) > 1:
            from aorta.hw_queue_eval.analysis.stats import median_ci

            ci = median_ci(runs)
            if ci.low is not None and ci.high is not None:
                ax.errorbar(i, median, yerr=[[median - ci.low], [ci.high - median]], color="black", capsize=5)
        ax.plot([i] * len(runs), runs, ".", color="black", alpha=0.6)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_xlim(-0.6, len(names) - 0.4)  # room for the labels of a last policy without a bar
    ax.set_xlabel("policy")
    if metric == "throughput":
        ax.set_ylabel(f"throughput ({unit}), median over repeats")
    else:
        ax.set_ylabel("P99 iteration latency (ms), median over repeats")
    repeats = data.get("repeats")
    ax.set_title(
        f"{data.get('workload')} @ {data.get('streams')} streams, {repeats} repeat(s)\n"
        "bar: median; whisker: CI of the median; dots: runs",
        fontsize="medium",
    )
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def policy_plot(data: JsonObject, metric: str = "throughput") -> bytes | None:
    """PNG of `policy_figure`, None when no policy has a measurement."""
    rows = (data.get("summary") or {}).get("rows") or []
    if not any(r.get("runs") for r in rows):
        return None
    return png_of(policy_figure(data, metric))
