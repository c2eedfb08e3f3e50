"""Console block "eBPF MEMORY METRICS:" (labels as in docs/guide.md) with the host-side lines beside it."""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report import ebpf_rows
from aorta.hw_queue_eval.report.console import fmt

WIDTH = 23


def _line(console: Any, label: str, value: str) -> None:
    """A row of this block, at its own label width (one wider than the queue block's)."""
    ebpf_rows.labelled(console, label, value, WIDTH)


def _na(section: JsonObject) -> str:
    reason = section.get("gpu_memory_reason")
    return "n/a (not measured: see below)" if reason else "n/a"


def render_memory_block(section: JsonObject | None, console: Any) -> None:
    """GPU memory numbers (guide), host memory lines, lost events, window and coverage."""
    if not ebpf_rows.open_block(section, console, "eBPF MEMORY METRICS"):
        return
    na = _na(section)
    moves = section.get("bo_moves")
    _line(
        console,
        "BO moves (migrations)",
        na if moves is None else f"{moves}  ({fmt(section.get('bo_moves_per_sec'), '.1f')} /sec)",
    )
    _line(console, "Migration volume", fmt(section.get("migration_volume_mb"), ".1f", " MB", none=na))
    maps, unmaps = section.get("bo_maps"), section.get("bo_unmaps")
    _line(
        console,
        "BO maps / unmaps",
        na if maps is None and unmaps is None else f"{fmt(maps, 'd')} / {fmt(unmaps, 'd')}",
    )
    ev, rs = section.get("evictions"), section.get("restores")
    _line(console, "Evictions / restores", na if ev is None else f"{ev} / {rs}")
    _line(console, "Eviction rate", fmt(section.get("eviction_rate_per_sec"), ".2f", " /sec", none=na))
    _line(
        console,
        "Avg evict latency",
        fmt(
            section.get("avg_evict_to_restore_us"),
            ".1f",
            " us",
            none=na if ev is None else "n/a (no evict→restore pair)",
        ),
    )
    faults = section.get("host_page_faults")
    _line(
        console,
        "Host page faults",
        fmt(faults, "d")
        if faults is None
        else f"{faults}  ({fmt(section.get('host_page_faults_per_sec'), '.0f')} /sec)",
    )
    _line(
        console,
        "Host mmap / munmap",
        f"{fmt(section.get('host_mmap_calls'), 'd')} / {fmt(section.get('host_munmap_calls'), 'd')}",
    )
    for label, key in (("Direct reclaim", "direct"), ("Cgroup reclaim", "memcg")):
        episodes = section.get(f"host_{key}_reclaim_episodes")
        _line(
            console,
            label,
            "n/a"
            if episodes is None
            else f"{episodes} episodes, {fmt(section.get(f'host_{key}_reclaim_ms'), '.2f', ' ms')} stalled",
        )
    _line(console, "Page migrations", fmt(section.get("host_page_migrations"), "d"))
    _line(console, "kswapd wake-ups", fmt(section.get("host_kswapd_wakeups"), "d"))
    _line(console, "Lost events", str(section.get("lost_events")))
    dropped = ebpf_rows.dropped_text(section)
    if dropped is not None:
        _line(console, "Dropped updates", dropped)
    window = (section.get("window") or {}).get("duration_ms")
    _line(console, "Window", fmt(window, ".1f", " ms (rates are over this window)"))
    delay = section.get("restore_delay")
    if isinstance(delay, dict) and ev:
        console.print(f"  [dim]{delay.get('note')}[/dim]")
    if section.get("gpu_memory_reason"):
        console.print(f"  [dim]GPU memory: {section['gpu_memory_reason']}[/dim]")
    console.print(
        "  [dim]Evictions are KFD process evictions (queues stopped, buffers moved); "
        "JSON aliases total_faults/fault_rate_per_sec/avg_fault_latency_us mean "
        "evict→restore pairs, evictions/s, evict→restore time — not GPU page faults.[/dim]"
    )
    for family in ("amdmem", "hostmem"):
        data = (section.get("families") or {}).get(family) or {}
        statement = (data.get("coverage") or {}).get("statement")
        if statement:
            console.print(f"  [dim]{family}: {statement}[/dim]")
    if section.get("warning"):
        console.print(f"  [yellow]warning:[/yellow] {section['warning']}")
