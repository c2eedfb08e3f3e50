"""Console rows for the gpu_runtime family: launches per stream, doorbells per hardware queue.

Kept apart from ebpf_blocks.py (one job each); ebpf_blocks calls in when the family is present.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.report.console import fmt


def render_gpu_runtime_rows(section: dict[str, Any], console: Any) -> None:
    """Per-stream launches/latency/syncs and per-queue doorbells, if the family attached."""
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
            f"    {'stream':>6} {'handle':<16} {'launches':>8} {'call avg':>10} "
            f"{'syncs':>5} {'blocked':>9} queues"
        )
        for r in rows:
            index = "-" if r.get("stream_index") is None else str(r["stream_index"])
            console.print(
                f"    {index:>6} {r['handle']:<16} {r['launches']:>8} "
                f"{fmt(r.get('launch_avg_us'), '.2f', 'us'):>10} {r['sync_calls']:>5} "
                f"{fmt(r.get('sync_blocked_ms'), '.2f', 'ms'):>9} "
                f"{','.join(r.get('queues') or []) or '-'}"
            )
    for q in metrics.get("queues") or []:
        console.print(
            f"    queue {q.get('queue_id') if q.get('queue_id') is not None else '?'} "
            f"doorbell {q['doorbell_signal']}: {q['doorbell_rings']} rings from "
            f"{len(q.get('streams') or {})} streams [dim]({q['source']})[/dim]"
        )
    for d in metrics.get("device_and_event_syncs") or []:
        console.print(f"    {d['api']}: {d['calls']} calls, host blocked {d['blocked_ms']:.2f} ms")
    cost = metrics.get("probe_cost") or {}
    if cost.get("entry_return_pair_us") is not None:
        console.print(
            f"    [dim]uprobe cost: {fmt(cost.get('per_launch_us'), '.2f', ' us')} per launch "
            f"(entry probe {cost['entry_probe_us']:.2f} us, entry+return "
            f"{cost['entry_return_pair_us']:.2f} us), "
            f"{fmt(cost.get('window_share_pct'), '.1f', '%')} of the window[/dim]"
        )


def render_gpu_runtime_comparison(section: dict[str, Any], console: Any, width: int = 22) -> None:
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
