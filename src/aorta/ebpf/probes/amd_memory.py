"""AMD GPU memory family: BO moves/creates/VM maps (amdgpu) and evict/restore/map (amdkfd).

Every probe is optional and rendered from the live format. amdgpu events carry no owner, so they
are counted in the window and split by context (traced process vs kernel workers and others);
amdkfd evict/restore events fire in kworkers and are attributed by their own pid or pasid field,
never by the benchmark's pid. Evict/restore events are rare (bounded by the driver's restore
delay), so they go to a small (time, kind, id) log map and are paired per process in Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import memory_metrics as mm
from aorta.ebpf import timeline
from aorta.ebpf.probes.base import CollectContext, EventSetFamily, FamilyResult, ProbeCode, RenderContext
from aorta.ebpf.tracefs import EventFormat

P = "@amdmem_"
#: Longest gap between the two hops of one SYSTEM↔VRAM move (TTM does them back to back).
TWO_HOP_MAX_NS = 100_000_000
#: Where KFD publishes per-process facts (pasid); a module constant so tests can point elsewhere.
KFD_PROC_ROOT = "/sys/class/kfd/kfd/proc"

BO_MOVE_EVENTS = ("amdgpu:amdgpu_bo_move", "amdgpu:amdgpu_ttm_bo_move")  # second: old 4.x name
KFD_WORKER_EVENTS = {
    "amdkfd:kfd_evict_process_worker_start": mm.KFD_EVICT_START,
    "amdkfd:kfd_evict_process_worker_end": mm.KFD_EVICT_END,
    "amdkfd:kfd_restore_process_worker_start": mm.KFD_RESTORE_START,
    "amdkfd:kfd_restore_process_worker_end": mm.KFD_RESTORE_END,
    "amdkfd:kfd_kgd2kfd_schedule_evict_and_restore_process": mm.KFD_SCHEDULE,
}
KFD_OLD_EVENTS = {
    "amdkfd:kfd_evict_process": mm.KFD_OLD_EVICT,
    "amdkfd:kfd_restore_process": mm.KFD_OLD_RESTORE,
}
KFD_MAP_EVENTS = ("amdkfd:kfd_map_memory_to_gpu_start", "amdkfd:kfd_map_memory_to_gpu_end")
#: --trace-out records (timeline.py instants): one BO move hop packs its size, traced flag and
#: placements into the value; one KFD event packs its kind and its own pid/pasid.
TL_BO, TL_KFD = "amdmem_tlbo", "amdmem_tlkfd"
#: KFD worker start/end kinds that make one slice per process (kind of the start → its end).
KFD_SLICE_KINDS = {mm.KFD_EVICT_START: mm.KFD_EVICT_END, mm.KFD_RESTORE_START: mm.KFD_RESTORE_END}


def _split(event: str) -> tuple[str, str]:
    system, _, name = event.partition(":")
    return system, name


def _integer_fields(fmt: EventFormat, names: tuple[str, ...]) -> str | None:
    """Why `fmt` cannot be used (a named field absent or not a number/pointer), or None."""
    for name in names:
        field = fmt.fields.get(name)
        if field is None:
            return f"no field {name!r} in this kernel's format"
        if not (field.is_integer or field.is_pointer):
            return f"field {name!r} has type {field.type!r}, not a number"
    return None


def kfd_id_field(fmt: EventFormat) -> str | None:
    """The process identifier an amdkfd event carries: "pid" (newer DKMS) or "pasid" (older)."""
    field = fmt.first_of("pid", "pasid")
    return field.name if field is not None and field.is_integer else None


def traced_flag(pid_filter: str, rank: str | None = None) -> str:
    """Statements setting $traced to 1 when the current task belongs to a traced process (to
    its rank key in a node program: `rank` is RenderContext.rank), else 0."""
    return f"$traced = 0; if ({pid_filter}) {{ $traced = {rank or 1}; }}"


def bo_move_probe(
    attach: str,
    arg: Callable[[str], str],
    gate: str,
    pid_filter: str,
    rank: str | None = None,
    timeline_cap: int = 0,
) -> str:
    """Count every hop by route and context; pair SYSTEM→TT→VRAM and VRAM→TT→SYSTEM hops.

    Pairing rule (the kernel's multihop does the two hops back to back in one thread): a move
    X→TT with X in {SYSTEM, VRAM} is remembered per BO with its thread and time; the NEXT move of
    that BO, if it is TT→Y with {X, Y} = {SYSTEM, VRAM}, in the same thread, within
    TWO_HOP_MAX_NS, makes the pair one logical X→Y move. Any next move clears the memory.
    `timeline_cap` > 0 also keeps the first hops per CPU as timeline instants (TL_BO).
    """
    packed = "(int64)(($size << 17) | ($traced << 16) | (($old & 0xff) << 8) | ($new & 0xff))"
    keep = timeline.instant_code(TL_BO, packed, timeline_cap) if timeline_cap else []
    return "\n".join(
        [
            f"{attach}\n/{gate}/\n{{",
            f"  $bo = (uint64){arg('bo')}; $old = (uint64){arg('old_placement')};",
            f"  $new = (uint64){arg('new_placement')}; $size = (uint64){arg('bo_size')};",
            f"  {traced_flag(pid_filter, rank)}",
            f"  {P}hops[$old, $new, $traced] = count();",
            f"  {P}hop_bytes[$old, $new, $traced] = sum($size);",
            f"  if ($old == 1 && {P}pend[$bo] != 0 && {P}pend_tid[$bo] == tid &&",
            f"      nsecs - {P}pend_ts[$bo] < {TWO_HOP_MAX_NS}) {{",
            f"    $first = {P}pend[$bo] - 1;",
            "    if (($first == 0 && $new == 2) || ($first == 2 && $new == 0)) {",
            f"      {P}twohop[$first, $new, $traced] = count();",
            f"      {P}twohop_bytes[$first, $new, $traced] = sum($size);",
            "    }",
            "  }",
            # deletes only of existing keys: bpftrace -k reports every failed delete (mapcap.py)
            f"  if ({P}pend[$bo] != 0) {{ delete({P}pend[$bo]); delete({P}pend_tid[$bo]); "
            f"delete({P}pend_ts[$bo]); }}",
            "  if ($new == 1 && ($old == 0 || $old == 2)) {",
            f"    {P}pend[$bo] = $old + 1; {P}pend_tid[$bo] = tid; {P}pend_ts[$bo] = nsecs;",
            "  }",
            *(f"  {line}" for line in keep),
            "}",
        ]
    )


def unpack_bo_move(value: int) -> dict[str, int]:
    """The fields bo_move_probe packed into one timeline value."""
    return {
        "old_placement": (value >> 8) & 0xFF,
        "new_placement": value & 0xFF,
        "traced": (value >> 16) & 1,
        "bytes": value >> 17,
    }


def kfd_log_probe(
    attach: str, gate: str, kind: int, id_expr: str, delay_expr: str | None = None, timeline_cap: int = 0
) -> str:
    """Log one amdkfd event as (time, kind, its own pid/pasid); gated by the window only.

    These events fire in kworkers on behalf of a process: never filter them by the traced pid.
    `timeline_cap` > 0 also keeps the first events per CPU as timeline instants (TL_KFD).
    """
    lines = [
        f"{attach}\n/{gate}/\n{{",
        f"  {P}kfd_log[nsecs, {kind}, (uint64){id_expr}] = count();",
        f"  {P}kfd_count[{kind}] = count();",
    ]
    if delay_expr is not None:
        lines.append(f"  {P}kfd_delay[(uint64){delay_expr}] = count();")
    if timeline_cap:
        value = f"(int64)(({int(kind)} << 32) | ((uint64){id_expr} & 0xffffffff))"
        lines.extend(f"  {line}" for line in timeline.instant_code(TL_KFD, value, timeline_cap))
    return "\n".join([*lines, "}"])


def kfd_timeline(records: JsonObject) -> JsonObject:
    """KFD instants (timeline.instants of TL_KFD) as events [ns, kind name, pid/pasid] and
    slices [pid/pasid, "evict"/"restore", start ns, end ns]: a worker start paired with the next
    end of the same kind and process; unpaired events stay instants only."""
    events, slices, open_at = [], [], {}
    for ns, value in records.get("rows") or []:
        kind, ident = value >> 32, value & 0xFFFFFFFF
        events.append([ns, mm.KFD_KIND_NAMES.get(kind, str(kind)), ident])
        if kind in KFD_SLICE_KINDS:
            open_at[(kind, ident)] = ns
        for start, end in KFD_SLICE_KINDS.items():
            if kind == end and (start, ident) in open_at:
                what = "evict" if start == mm.KFD_EVICT_START else "restore"
                slices.append([ident, what, open_at.pop((start, ident)), ns])
    slices.sort(key=lambda r: (r[2], r[0]))
    counts = {k: records.get(k) for k in ("seen", "kept", "dropped")}
    return {"events": events, "slices": slices, **counts}


class AmdMemoryFamily(EventSetFamily):
    """amdgpu buffer-object traffic and amdkfd process evictions (GPU memory pressure)."""

    name = "amdmem"
    section = "memory"
    description = (
        "AMD GPU memory: BO moves between VRAM/GTT/system (two-hop moves counted once), "
        "BO creation, GPU VM map/unmap, KFD process evict/restore and map-to-GPU"
    )

    # BO/VM maps carry $traced (0, or the rank key in a node program) and are sliced in collect
    rank_keyed_maps = (f"{P}kfdmap_n", f"{P}kfdmap_ns", f"{P}kfdmap_max_ns")
    timeline_cap = 0  # set by render: timeline slots per CPU (0: no timeline)

    def wanted_events(self) -> list[str]:
        """Every event this family can use; alternatives are listed too."""
        return [
            *BO_MOVE_EVENTS,
            "amdgpu:amdgpu_bo_create",
            "amdgpu:amdgpu_vm_bo_map",
            "amdgpu:amdgpu_vm_bo_unmap",
            *KFD_WORKER_EVENTS,
            *KFD_OLD_EVENTS,
            *KFD_MAP_EVENTS,
        ]

    def render(self, ctx: RenderContext) -> ProbeCode:
        """Probe blocks for the events this kernel has; missing ones are listed with the reason."""
        code = ProbeCode()
        # per-event records for --trace-out (timeline.py); not in a node program's shared maps
        keep = ctx.target.timeline_events if ctx.rank is None else 0
        self.timeline_cap = timeline.cap_per_cpu(keep) if keep else 0
        self._render_bo_move(ctx, code)
        self._render_bo_create(ctx, code)
        for event, key in (("amdgpu:amdgpu_vm_bo_map", "map"), ("amdgpu:amdgpu_vm_bo_unmap", "unmap")):
            self._render_vm(ctx, code, event, key)
        self._render_kfd_workers(ctx, code)
        self._render_kfd_map(ctx, code)
        self.attached = set(code.used_events)
        return code

    # -- amdgpu

    def _render_bo_move(self, ctx: RenderContext, code: ProbeCode) -> None:
        reasons = []
        for event in BO_MOVE_EVENTS:
            fmt = ctx.event(*_split(event))
            if fmt is None:
                reasons.append(f"{event}: not in this kernel")
                continue
            why = _integer_fields(fmt, ("bo", "bo_size", "new_placement", "old_placement"))
            if why:
                reasons.append(f"{event}: {why}")
                continue
            code.probes.append(
                bo_move_probe(
                    f"tracepoint:{event}",
                    ctx.dialect.arg,
                    ctx.gate,
                    ctx.pid_filter,
                    ctx.rank,
                    self.timeline_cap,
                )
            )
            code.used_events.append(event)
            code.end.extend([f"clear({P}pend);", f"clear({P}pend_tid);", f"clear({P}pend_ts);"])
            return
        code.missing[BO_MOVE_EVENTS[0]] = "; ".join(reasons)

    def _render_bo_create(self, ctx: RenderContext, code: ProbeCode) -> None:
        a = ctx.dialect.arg
        self._render_traced(
            ctx,
            code,
            "amdgpu:amdgpu_bo_create",
            ("pages", "type"),
            [
                f"  {P}creates[(uint64){a('type')}, $traced] = count();",
                f"  {P}create_pages[(uint64){a('type')}, $traced] = sum((uint64){a('pages')});",
            ],
        )

    def _render_vm(self, ctx: RenderContext, code: ProbeCode, event: str, key: str) -> None:
        a = ctx.dialect.arg
        self._render_traced(
            ctx,
            code,
            event,
            ("start", "last"),
            [
                f"  {P}vm_{key}s[$traced] = count();",
                f"  {P}vm_{key}_pages[$traced] = sum({a('last')} - {a('start')} + 1);",
            ],
        )

    def _render_traced(
        self, ctx: RenderContext, code: ProbeCode, event: str, fields: tuple[str, ...], body: list[str]
    ) -> None:
        """One window-gated probe whose body sees $traced; shared by BO create and VM map/unmap.

        The event is listed as missing instead when absent or when a field is not an integer.
        """
        fmt = ctx.event(*_split(event))
        why = "not in this kernel" if fmt is None else _integer_fields(fmt, fields)
        if why:
            code.missing[event] = why
            return
        code.probes.append(
            "\n".join(
                [
                    f"tracepoint:{event}\n/{ctx.gate}/\n{{",
                    f"  {traced_flag(ctx.pid_filter, ctx.rank)}",
                    *body,
                    "}",
                ]
            )
        )
        code.used_events.append(event)

    # -- amdkfd

    def _render_kfd_workers(self, ctx: RenderContext, code: ProbeCode) -> None:
        a = ctx.dialect.arg
        have_new_evict = False
        for event, kind in KFD_WORKER_EVENTS.items():
            fmt = ctx.event(*_split(event))
            id_field = None if fmt is None else kfd_id_field(fmt)
            if id_field is None:
                code.missing[event] = (
                    "not in this kernel (amdkfd tracepoints ship only with AMD's DKMS driver)"
                    if fmt is None
                    else "neither a 'pid' nor a 'pasid' number field"
                )
                continue
            have_new_evict |= kind == mm.KFD_EVICT_START
            delay = (
                a("delay_jiffies")
                if kind == mm.KFD_SCHEDULE and fmt is not None and "delay_jiffies" in fmt.fields
                else None
            )
            code.probes.append(
                kfd_log_probe(f"tracepoint:{event}", ctx.gate, kind, a(id_field), delay, self.timeline_cap)
            )
            code.used_events.append(event)
            code.begin.append(f"{P}kfd_variant[{kind}] = {1 if id_field == 'pid' else 2};")
        for event, kind in KFD_OLD_EVENTS.items():
            fmt = ctx.event(*_split(event))
            id_field = None if fmt is None else kfd_id_field(fmt)
            if have_new_evict or id_field is None:
                code.missing[event] = (
                    "old name, not needed: the worker events exist"
                    if have_new_evict
                    else "old name, not in this kernel"
                    if fmt is None
                    else "neither a 'pid' nor a 'pasid' number field"
                )
                continue
            code.probes.append(
                kfd_log_probe(f"tracepoint:{event}", ctx.gate, kind, a(id_field), None, self.timeline_cap)
            )
            code.used_events.append(event)
            code.begin.append(f"{P}kfd_variant[{kind}] = {1 if id_field == 'pid' else 2};")

    def _render_kfd_map(self, ctx: RenderContext, code: ProbeCode) -> None:
        start, end = KFD_MAP_EVENTS
        fmts = [ctx.event(*_split(e)) for e in KFD_MAP_EVENTS]
        if any(f is None for f in fmts):
            for event, fmt in zip(KFD_MAP_EVENTS, fmts, strict=True):
                code.missing[event] = (
                    "not in this kernel" if fmt is None else "its start/end partner is missing"
                )
            return
        filt = f"({ctx.pid_filter}) && ({ctx.gate})"
        k = ctx.key()  # "" or [rank] in a node program (the end fires in the mapping thread)
        code.probes.append(f"tracepoint:{start}\n/{filt}/\n{{\n  {P}kfdmap_ts[tid] = nsecs;\n}}")
        code.probes.append(
            "\n".join(
                [
                    f"tracepoint:{end}\n/{P}kfdmap_ts[tid] != 0/\n{{",
                    f"  $d = nsecs - {P}kfdmap_ts[tid];",
                    f"  {P}kfdmap_n{k} = count(); {P}kfdmap_ns{k} = sum($d); {P}kfdmap_max_ns{k} = max($d);",
                    f"  delete({P}kfdmap_ts[tid]);",
                    "}",
                ]
            )
        )
        code.used_events.extend(KFD_MAP_EVENTS)
        code.end.append(f"clear({P}kfdmap_ts);")

    # -- results

    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        """Guide numbers (moves, volume, maps, evictions) plus the evidence behind them."""
        window_s = mm.window_seconds(context)
        have = self.attached
        node_key = context.rank_key  # a node program's rank key (torchrun), else None
        own = int(node_key or 1)  # the $traced value of this process

        def seen(*events: str) -> bool:
            return have is None or any(e in have for e in events)

        metrics: JsonObject = {}
        notes: dict[str, str] = {}
        if seen(*BO_MOVE_EVENTS):
            bo = mm.derive_bo_moves(
                mm.keyed(maps, f"{P}hops"),
                mm.keyed(maps, f"{P}hop_bytes"),
                mm.keyed(maps, f"{P}twohop"),
                mm.keyed(maps, f"{P}twohop_bytes"),
                node_key,
            )
            bo["moves_per_sec"] = mm.per_second(bo["moves"], window_s)
            metrics["bo_moves"] = bo
        else:
            metrics["bo_moves"] = None
            notes["bo_moves"] = "amdgpu_bo_move not attached (no amdgpu driver on this machine?)"
        metrics["bo_creates"] = self._creates(maps, own) if seen("amdgpu:amdgpu_bo_create") else None
        for key, event in (("map", "amdgpu:amdgpu_vm_bo_map"), ("unmap", "amdgpu:amdgpu_vm_bo_unmap")):
            if seen(event):
                table = mm.keyed(maps, f"{P}vm_{key}s")
                pages = mm.keyed(maps, f"{P}vm_{key}_pages")
                metrics[f"vm_{key}s"] = {
                    "count": mm.total(table),
                    "bytes": mm.total(pages) * mm.AMDGPU_GPU_PAGE,
                    "in_traced_processes": table.get((own,), 0),
                    "in_other_contexts": table.get((0,), 0),
                }
                if node_key is not None:
                    metrics[f"vm_{key}s"]["in_other_local_ranks"] = sum(
                        n for (t,), n in table.items() if t not in (0, own)
                    )
            else:
                metrics[f"vm_{key}s"] = None
                notes[f"vm_{key}s"] = f"{event.split(':')[1]} not attached"
        metrics["evictions"] = (
            self._evictions(maps, context) if seen(*KFD_WORKER_EVENTS, *KFD_OLD_EVENTS) else None
        )
        if metrics["evictions"] is None:
            notes["evictions"] = (
                "amdkfd evict/restore tracepoints not attached (they exist only "
                "with AMD's DKMS amdgpu driver)"
            )
        if seen(*KFD_MAP_EVENTS):
            n = mm.scalar(maps, f"{P}kfdmap_n")
            metrics["kfd_map_to_gpu"] = {
                "count": n,
                "avg_us": mm.scalar(maps, f"{P}kfdmap_ns") / n / 1e3 if n else None,
                "max_us": mm.scalar(maps, f"{P}kfdmap_max_ns") / 1e3 if n else None,
            }
        else:
            metrics["kfd_map_to_gpu"] = None
        metrics["notes"] = notes
        metrics["summary"] = guide_summary(metrics, window_s)
        if self.timeline_cap and have:
            moves = timeline.instants(maps, TL_BO)
            moves["rows"] = [[ns, *unpack_bo_move(v).values()] for ns, v in moves["rows"]]
            metrics["timeline"] = {
                "bo_moves": {
                    **moves,
                    "columns": ["ns", "old_placement", "new_placement", "traced", "bytes"],
                }
                if seen(*BO_MOVE_EVENTS)
                else None,
                "kfd": kfd_timeline(timeline.instants(maps, TL_KFD))
                if seen(*KFD_WORKER_EVENTS, *KFD_OLD_EVENTS)
                else None,
                "meaning": (
                    "BO move hops (every BO of the GPU: traced = in a traced process) and KFD "
                    "evict/restore events (by their own pid/pasid), the first ones per CPU, "
                    "CLOCK_MONOTONIC ns; seen is exact, dropped = seen - kept"
                ),
            }
        coverage = {
            "statement": (
                "amdgpu BO events: every BO of the GPU in the window (no owner field; split by "
                "context); amdkfd evict/restore: attributed by the events' own pid/pasid"
                if have
                else "no amdgpu/amdkfd memory tracepoint on this kernel: GPU memory not covered"
            )
        }
        return FamilyResult(self.name, self.section, metrics, coverage)

    @staticmethod
    def _creates(maps: JsonObject, own: int = 1) -> JsonObject:
        counts = mm.keyed(maps, f"{P}creates")
        pages = mm.keyed(maps, f"{P}create_pages")
        page = os.sysconf("SC_PAGE_SIZE")
        by_type: dict[str, dict[str, int]] = {}
        for (ttype, _traced), n in counts.items():
            cell = by_type.setdefault(mm.placement_name(ttype), {"count": 0, "bytes": 0})
            cell["count"] += n
            cell["bytes"] += pages.get((ttype, _traced), 0) * page
        return {
            "count": mm.total(counts),
            "bytes": mm.total(pages) * page,
            "by_placement": by_type,
            "in_traced_processes": sum(n for (_, t), n in counts.items() if t == own),
        }

    @staticmethod
    def _evictions(maps: JsonObject, context: CollectContext) -> JsonObject:
        log = mm.keyed(maps, f"{P}kfd_log")
        events = mm.kfd_events_from_log(log)
        counted = mm.total(mm.keyed(maps, f"{P}kfd_count"))
        variants = {v for (_k,), v in mm.keyed(maps, f"{P}kfd_variant").items()}
        variant = "pid" if variants == {1} else "pasid" if variants == {2} else "mixed" if variants else None
        pids = [int(p) for p in context.pids]
        ids, attribution = _traced_kfd_ids(variant, pids)
        summary = mm.summarize_evictions(mm.pair_evictions(events), ids, mm.window_seconds(context))
        summary["attribution"] = attribution
        summary["events_logged"] = len(events)
        summary["events_counted"] = counted
        summary["log_truncated"] = counted > len(events)
        summary["restore_delay"] = mm.restore_delay_note(
            {k[0]: v for k, v in mm.keyed(maps, f"{P}kfd_delay").items()}, mm.kernel_hz()
        )
        return summary


def _traced_kfd_ids(variant: str | None, pids: list[int]) -> tuple[set[int], JsonObject]:
    """Which amdkfd ids are ours: the pids themselves (pid variant) or their pasids from sysfs."""
    if variant == "pid":
        return set(pids), {
            "variant": "pid",
            "ids": sorted(pids),
            "how": "the events' pid field is the process's lead thread id",
        }
    pasids = {pid: mm.read_kfd_pasid(pid, KFD_PROC_ROOT) for pid in pids}
    found = {p for p in pasids.values() if p is not None}
    ids = found | (set(pids) if variant == "mixed" else set())
    return ids, {
        "variant": variant,
        "ids": sorted(ids),
        "pasid_of_pid": {str(k): v for k, v in pasids.items()},
        "how": (
            "pasid from /sys/class/kfd/kfd/proc/<pid>/pasid"
            if found
            else "no pasid readable for the traced processes: their evictions cannot be "
            "told apart and are listed under other_processes"
        ),
    }


def guide_summary(metrics: JsonObject, window_s: float | None) -> JsonObject:
    """The memory numbers of docs/guide.md and their legacy aliases; null with a reason when unmeasured."""
    bo, ev = metrics.get("bo_moves"), metrics.get("evictions")
    maps, unmaps = metrics.get("vm_maps"), metrics.get("vm_unmaps")
    out: JsonObject = {
        "bo_moves": bo["moves"] if bo else None,
        "bo_moves_per_sec": bo["moves_per_sec"] if bo else None,
        "migration_volume_bytes": bo["bytes"] if bo else None,
        "migration_volume_mb": bo["bytes"] / 1e6 if bo else None,
        "bo_maps": maps["count"] if maps else None,
        "bo_unmaps": unmaps["count"] if unmaps else None,
        "evictions": ev["evictions"] if ev else None,
        "restores": ev["restores"] if ev else None,
        "evict_restore_pairs": ev["evict_restore_pairs"] if ev else None,
        "eviction_rate_per_sec": ev["eviction_rate_per_sec"] if ev else None,
        "avg_evict_to_restore_us": ev["avg_evict_to_restore_us"] if ev else None,
        "restore_delay": ev["restore_delay"] if ev else None,
        "rates_over_window_s": window_s,
    }
    out.update(
        mm.legacy_aliases(
            out["evict_restore_pairs"], out["eviction_rate_per_sec"], out["avg_evict_to_restore_us"]
        )
    )
    out["legacy_aliases_meaning"] = (
        "total_faults = evict/restore pairs, fault_rate_per_sec = "
        "evictions per second, avg_fault_latency_us = average "
        "evict→restore time; not GPU page faults"
    )
    reasons = [f"{k}: {v}" for k, v in (metrics.get("notes") or {}).items()]
    if reasons:
        out["gpu_memory_reason"] = "; ".join(reasons)
    return out
