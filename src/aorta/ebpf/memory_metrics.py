"""Pure derivations for the memory families: maps or event lists in, typed numbers out.

No bpftrace, no I/O (except the small sysfs/procfs readers at the bottom, kept apart): every rule
that turns kernel aggregates into a reported number lives here so tests can feed it synthetic
data whose expected result is computed by hand.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import CollectContext

#: TTM memory types used by amdgpu_bo_move (old/new_placement) and amdgpu_bo_create (type).
TTM_PLACEMENTS = {
    0: "SYSTEM",
    1: "TT",
    2: "VRAM",
    3: "GDS",
    4: "GWS",
    5: "OA",
    6: "PREEMPT",
    7: "DOORBELL",
    8: "MMIO_REMAP",
}
TTM_TT = 1  # GTT: the placement a BO passes through between system and VRAM
AMDGPU_GPU_PAGE = 4096  # amdgpu_vm_bo_map start/last are in GPU pages of 4 KiB on every ASIC

# KFD event kinds as the AMD family records them in its event-log map.
KFD_EVICT_START, KFD_EVICT_END, KFD_RESTORE_START, KFD_RESTORE_END = 1, 2, 3, 4
KFD_SCHEDULE, KFD_OLD_EVICT, KFD_OLD_RESTORE = 5, 6, 7
KFD_KIND_NAMES = {
    KFD_EVICT_START: "evict_worker_start",
    KFD_EVICT_END: "evict_worker_end",
    KFD_RESTORE_START: "restore_worker_start",
    KFD_RESTORE_END: "restore_worker_end",
    KFD_SCHEDULE: "schedule_evict_and_restore",
    KFD_OLD_EVICT: "evict_process",
    KFD_OLD_RESTORE: "restore_process",
}


def placement_name(code: int) -> str:
    """TTM placement code → name ("VRAM"); unknown codes stay visible as "TTM<n>"."""
    return TTM_PLACEMENTS.get(code, f"TTM{code}")


# ---------------------------------------------------------------- bpftrace map helpers


def keyed(maps: JsonObject, name: str) -> dict[tuple[int, ...], int]:
    """A printed per-key map ({"1,2": 5}) as {(1, 2): 5}; absent, empty or non-numeric → {}."""
    out: dict[tuple[int, ...], int] = {}
    if not isinstance(maps.get(name), dict):
        return out
    for key, value in hist.keyed(maps.get(name)).items():
        try:
            parts = tuple(int(p) for p in key.split(","))
        except ValueError:
            continue
        if isinstance(value, (int, float)):
            out[parts] = int(value)
    return out


def scalar(maps: JsonObject, name: str) -> int:
    """A printed scalar map (count/sum) as int; absent → 0 (bpftrace prints nothing for 0)."""
    value = maps.get(name)
    return int(value) if isinstance(value, (int, float)) else 0


def total(table: Mapping[Any, int]) -> int:
    """Sum of a per-key map's values."""
    return sum(table.values())


def window_seconds(context: CollectContext) -> float | None:
    """The traced window in seconds, as the kernel saw it (the context's window), else None."""
    duration_ms = context.window.duration_ms
    return duration_ms / 1e3 if duration_ms is not None and duration_ms > 0 else None


def per_second(count: float | None, window_s: float | None) -> float | None:
    """A rate over the measurement window; null when the window is unknown or empty."""
    if count is None or not window_s or window_s <= 0:
        return None
    return count / window_s


# ---------------------------------------------------------------- BO moves (two-hop rule)


def derive_bo_moves(
    hops: Mapping[tuple[int, ...], int],
    hop_bytes: Mapping[tuple[int, ...], int],
    twohop: Mapping[tuple[int, ...], int],
    twohop_bytes: Mapping[tuple[int, ...], int],
    own: int | None = None,
) -> JsonObject:
    """BO moves from the kernel's per-hop counts and its paired two-hop counts.

    hops / hop_bytes: (old, new, traced) → count / bytes, one entry per amdgpu_bo_move event.
    twohop / twohop_bytes: (first_old, final_new, traced) → count / bytes of SYSTEM→TT→VRAM and
    VRAM→TT→SYSTEM pairs the kernel program recognised (same BO, same thread, next move of that
    BO, within the pairing interval). Each pair is ONE logical move whose volume is counted once:
    its two hops are taken out of their routes and the pair is added as a direct route.
    `traced` is 1 for moves in a traced process's context, 0 for kernel workers/other processes;
    in a node program (torchrun) it is the rank key: `own` is this rank's, and the other local
    ranks' moves are reported apart (`in_other_local_ranks`).
    """
    routes: dict[tuple[int, int], list[int]] = {}
    mine = 1 if own is None else own
    by_context = {0: [0, 0], mine: [0, 0]}

    def add(old: int, new: int, traced: int, count: int, size: int) -> None:
        cell = routes.setdefault((old, new), [0, 0])
        cell[0] += count
        cell[1] += size
        ctx = by_context.setdefault(traced, [0, 0])
        ctx[0] += count
        ctx[1] += size

    for key, count in hops.items():
        old, new, traced = key[:3]
        add(old, new, traced, count, hop_bytes.get(key, 0))
    pairs = 0
    for key, count in twohop.items():
        first, final, traced = key[:3]
        size = twohop_bytes.get(key, 0)
        pairs += count
        add(first, TTM_TT, traced, -count, -size)
        add(TTM_TT, final, traced, -count, -size)
        add(first, final, traced, count, size)
    inconsistent = any(c < 0 or b < 0 for c, b in routes.values())
    route_list = [
        {"from": placement_name(o), "to": placement_name(n), "moves": c, "bytes": b}
        for (o, n), (c, b) in sorted(routes.items())
        if c or b
    ]
    moves = sum(c for c, _ in routes.values())
    volume = sum(b for _, b in routes.values())
    return {
        "moves": moves,
        "bytes": volume,
        "hops_seen": total(hops),
        "two_hop_moves": pairs,
        "routes": route_list,
        "in_traced_processes": {
            "moves": by_context.get(mine, [0, 0])[0],
            "bytes": by_context.get(mine, [0, 0])[1],
        },
        "in_other_contexts": {"moves": by_context[0][0], "bytes": by_context[0][1]},
        **(
            {}
            if own is None
            else {
                "in_other_local_ranks": {
                    "moves": sum(c for t, (c, _) in by_context.items() if t not in (0, own)),
                    "bytes": sum(b for t, (_, b) in by_context.items() if t not in (0, own)),
                }
            }
        ),
        "consistent": not inconsistent,
    }


# ---------------------------------------------------------------- KFD evict → restore pairing


@dataclass(frozen=True)
class KfdEvent:
    """One amdkfd evict/restore event: when (CLOCK_MONOTONIC ns), what, and for which process id."""

    ts_ns: int
    kind: int
    proc: int  # the event's own pid or pasid argument (see KfdAttribution.variant)


def kfd_events_from_log(log: Mapping[tuple[int, ...], int]) -> list[KfdEvent]:
    """The (nsecs, kind, id) → count log map as a time-ordered event list."""
    events = [
        KfdEvent(key[0], key[1], key[2]) for key, n in log.items() if len(key) >= 3 for _ in range(max(n, 0))
    ]
    return sorted(events, key=lambda e: (e.ts_ns, e.kind))


@dataclass
class ProcessEvictions:
    """One process's evictions in the window, as `pair_evictions` pairs them: counts, the
    evict→restore times (ns), restores with no eviction seen, the evict and restore workers' run
    times (ns), and whether it was still evicted at the end."""

    evictions: int = 0
    restores: int = 0
    pairs_ns: list[int] = field(default_factory=list)
    unpaired_restores: int = 0
    evict_worker_ns: list[int] = field(default_factory=list)
    restore_worker_ns: list[int] = field(default_factory=list)
    still_evicted_at_end: bool = False


@dataclass
class _OpenEviction:
    """What `pair_evictions` still waits to close for one process (times in ns)."""

    evicted_since: int | None = None
    evict_worker: int | None = None
    restore_worker: int | None = None


def pair_evictions(events: Iterable[KfdEvent]) -> dict[int, ProcessEvictions]:
    """Per process id: evictions, restores and evict→restore pairs (times in ns).

    Rule: an eviction starts at the evict worker's start (or the old single `evict_process`
    event) and lasts until the next completed restore of the same process (restore worker end, or
    the old `restore_process` event). A second eviction while the process is already evicted is
    counted but does not restart the clock. Restores with no eviction seen in the window (it
    happened before the window) and evictions not restored by the end stay unpaired.
    Worker run times (start → end) are measured separately for evict and restore.
    """
    state: dict[int, ProcessEvictions] = {}
    pending: dict[int, _OpenEviction] = {}
    for ev in sorted(events, key=lambda e: (e.ts_ns, e.kind)):
        st = state.setdefault(ev.proc, ProcessEvictions())
        op = pending.setdefault(ev.proc, _OpenEviction())
        if ev.kind in (KFD_EVICT_START, KFD_OLD_EVICT):
            st.evictions += 1
            if op.evicted_since is None:
                op.evicted_since = ev.ts_ns
            if ev.kind == KFD_EVICT_START:
                op.evict_worker = ev.ts_ns
        elif ev.kind == KFD_EVICT_END:
            if op.evict_worker is not None:
                st.evict_worker_ns.append(ev.ts_ns - op.evict_worker)
                op.evict_worker = None
        elif ev.kind == KFD_RESTORE_START:
            op.restore_worker = ev.ts_ns
        elif ev.kind in (KFD_RESTORE_END, KFD_OLD_RESTORE):
            st.restores += 1
            if ev.kind == KFD_RESTORE_END and op.restore_worker is not None:
                st.restore_worker_ns.append(ev.ts_ns - op.restore_worker)
                op.restore_worker = None
            if op.evicted_since is not None:
                st.pairs_ns.append(ev.ts_ns - op.evicted_since)
                op.evicted_since = None
            else:
                st.unpaired_restores += 1
    for proc, st in state.items():
        st.still_evicted_at_end = pending[proc].evicted_since is not None
    return state


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _us(ns: float | None) -> float | None:
    """ns as µs, None kept."""
    return None if ns is None else ns / 1e3


def summarize_evictions(
    per_proc: Mapping[int, ProcessEvictions], traced_ids: set[int], window_s: float | None
) -> JsonObject:
    """Guide numbers for the traced processes (by their own pid/pasid), others counted apart."""
    mine = [st for pid, st in per_proc.items() if pid in traced_ids]
    pairs = [d for st in mine for d in st.pairs_ns]
    evictions = sum(st.evictions for st in mine)
    restores = sum(st.restores for st in mine)
    evict_worker = [d for st in mine for d in st.evict_worker_ns]
    restore_worker = [d for st in mine for d in st.restore_worker_ns]
    others = {
        str(pid): {"evictions": st.evictions, "restores": st.restores}
        for pid, st in sorted(per_proc.items())
        if pid not in traced_ids
    }
    avg_pair = _mean(pairs)
    return {
        "evictions": evictions,
        "restores": restores,
        "evict_restore_pairs": len(pairs),
        "eviction_rate_per_sec": per_second(evictions, window_s),
        "avg_evict_to_restore_us": None if avg_pair is None else avg_pair / 1e3,
        "max_evict_to_restore_us": max(pairs) / 1e3 if pairs else None,
        "avg_evict_worker_us": _us(_mean(evict_worker)),
        "avg_restore_worker_us": _us(_mean(restore_worker)),
        "unpaired_restores": sum(st.unpaired_restores for st in mine),
        "still_evicted_at_window_end": sum(1 for st in mine if st.still_evicted_at_end),
        "other_processes": others,
    }


def restore_delay_note(delays_jiffies: Mapping[int, int], hz: int | None) -> JsonObject:
    """What the driver said about its restore delay (schedule_evict_and_restore's delay_jiffies)."""
    if not delays_jiffies:
        return {
            "delay_jiffies": None,
            "delay_ms": None,
            "kernel_hz": hz,
            "note": (
                "the driver schedules a restore a fixed delay after an eviction (100 ms "
                "in many trees, 2000 ms in some newer ones); no schedule event was seen, "
                "so this run's delay is unknown"
            ),
        }
    common = max(delays_jiffies.items(), key=lambda kv: kv[1])[0]
    ms = None if not hz else common * 1000.0 / hz
    return {
        "delay_jiffies": common,
        "delay_ms": ms,
        "kernel_hz": hz,
        "note": (
            "evict→restore time is mostly the driver's fixed restore delay "
            f"({common} jiffies"
            + (f" = {ms:.0f} ms" if ms is not None else "")
            + "), not the cost of the eviction itself; see the worker times for that"
        ),
    }


# ---------------------------------------------------------------- legacy aliases


def legacy_aliases(
    pairs: int | None, eviction_rate: float | None, avg_evict_to_restore_us: float | None
) -> JsonObject:
    """The upstream keys, with the meaning docs/guide.md documents (NOT GPU page faults)."""
    return {
        "total_faults": pairs,
        "fault_rate_per_sec": eviction_rate,
        "avg_fault_latency_us": avg_evict_to_restore_us,
    }


# ---------------------------------------------------------------- small system readers


def read_kfd_pasid(pid: int, root: str = "/sys/class/kfd/kfd/proc") -> int | None:
    """The KFD pasid of process `pid`, or None (no KFD, process not using the GPU, no access)."""
    try:
        text = (Path(root) / str(int(pid)) / "pasid").read_text().strip()
    except (OSError, ValueError):
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def kernel_hz() -> int | None:
    """CONFIG_HZ of the running kernel (jiffies → ms), from /proc/config.gz or /boot; else None."""
    import platform

    candidates = [Path("/proc/config.gz"), Path(f"/boot/config-{platform.release()}")]
    for path in candidates:
        try:
            raw = path.read_bytes()
            text = gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()
        except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError):
            continue
        match = re.search(r"^CONFIG_HZ=(\d+)$", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return None
