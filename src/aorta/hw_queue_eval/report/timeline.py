"""The report's timeline picture: a short slice of one measured iteration, lane by lane.

The iteration of median span is drawn (the typical one). Lanes, top to bottom: one per stream
(its ops, coloured by label), one per hardware queue (the same ops where they ran) and one of
hand-offs to an idle queue (an op that became ready while its queue had nothing running: the
moment the CPU backend rings that queue's doorbell), all from the result's `op_intervals`, ms
since the window start; then, when the run kept an eBPF timeline (--trace-out's cpu_sched
records, on the same CLOCK_MONOTONIC origin), one lane per traced thread with its on-CPU slices
and one of the doorbell writes eBPF saw. Without that timeline the caption says on-CPU time is
not in the file (it keeps only the kernel's per-thread totals).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report import plots
from aorta.hw_queue_eval.report.trace import ebpf_timeline

SLICE_MS = 20.0  # at most this much of the iteration: ops stay wide enough to see


@dataclass
class Slice:
    """What the picture draws: lanes of (start ms, duration ms, label index) and tick times."""

    iteration: int
    start_ms: float
    end_ms: float
    iteration_ms: float
    lanes: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)
    handoffs_ms: list[float] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    window_handoffs: int = 0  # op hand-offs over every row of the window
    # eBPF timeline (None: the run kept none): on-CPU slices (start ms, duration ms) per thread
    # lane, doorbell write times (ms), and the records' seen/dropped counts for the caption
    on_cpu: dict[str, list[tuple[float, float]]] | None = None
    doorbells_ms: list[float] = field(default_factory=list)
    on_cpu_dropped: int | None = None


def add_on_cpu(part: Slice, result: JsonObject) -> None:
    """Fill `part`'s eBPF lanes from the cpu_sched timeline: each traced thread's on-CPU slices
    clipped to [start_ms, end_ms] (workers by queue, then the others, by tid) and the doorbell
    writes in it. Leaves on_cpu None when there is no timeline or no window origin."""
    tl = ebpf_timeline(result)
    origin = (result.get("metadata") or {}).get("window_start_monotonic_ns")
    if tl is None or not isinstance(origin, int):
        return

    def ms(ns: float) -> float:
        return (ns - origin) / 1e6

    threads = {t["tid"]: t for t in tl.get("threads") or []}
    kind = tl.get("on_cpu") or {}
    for tid, *_ in kind.get("rows") or []:
        threads.setdefault(tid, {"tid": tid, "label": "thread", "queue": None})
    order = sorted(threads.values(), key=lambda t: (t["queue"] is None, t["queue"] or 0, t["tid"]))
    lane = {t["tid"]: f"{t['label']} {t['tid']} on CPU" for t in order}
    part.on_cpu = {lane[t["tid"]]: [] for t in order}
    for tid, start, end, *_ in kind.get("rows") or []:
        a, e = max(ms(start), part.start_ms), min(ms(end), part.end_ms)
        if e > a:
            part.on_cpu[lane[tid]].append((a, e - a))
    part.on_cpu_dropped = kind.get("dropped")
    part.doorbells_ms = sorted(
        ms(row[3])
        for row in (tl.get("doorbells") or {}).get("rows") or []
        if part.start_ms <= ms(row[3]) < part.end_ms
    )


def handoff_times(rows: list[JsonObject]) -> list[float]:
    """Ready times (µs) of the ops whose queue had finished every earlier op before they became
    ready: a hand-off to an idle queue. An op queued behind its stream's previous op is ready at
    exactly that op's end, so it is not one. Rows of one window, any order; a row without a ready
    time (GPU: no comparable clock) is no known hand-off."""
    out = []
    busy_until: dict[int, float] = {}
    for row in sorted(rows, key=lambda r: (r["start_us"], r["end_us"])):
        queue = row["queue"]
        ready = row["ready_us"]
        if ready is not None and ready > busy_until.get(queue, float("-inf")):  # = an end: queued behind
            out.append(ready)
        busy_until[queue] = max(busy_until.get(queue, float("-inf")), row["end_us"])
    return sorted(out)


def select_slice(result: JsonObject, slice_ms: float = SLICE_MS) -> Slice | None:
    """The first `slice_ms` of the iteration of median span (the typical one; the earliest of
    two), from the first op's ready time; None without op rows."""
    table = result.get("op_intervals") or {}
    columns = table.get("columns") or []
    rows = every = [dict(zip(columns, r, strict=True)) for r in table.get("rows") or []]
    if not rows:
        return None
    spans: dict[int, list[float]] = {}
    for r in rows:
        begin = r["start_us"] if r["ready_us"] is None else min(r["ready_us"], r["start_us"])
        low, high = spans.setdefault(r["iteration"], [begin, r["end_us"]])
        spans[r["iteration"]] = [min(low, begin), max(high, r["end_us"])]
    ordered = sorted(spans, key=lambda i: (spans[i][1] - spans[i][0], i))
    first = ordered[(len(ordered) - 1) // 2]
    rows = [r for r in rows if r["iteration"] == first]
    t0 = spans[first][0] / 1e3
    t_end = max(r["end_us"] for r in rows) / 1e3
    cut = min(t_end, t0 + slice_ms)
    shown = [r for r in rows if r["start_us"] / 1e3 < cut]
    part = Slice(first, t0, cut, t_end - t0, labels=list(table.get("labels") or []))
    streams = int(result.get("stream_count") or 1 + max(r["stream"] for r in rows))
    queues = sorted({r["queue"] for r in rows})
    for s in range(streams):
        part.lanes[f"s{s}"] = []
    for q in queues:
        part.lanes[f"q{q}"] = []
    for r in shown:
        start = r["start_us"] / 1e3
        bar = (start, min(r["end_us"] / 1e3, cut) - start, r["label"])
        part.lanes[f"s{r['stream']}"].append(bar)
        part.lanes[f"q{r['queue']}"].append(bar)
    part.handoffs_ms = [t / 1e3 for t in handoff_times(rows) if t0 <= t / 1e3 < cut]
    part.window_handoffs = len(handoff_times(every))
    add_on_cpu(part, result)
    return part


HANDOFF_LANE = "hand-offs"
DOORBELL_LANE = "doorbells (eBPF)"
ON_CPU_COLOUR = "0.35"  # dark grey: not one of the op labels' colours


def _instants(
    ax: Any, times_ms: list[float], y: float, style: tuple[str, int, str], label: str, gid: str
) -> None:
    """One marker per instant on lane `y`; style = (marker, size, colour)."""
    marker, size, colour = style
    ax.plot(
        times_ms, [y] * len(times_ms), linestyle="none", marker=marker, markersize=size,
        color=colour, label=label, gid=gid,
    )  # fmt: skip


def timeline_figure(result: JsonObject, slice_ms: float = SLICE_MS) -> tuple[Any, str]:
    """(figure, caption) of the slice; (None, why) when the result has no op rows."""
    part = select_slice(result, slice_ms)
    if part is None:
        return None, "no op intervals recorded"
    extra = [] if part.on_cpu is None else [*part.on_cpu, DOORBELL_LANE]
    names = [*part.lanes, HANDOFF_LANE, *extra]
    fig = plots.new_figure(10.0, max(3.0, 0.28 * len(names) + 1.6))
    ax = fig.add_subplot()
    seen: set[int] = set()
    for y, (lane, bars) in enumerate(part.lanes.items()):
        by_label: dict[int, list[tuple[float, float]]] = {}
        for start, width, label in bars:
            by_label.setdefault(label, []).append((start, width))
        for label, spans in sorted(by_label.items()):
            name = part.labels[label] if label < len(part.labels) else str(label)
            ax.broken_barh(
                spans,
                (y - 0.4, 0.8),
                facecolors=f"C{label % 10}",
                label=None if label in seen else name,
                gid=lane,
            )
            seen.add(label)
    y = len(part.lanes)
    _instants(ax, part.handoffs_ms, y, ("|", 12, "black"), "hand-off to an idle queue", HANDOFF_LANE)
    if part.on_cpu is not None:
        for y, (lane, spans) in enumerate(part.on_cpu.items(), start=len(part.lanes) + 1):
            if spans:
                ax.broken_barh(
                    spans,
                    (y - 0.3, 0.6),
                    facecolors=ON_CPU_COLOUR,
                    label=None if y > len(part.lanes) + 1 else "on CPU (eBPF sched_switch)",
                    gid=lane,
                )
        y = len(names) - 1
        _instants(ax, part.doorbells_ms, y, ("v", 6, "crimson"), "doorbell write (eBPF)", DOORBELL_LANE)
        ax.axhline(len(part.lanes) + 0.5, color="gray", linewidth=0.8)
    streams = sum(1 for n in part.lanes if n.startswith("s"))
    handoffs = ((result.get("ops") or {}).get("handoffs") or {}).get("count")
    ax.axhline(streams - 0.5, color="gray", linewidth=0.8)
    ax.axhline(len(part.lanes) - 0.5, color="gray", linewidth=0.8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names)
    ax.set_ylim(len(names) - 0.4, -0.6)
    ax.set_xlim(part.start_ms, part.end_ms)
    ax.set_xlabel("time since window start (ms)")
    ax.set_title(
        f"{result.get('workload_name')}: iteration {part.iteration} (median span), "
        f"{part.end_ms - part.start_ms:.2f} of {part.iteration_ms:.2f} ms — streams, queues, hand-offs"
        + ("" if part.on_cpu is None else ", on CPU, doorbells"),
        fontsize="medium",
    )
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    caption = (
        f"iteration {part.iteration} (of median span), {part.end_ms - part.start_ms:.2f} ms from "
        "its first op's ready time: "
        f"{sum(len(b) for n, b in part.lanes.items() if n.startswith('s'))} ops on "
        f"{streams} streams and {len(part.lanes) - streams} queues, {len(part.handoffs_ms)} "
        "hand-offs to an idle queue (an op ready while its queue ran nothing: a doorbell ring "
        f"on the CPU backend; {part.window_handoffs} in the window's op rows"
        + (
            f", of the harness's {handoffs} doorbell rings: the rest handed over a sync marker or wait"
            if isinstance(handoffs, int)
            else ""
        )
        + ")"
        + (
            "; worker on-CPU time: not in this file (it keeps the kernel's per-thread totals, in "
            "the eBPF per-thread table, not on-CPU intervals; run with --ebpf-trace --trace-out to keep them)"
            if part.on_cpu is None
            else f"; on-CPU slices of {len(part.on_cpu)} traced threads and {len(part.doorbells_ms)} "
            "doorbell writes from the eBPF timeline (sched_switch"
            + (f"; {part.on_cpu_dropped} slices past its cap not kept" if part.on_cpu_dropped else "")
            + ")"
        )
    )
    return fig, caption


def timeline_png(result: JsonObject) -> tuple[bytes | None, str]:
    """PNG of `timeline_figure` and its caption (None and why when there is nothing to draw)."""
    fig, caption = timeline_figure(result)
    return (None if fig is None else plots.png_of(fig)), caption
