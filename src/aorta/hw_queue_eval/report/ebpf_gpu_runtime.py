"""Console rows for the gpu_runtime family: launches per stream, doorbells per hardware queue.

Kept apart from ebpf_blocks.py (one job each); ebpf_blocks calls in when the family is present.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf.probes.gpu_runtime_views import SWITCHED_OFF
from aorta.hw_queue_eval.report.console import fmt


def render_gpu_runtime_rows(section: JsonObject, console: Any, collectives: JsonObject | None = None) -> None:
    """Per-stream launches/latency/syncs and per-queue doorbells, if the family attached;
    `collectives`: the join with the workload's collective ops (shown when it has rows)."""
    family = (section.get("families") or {}).get("gpu_runtime") or {}
    metrics = family.get("metrics") or {}
    if not family.get("events_attached"):
        return
    summary = metrics.get("summary") or {}
    console.print(
        f"  GPU runtime (uprobes): {fmt(metrics.get('launches_total'), 'd')} launches on "
        f"{metrics.get('streams_launching')} streams; HW queues used "
        f"{fmt(metrics.get('hw_queues_used'), 'd')}; launch call avg "
        f"{fmt(summary.get('launch_call_avg_us'), '.2f', ' us')}"
    )
    rows = metrics.get("streams") or []
    if rows:
        console.print(
            f"    {'stream':>6} {'handle':<16} {'launches':>8} {'graphs':>6} {'call avg':>10} "
            f"{'syncs':>5} {'blocked':>9} queues"
        )
        for r in rows:
            index = "-" if r.get("stream_index") is None else str(r["stream_index"])
            console.print(
                f"    {index:>6} {r['handle']:<16} {fmt(r.get('launches'), 'd'):>8} "
                f"{fmt(r.get('graph_launches'), 'd'):>6} "
                f"{fmt(r.get('launch_avg_us'), '.2f', 'us'):>10} {fmt(r.get('sync_calls'), 'd'):>5} "
                f"{fmt(r.get('sync_blocked_ms'), '.2f', 'ms'):>9} "
                f"{','.join(r.get('queues') or []) or '-'}"
            )
    for q in metrics.get("queues") or []:
        console.print(
            f"    queue {q.get('queue_id') if q.get('queue_id') is not None else '?'} "
            f"doorbell {q['doorbell_signal']}: {q['doorbell_rings']} rings from "
            f"{len(q.get('streams') or {})} streams [dim]({q['source']})[/dim]"
        )
    render_views(metrics, console)
    render_collective_join(collectives, console)
    for d in metrics.get("device_and_event_syncs") or []:
        console.print(
            f"    {d['api']}: {d['calls']} calls, host blocked {fmt(d.get('blocked_ms'), '.2f', ' ms')}"
        )
    cost = metrics.get("probe_cost") or {}
    classes = cost.get("by_entry_instruction") or {}
    if classes:
        hits = "; ".join(
            f"{fmt(v.get('entry_probe_us'), '.2f', ' us')} "
            + ("where a function starts with a push" if cls == "push" else "where it starts otherwise")
            + (
                f", +{v['entry_return_pair_us'] - v['entry_probe_us']:.2f} us with its return probe"
                if v.get("entry_return_pair_us") is not None and v.get("entry_probe_us") is not None
                else ""
            )
            for cls, v in classes.items()
        )
        console.print(
            f"    [dim]uprobe cost: {fmt(cost.get('per_launch_us'), '.2f', ' us')} per launch, "
            f"{fmt(cost.get('window_share_pct'), '.1f', '%')} of the window (an entry hit: {hits})[/dim]"
        )
        if cost.get("reason"):
            console.print(f"    [dim]uprobe cost: {cost['reason']}[/dim]")
        kinds = [
            f"{k} {fmt(v['probe_time_ms'], '.2f', ' ms')}"
            for k, v in (cost.get("by_kind") or {}).items()
            if v["calls"]
        ]
        if kinds:
            console.print(f"    [dim]uprobe time by kind: {', '.join(kinds)}[/dim]")


def render_views(metrics: JsonObject, console: Any) -> None:
    """The copy, collective and stream-ordering views (only those that saw calls), then one line
    naming the views that were not probed and why."""
    if metrics.get("graph_launches_total"):
        console.print(
            f"    graph launches: {metrics['graph_launches_total']} [dim](one per graph launch call; "
            "the kernels inside a graph are not counted)[/dim]"
        )
    copies = metrics.get("copies") or []
    if copies:
        console.print(
            "    copies and memsets (host calls per stream and direction; not copy-engine activity):"
        )
        console.print(
            f"      {'stream':<12} {'direction':<9} {'calls':>6} {'bytes':>12} {'call avg':>10}  apis"
        )
        for r in copies:
            console.print(
                f"      {_stream(r['stream'], r.get('stream_index')):<12} {r['direction']:<9} "
                f"{r['calls']:>6} {r['bytes']:>12} "
                f"{fmt(r.get('host_call_avg_us'), '.2f', 'us'):>10}  {_apis(r['by_api'])}"
            )
    colls = metrics.get("collectives") or []
    if colls:
        console.print("    collectives (NCCL/RCCL calls per stream and op; bytes = count x datatype size):")
        console.print(f"      {'stream':<12} {'op':<18} {'calls':>6} {'bytes':>12} {'call avg':>10}")
        for r in colls:
            console.print(
                f"      {_stream(r['stream'], r.get('stream_index')):<12} {r['op']:<18} "
                f"{r['calls']:>6} {fmt(r.get('bytes'), 'd'):>12} "
                f"{fmt(r.get('host_call_avg_us'), '.2f', 'us'):>10}"
            )
    groups = metrics.get("collective_groups") or {}
    if groups:
        console.print(f"      groups: {_apis(groups)}")
    graph = metrics.get("stream_graph") or {}
    edges, unknown = graph.get("edges") or [], graph.get("waits_producer_unknown") or []
    if edges or unknown:
        console.print("    stream dependencies (event recorded on producer → waited on by consumer):")
        for e in edges:
            console.print(
                f"      {_stream(e['producer'], e.get('producer_index'))} → "
                f"{_stream(e['consumer'], e.get('consumer_index'))}: {e['waits']} waits "
                f"({_apis(e['by_api'])})"
            )
        for w in unknown:
            console.print(
                f"      ? → {_stream(w['consumer'], w.get('consumer_index'))}: {w['waits']} waits "
                "[dim](event never seen recorded)[/dim]"
            )
    views = metrics.get("views") or {}
    off = [name for name, v in views.items() if v.get("reason") == SWITCHED_OFF]
    absent = [f"{name} ({v['reason']})" for name, v in views.items() if v.get("reason") and name not in off]
    if off:
        absent.append(f"{', '.join(off)} (switched off: --ebpf-gpu-runtime-views)")
    if absent:
        console.print(f"    [dim]not probed: {'; '.join(absent)}[/dim]")


VERDICT_TEXT = {"exact": "exact", "runtime_more": "runtime saw more", "runtime_fewer": "runtime saw fewer"}


def render_collective_join(joined: JsonObject | None, console: Any) -> None:
    """The workload's collective ops vs the runtime's calls per harness stream and kind, with a
    line saying what each row that is not exact means; nothing when there is no row."""
    rows = (joined or {}).get("rows") or []
    if not rows:
        return
    console.print(
        "    collectives vs the workload's collective ops (per harness stream; - = not the harness's):"
    )
    console.print(
        f"      {'stream':<6} {'op':<15} {'ops':>6} {'calls':>6} {'verdict':<17} bytes (harness / runtime)"
    )
    for r in rows:
        stream = "-" if r["stream"] is None else f"s{r['stream']}"
        console.print(
            f"      {stream:<6} {r['op']:<15} {r['harness_ops']:>6} {r['runtime_calls']:>6} "
            f"{VERDICT_TEXT.get(r['verdict'], r['verdict']):<17} "
            f"{fmt(r.get('harness_bytes'), 'd')} / {fmt(r.get('runtime_bytes'), 'd')}"
        )
    for r in rows:
        if r["verdict"] != "exact":
            stream = "-" if r["stream"] is None else f"s{r['stream']}"
            console.print(f"      [dim]{stream} {r['op']}: {r['meaning']}[/dim]")


def _stream(handle: str, index: int | None) -> str:
    """A stream by its runtime handle, with the harness's index where the handle was joined
    (`0x1000 (s0)`); a foreign job's streams (ebpf-attach) have no index and stay handles."""
    return handle if index is None else f"{handle} (s{index})"


def _apis(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items())


def render_gpu_runtime_comparison(section: JsonObject, console: Any, width: int = 22) -> None:
    """Extra comparison rows when the comparison comes from the gpu_runtime family."""
    if section.get("kernel_source") != "gpu_runtime":
        return
    console.print(
        f"  {'Launches matched:':<{width}}{fmt(section.get('launches_matched'), 'd')} of "
        f"{fmt(section.get('harness_ops'), 'd')} ops"
    )
    console.print(
        f"  {'Host launch cost:':<{width}}"
        f"{fmt(section.get('ebpf_launch_call_avg_us'), '.2f', ' us')} (eBPF, per call)  vs  "
        f"op gap {fmt(section.get('harness_op_gap_avg_us'), '.2f', ' us')} (harness, GPU)"
    )
    console.print(
        f"  {'HW queues vs streams:':<{width}}{fmt(section.get('hw_queues_used'), 'd')} vs "
        f"{fmt(section.get('streams'), 'd')}"
    )
