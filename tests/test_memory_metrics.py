"""Memory metric derivation on synthetic event streams; expected numbers are worked out by hand."""

from __future__ import annotations

import pytest

from aorta.ebpf import memory_metrics as mm
from aorta.ebpf.memory_metrics import (
    KFD_EVICT_END,
    KFD_EVICT_START,
    KFD_OLD_EVICT,
    KFD_OLD_RESTORE,
    KFD_RESTORE_END,
    KFD_RESTORE_START,
    KfdEvent,
)
from aorta.ebpf.probes import amd_memory
from aorta.ebpf.probes.amd_memory import AmdMemoryFamily
from aorta.ebpf.probes.base import BpftraceDialect, CollectContext, RenderContext, TraceTarget, Window
from aorta.ebpf.program import GATE, PIDS_MAP
from aorta.ebpf.tracefs import Tracefs


def _context(window_ms: int, pid: int) -> CollectContext:
    """A collect context for one traced process and a window of `window_ms`."""
    return CollectContext(window=Window(1, 1 + window_ms * 1_000_000), pids=(pid,))


MiB = 1 << 20

# A BO-move stream and the maps the kernel program aggregates from it (one row per event):
#   A 1 MiB  SYSTEM→TT, TT→VRAM  same thread, back to back   traced     → one SYSTEM→VRAM move
#   B 4 KiB  VRAM→TT                                          kworker    → one move
#   C 8 KiB  SYSTEM→TT, later TT→SYSTEM (not SYSTEM↔VRAM)     traced     → two moves
#   D 2 MiB  VRAM→TT, TT→SYSTEM  same thread                  kworker    → one VRAM→SYSTEM move
HOPS = {(0, 1, 1): 2, (1, 2, 1): 1, (2, 1, 0): 2, (1, 0, 1): 1, (1, 0, 0): 1}
HOP_BYTES = {
    (0, 1, 1): MiB + 8192,
    (1, 2, 1): MiB,
    (2, 1, 0): 4096 + 2 * MiB,
    (1, 0, 1): 8192,
    (1, 0, 0): 2 * MiB,
}
TWOHOP = {(0, 2, 1): 1, (2, 0, 0): 1}
TWOHOP_BYTES = {(0, 2, 1): MiB, (2, 0, 0): 2 * MiB}


def test_two_hop_moves_are_counted_once():
    bo = mm.derive_bo_moves(HOPS, HOP_BYTES, TWOHOP, TWOHOP_BYTES)
    assert bo["hops_seen"] == 7
    assert bo["two_hop_moves"] == 2
    assert bo["moves"] == 5  # A, B, C twice, D
    assert bo["bytes"] == MiB + 4096 + 2 * 8192 + 2 * MiB  # each BO's size once per logical move
    routes = {(r["from"], r["to"]): (r["moves"], r["bytes"]) for r in bo["routes"]}
    assert routes == {
        ("SYSTEM", "VRAM"): (1, MiB),
        ("VRAM", "SYSTEM"): (1, 2 * MiB),
        ("SYSTEM", "TT"): (1, 8192),
        ("TT", "SYSTEM"): (1, 8192),
        ("VRAM", "TT"): (1, 4096),
    }
    assert bo["in_traced_processes"] == {"moves": 3, "bytes": MiB + 2 * 8192}
    assert bo["in_other_contexts"] == {"moves": 2, "bytes": 4096 + 2 * MiB}
    assert bo["consistent"]


def test_naive_sum_would_double_count():
    """Without the pairing the same stream reports 7 moves and 6 MiB + 20 KiB: the bug we avoid."""
    bo = mm.derive_bo_moves(HOPS, HOP_BYTES, {}, {})
    assert (bo["moves"], bo["bytes"]) == (7, 3 * MiB + 2 * MiB + 8192 * 2 + 4096 + MiB)


def test_inconsistent_maps_are_flagged():
    bo = mm.derive_bo_moves({(0, 1, 1): 1}, {(0, 1, 1): 10}, {(0, 2, 1): 1}, {(0, 2, 1): 10})
    assert not bo["consistent"]


def test_placement_names():
    assert [mm.placement_name(c) for c in (0, 1, 2, 3, 7, 8, 42)] == [
        "SYSTEM",
        "TT",
        "VRAM",
        "GDS",
        "DOORBELL",
        "MMIO_REMAP",
        "TTM42",
    ]


# Evict/restore stream, times in ns. Process 100 is traced, 200 is not.
#   t=500      restore end (100)     → a restore whose eviction predates the window: unpaired
#   t=1000     evict start (100)     → eviction 1 begins
#   t=1500     evict end   (100)     → evict worker 500 ns
#   t=5000     evict start (200)     → other process, never restored
#   t=101000   restore start (100)
#   t=102000   restore end (100)     → pair 1 = 102000 - 1000 = 101000 ns; restore worker 1000 ns
#   t=200000   evict start (100)     → eviction 2 begins
#   t=250000   evict start (100)     → eviction 3 while still evicted: counted, clock not restarted
#   t=400000   restore end (100)     → pair 2 = 400000 - 200000 = 200000 ns (no restore start seen)
STREAM = [
    KfdEvent(500, KFD_RESTORE_END, 100),
    KfdEvent(1000, KFD_EVICT_START, 100),
    KfdEvent(1500, KFD_EVICT_END, 100),
    KfdEvent(5000, KFD_EVICT_START, 200),
    KfdEvent(101000, KFD_RESTORE_START, 100),
    KfdEvent(102000, KFD_RESTORE_END, 100),
    KfdEvent(200000, KFD_EVICT_START, 100),
    KfdEvent(250000, KFD_EVICT_START, 100),
    KfdEvent(400000, KFD_RESTORE_END, 100),
]


def test_evict_restore_pairing_per_process():
    per = mm.pair_evictions(reversed(STREAM))  # order of arrival must not matter
    assert per[100].pairs_ns == [101000, 200000]
    assert per[100].evictions == 3
    assert per[100].restores == 3
    assert per[100].unpaired_restores == 1
    assert per[100].evict_worker_ns == [500]
    assert per[100].restore_worker_ns == [1000]
    assert not per[100].still_evicted_at_end
    assert per[200].evictions == 1
    assert per[200].still_evicted_at_end
    summary = mm.summarize_evictions(per, {100}, window_s=2.0)
    assert summary["evictions"] == 3
    assert summary["evict_restore_pairs"] == 2
    assert summary["eviction_rate_per_sec"] == pytest.approx(1.5)
    assert summary["avg_evict_to_restore_us"] == pytest.approx(150.5)  # (101000+200000)/2 ns
    assert summary["max_evict_to_restore_us"] == pytest.approx(200.0)
    assert summary["avg_evict_worker_us"] == pytest.approx(0.5)
    assert summary["avg_restore_worker_us"] == pytest.approx(1.0)
    assert summary["other_processes"] == {"200": {"evictions": 1, "restores": 0}}


def test_old_event_names_pair_the_same_way():
    per = mm.pair_evictions(
        [KfdEvent(10, KFD_OLD_EVICT, 7), KfdEvent(110, KFD_OLD_RESTORE, 7), KfdEvent(200, KFD_OLD_EVICT, 7)]
    )
    assert per[7].pairs_ns == [100]
    assert per[7].evictions == 2
    assert per[7].still_evicted_at_end


def test_rates_and_aliases_need_a_window():
    assert mm.per_second(10, 0) is None
    assert mm.per_second(10, None) is None
    assert mm.per_second(None, 2.0) is None
    assert mm.legacy_aliases(2, 1.5, 150.5) == {
        "total_faults": 2,
        "fault_rate_per_sec": 1.5,
        "avg_fault_latency_us": 150.5,
    }


def test_restore_delay_is_explained():
    note = mm.restore_delay_note({25: 3, 50: 1}, hz=250)
    assert note["delay_jiffies"] == 25
    assert note["delay_ms"] == pytest.approx(100.0)
    assert "fixed restore delay" in note["note"]
    unknown = mm.restore_delay_note({}, hz=None)
    assert unknown["delay_ms"] is None
    assert "unknown" in unknown["note"]


def _printed(table: dict[tuple[int, ...], int]) -> dict[str, int]:
    """A map as bpftrace -f json prints it (keys joined by commas)."""
    return {",".join(str(k) for k in key): v for key, v in table.items()}


def _kfd_maps(stream: list[KfdEvent], variant_code: int) -> dict:
    log: dict[tuple[int, ...], int] = {}
    for ev in stream:
        log[(ev.ts_ns, ev.kind, ev.proc)] = log.get((ev.ts_ns, ev.kind, ev.proc), 0) + 1
    counts: dict[tuple[int, ...], int] = {}
    for ev in stream:
        counts[(ev.kind,)] = counts.get((ev.kind,), 0) + 1
    return {
        "@amdmem_kfd_log": _printed(log),
        "@amdmem_kfd_count": _printed(counts),
        "@amdmem_kfd_variant": {str(k): variant_code for k in (1, 2, 3, 4)},
        "@amdmem_kfd_delay": {"25": 2},
    }


def test_collect_pid_variant_attributes_by_the_events_own_pid():
    maps = _kfd_maps(STREAM, variant_code=1)
    maps.update(
        {
            "@amdmem_hops": _printed(HOPS),
            "@amdmem_hop_bytes": _printed(HOP_BYTES),
            "@amdmem_twohop": _printed(TWOHOP),
            "@amdmem_twohop_bytes": _printed(TWOHOP_BYTES),
            "@amdmem_vm_maps": {"1": 120, "0": 30},
            "@amdmem_vm_map_pages": {"1": 256, "0": 0},
            "@amdmem_vm_unmaps": {"1": 100},
            "@amdmem_vm_unmap_pages": {"1": 128},
        }
    )
    res = AmdMemoryFamily().collect(maps, _context(2000, 100))
    ev = res.metrics["evictions"]
    assert ev["attribution"]["variant"] == "pid"
    assert (ev["evictions"], ev["restores"], ev["evict_restore_pairs"]) == (3, 3, 2)
    assert ev["events_logged"] == len(STREAM)
    assert not ev["log_truncated"]
    assert ev["restore_delay"]["delay_jiffies"] == 25
    assert res.metrics["bo_moves"]["moves"] == 5
    assert res.metrics["bo_moves"]["moves_per_sec"] == pytest.approx(2.5)
    assert res.metrics["vm_maps"] == {
        "count": 150,
        "bytes": 256 * 4096,
        "in_traced_processes": 120,
        "in_other_contexts": 30,
    }
    assert res.metrics["vm_unmaps"]["count"] == 100


def test_collect_pasid_variant_maps_pasid_through_kfd_sysfs(tmp_path, monkeypatch):
    # Benchmark pid 4242 has pasid 0x8001 (32769); the stream uses pasids, as older DKMS does.
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "pasid").write_text("32769\n")
    monkeypatch.setattr(amd_memory, "KFD_PROC_ROOT", str(tmp_path))
    stream = [
        KfdEvent(1000, KFD_EVICT_START, 32769),
        KfdEvent(1000 + 100_000_000, KFD_RESTORE_END, 32769),
        KfdEvent(2000, KFD_EVICT_START, 4242),
    ]  # pasid 4242 is someone else's, not our pid
    res = AmdMemoryFamily().collect(_kfd_maps(stream, variant_code=2), _context(500, 4242))
    ev = res.metrics["evictions"]
    assert ev["attribution"]["variant"] == "pasid"
    assert ev["attribution"]["pasid_of_pid"] == {"4242": 32769}
    assert (ev["evictions"], ev["evict_restore_pairs"]) == (1, 1)
    assert ev["avg_evict_to_restore_us"] == pytest.approx(100_000.0)
    assert ev["eviction_rate_per_sec"] == pytest.approx(2.0)
    assert ev["other_processes"] == {"4242": {"evictions": 1, "restores": 0}}


def test_collect_without_amd_events_reports_null_with_reason(tmp_path):
    (tmp_path / "events").mkdir()
    fam = AmdMemoryFamily()
    fam.render(
        RenderContext(
            Tracefs(tmp_path), BpftraceDialect((0, 17, 0)), TraceTarget((1,)), f"{PIDS_MAP}[pid]", GATE
        )
    )
    res = fam.collect({}, _context(1000, 1))
    assert res.metrics["bo_moves"] is None
    assert res.metrics["evictions"] is None
    assert "amdgpu_bo_move" in res.metrics["notes"]["bo_moves"]
    summary = res.metrics["summary"]
    for key in (
        "bo_moves",
        "migration_volume_mb",
        "bo_maps",
        "evictions",
        "total_faults",
        "fault_rate_per_sec",
        "avg_fault_latency_us",
    ):
        assert summary[key] is None, key  # unmeasured is null, never 0
    assert "DKMS" in summary["gpu_memory_reason"]


def test_guide_summary_and_legacy_aliases_from_measured_numbers():
    maps = _kfd_maps(STREAM, variant_code=1)
    maps.update(
        {
            "@amdmem_hops": _printed(HOPS),
            "@amdmem_hop_bytes": _printed(HOP_BYTES),
            "@amdmem_twohop": _printed(TWOHOP),
            "@amdmem_twohop_bytes": _printed(TWOHOP_BYTES),
        }
    )
    summary = AmdMemoryFamily().collect(maps, _context(2000, 100)).metrics["summary"]
    assert summary["bo_moves"] == 5
    assert summary["bo_moves_per_sec"] == pytest.approx(2.5)
    assert summary["migration_volume_bytes"] == MiB + 4096 + 2 * 8192 + 2 * MiB
    assert summary["total_faults"] == 2  # evict/restore pairs
    assert summary["fault_rate_per_sec"] == pytest.approx(1.5)  # 3 evictions / 2 s window
    assert summary["avg_fault_latency_us"] == pytest.approx(150.5)
    assert summary["rates_over_window_s"] == pytest.approx(2.0)
