"""Host (CPU) memory family: the host-memory pressure signals that slow a run.

User page faults, mmap/munmap (count and bytes) and direct / cgroup reclaim episodes (begin → end
time, pages reclaimed) of the traced processes, keyed by process; page migrations and kswapd
wake-ups machine-wide (they run in kernel threads), with the part the traced processes triggered.
Everything is aggregated in the kernel; all probes are optional.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import memory_metrics as mm
from aorta.ebpf import timeline
from aorta.ebpf.probes.amd_memory import traced_flag
from aorta.ebpf.probes.base import CollectContext, EventSetFamily, FamilyResult, ProbeCode, RenderContext

P = "@hostmem_"
RECLAIM_KINDS = {
    "direct": ("vmscan", "mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end"),
    "memcg": ("vmscan", "mm_vmscan_memcg_reclaim_begin", "mm_vmscan_memcg_reclaim_end"),
}


class HostMemoryFamily(EventSetFamily):
    """Page faults, mmap/munmap, reclaim, migrations and kswapd wake-ups."""

    name = "hostmem"
    section = "memory"
    description = (
        "host memory pressure: user page faults, mmap/munmap, direct and cgroup reclaim "
        "episodes of the traced processes; page migrations and kswapd wake-ups"
    )

    timeline_keep = 0  # set by render: events kept per timeline kind (0: no timeline)
    # per-process maps: keyed [rank, pid] in a node program (torchrun)
    rank_keyed_maps = tuple(
        f"{P}{n}"
        for n in (
            "faults",
            "faults_write",
            "mmap",
            "mmap_bytes",
            "munmap",
            "munmap_bytes",
            "kswapd_woken_by",
            *(f"{kind}{end}" for kind in RECLAIM_KINDS for end in ("", "_ns", "_max_ns", "_pages")),
        )
    )

    def wanted_events(self) -> list[str]:
        """Every event this family can use."""
        events = ["exceptions:page_fault_user", "syscalls:sys_enter_mmap", "syscalls:sys_enter_munmap"]
        for system, begin, end in RECLAIM_KINDS.values():
            events += [f"{system}:{begin}", f"{system}:{end}"]
        return [
            *events,
            "migrate:mm_migrate_pages",
            "vmscan:mm_vmscan_kswapd_wake",
            "vmscan:mm_vmscan_wakeup_kswapd",
        ]

    def render(self, ctx: RenderContext) -> ProbeCode:
        """Probe blocks for the events present; missing ones listed with the reason."""
        code = ProbeCode()
        a = ctx.dialect.arg
        # per-event records for --trace-out (timeline.py); not in a node program's shared maps
        keep = self.timeline_keep = ctx.target.timeline_events if ctx.rank is None else 0
        per_cpu = timeline.cap_per_cpu(keep) if keep else 0
        both = f"({ctx.pid_filter}) && ({ctx.gate})"
        k = ctx.key("pid")  # [pid], or [rank, pid] in a node program

        def need(system: str, event: str, *fields: str) -> bool:
            fmt = ctx.event(system, event)
            if fmt is None:
                code.missing[f"{system}:{event}"] = "not in this kernel"
                return False
            bad = [f for f in fields if f not in fmt.fields or not fmt.fields[f].is_integer]
            if bad:
                code.missing[f"{system}:{event}"] = f"no number field {bad[0]!r}"
                return False
            code.used_events.append(f"{system}:{event}")
            return True

        if need("exceptions", "page_fault_user", "error_code"):
            code.probes.append(
                "\n".join(
                    [
                        f"tracepoint:exceptions:page_fault_user\n/{both}/\n{{",
                        f"  {P}faults{k} = count();",
                        f"  if ({a('error_code')} & 2) {{ {P}faults_write{k} = count(); }}",
                        *(
                            f"  {line}"
                            for line in (timeline.bucket_code("hostmem_tlpf", keep) if keep else [])
                        ),
                        "}",
                    ]
                )
            )
        for call in ("mmap", "munmap"):
            if need("syscalls", f"sys_enter_{call}", "len"):
                code.probes.append(
                    "\n".join(
                        [
                            f"tracepoint:syscalls:sys_enter_{call}\n/{both}/\n{{",
                            f"  {P}{call}{k} = count(); {P}{call}_bytes{k} = sum({a('len')});",
                            "}",
                        ]
                    )
                )
        for code_no, (kind, (system, begin, end)) in enumerate(RECLAIM_KINDS.items(), start=1):
            begin_fmt, end_fmt = ctx.event(system, begin), ctx.event(system, end)
            if begin_fmt is None or end_fmt is None:
                for ev, fmt in ((begin, begin_fmt), (end, end_fmt)):
                    code.missing[f"{system}:{ev}"] = (
                        "not in this kernel" if fmt is None else "its begin/end partner is missing"
                    )
                continue
            pages_field = end_fmt.fields.get("nr_reclaimed")
            has_pages = pages_field is not None and pages_field.is_integer
            code.used_events += [f"{system}:{begin}", f"{system}:{end}"]
            code.probes.append(
                "\n".join(
                    [
                        f"tracepoint:{system}:{begin}\n/{ctx.gate}/\n{{",
                        f"  {P}reclaim_all[{code_no}] = count();",
                        f"  if ({ctx.pid_filter}) {{ {P}{kind}_ts[tid] = nsecs; }}",
                        "}",
                    ]
                )
            )
            code.probes.append(
                "\n".join(
                    [
                        f"tracepoint:{system}:{end}\n/{P}{kind}_ts[tid] != 0/\n{{",
                        "  $t = nsecs;",
                        *(
                            f"  {line}"
                            for line in (
                                timeline.slice_code(f"hostmem_tl{kind}", f"{P}{kind}_ts[tid]", "tid", per_cpu)
                                if keep
                                else []
                            )
                        ),
                        f"  $d = $t - {P}{kind}_ts[tid];",
                        f"  {P}{kind}{k} = count(); {P}{kind}_ns{k} = sum($d);",
                        f"  {P}{kind}_max_ns{k} = max($d);",
                        *([f"  {P}{kind}_pages{k} = sum({a('nr_reclaimed')});"] if has_pages else []),
                        f"  delete({P}{kind}_ts[tid]);",
                        "}",
                    ]
                )
            )
            code.end.append(f"clear({P}{kind}_ts);")
        if need("migrate", "mm_migrate_pages", "succeeded", "failed"):
            code.probes.append(
                "\n".join(
                    [
                        f"tracepoint:migrate:mm_migrate_pages\n/{ctx.gate}/\n{{",
                        f"  {traced_flag(ctx.pid_filter, ctx.rank)}",
                        f"  {P}migrated[$traced] = sum({a('succeeded')});",
                        f"  {P}migrate_failed[$traced] = sum({a('failed')});",
                        *(
                            f"  {line}"
                            for line in (
                                timeline.instant_code("hostmem_tlmig", f"(int64){a('succeeded')}", per_cpu)
                                if keep
                                else []
                            )
                        ),
                        "}",
                    ]
                )
            )
        if need("vmscan", "mm_vmscan_kswapd_wake"):
            code.probes.append(
                f"tracepoint:vmscan:mm_vmscan_kswapd_wake\n/{ctx.gate}/\n{{\n  {P}kswapd_wakes = count();\n}}"
            )
        if need("vmscan", "mm_vmscan_wakeup_kswapd"):
            code.probes.append(
                f"tracepoint:vmscan:mm_vmscan_wakeup_kswapd\n/{both}/\n{{\n"
                f"  {P}kswapd_woken_by{k} = count();\n}}"
            )
        self.attached = set(code.used_events)
        return code

    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        """Per-process and total numbers; rates over the measurement window."""
        window_s = mm.window_seconds(context)

        def seen(event: str) -> bool:
            return self.attached is None or event in self.attached

        def per_pid(name: str) -> dict[str, int]:
            return {str(k[0]): v for k, v in sorted(mm.keyed(maps, f"{P}{name}").items())}

        metrics: JsonObject = {}
        if seen("exceptions:page_fault_user"):
            faults = per_pid("faults")
            metrics["page_faults"] = {
                "count": sum(faults.values()),
                "write": sum(per_pid("faults_write").values()),
                "per_sec": mm.per_second(sum(faults.values()), window_s),
                "per_process": faults,
            }
        else:
            metrics["page_faults"] = None
        for call in ("mmap", "munmap"):
            if seen(f"syscalls:sys_enter_{call}"):
                metrics[call] = {
                    "count": sum(per_pid(call).values()),
                    "bytes": sum(per_pid(f"{call}_bytes").values()),
                }
            else:
                metrics[call] = None
        everyone = mm.keyed(maps, f"{P}reclaim_all")
        for code_no, (kind, (system, begin, _end)) in enumerate(RECLAIM_KINDS.items(), start=1):
            if not seen(f"{system}:{begin}"):
                metrics[f"{kind}_reclaim"] = None
                continue
            count = sum(per_pid(kind).values())
            ns = sum(per_pid(f"{kind}_ns").values())
            maxes = per_pid(f"{kind}_max_ns").values()
            metrics[f"{kind}_reclaim"] = {
                "episodes": count,
                "total_ms": ns / 1e6,
                "avg_us": ns / count / 1e3 if count else None,
                "max_us": max(maxes) / 1e3 if maxes else None,
                "pages_reclaimed": sum(per_pid(f"{kind}_pages").values()),
                "per_process": per_pid(kind),
                "episodes_machine_wide": everyone.get((code_no,), 0),
            }
        if seen("migrate:mm_migrate_pages"):
            mig = mm.keyed(maps, f"{P}migrated")
            failed = mm.keyed(maps, f"{P}migrate_failed")
            own = int(context.rank_key or 1)  # $traced: 1, or the rank key (node)
            metrics["page_migrations"] = {
                "pages": mm.total(mig),
                "failed": mm.total(failed),
                "by_traced_processes": mig.get((own,), 0),
            }
        else:
            metrics["page_migrations"] = None
        metrics["kswapd_wakeups"] = (
            mm.scalar(maps, f"{P}kswapd_wakes") if seen("vmscan:mm_vmscan_kswapd_wake") else None
        )
        metrics["kswapd_woken_by_traced"] = (
            sum(per_pid("kswapd_woken_by").values()) if seen("vmscan:mm_vmscan_wakeup_kswapd") else None
        )
        metrics["summary"] = host_summary(metrics)
        if self.timeline_keep:
            metrics["timeline"] = {
                "page_faults_per_ms": timeline.buckets(maps, "hostmem_tlpf"),
                "bucket_origin_monotonic_ns": context.window.start_ns,
                **{f"{kind}_reclaim": timeline.slices(maps, f"hostmem_tl{kind}") for kind in RECLAIM_KINDS},
                "migrations": timeline.instants(maps, "hostmem_tlmig"),
                "meaning": (
                    "user page faults of the traced processes per 1 ms of the window (the first "
                    "buckets), reclaim episodes per thread and page migrations (pages moved) "
                    "machine-wide, the first ones per CPU; seen is exact, dropped = seen - kept"
                ),
            }
        coverage = {
            "statement": "traced processes (and their children) in the measurement window; "
            "migrations and kswapd wake-ups machine-wide"
        }
        return FamilyResult(self.name, self.section, metrics, coverage)


def host_summary(metrics: JsonObject) -> JsonObject:
    """The CPU-side lines shown beside the GPU numbers of docs/guide.md (null when not attached)."""

    def pick(name: str, key: str) -> Any:
        value = metrics.get(name)
        return value.get(key) if isinstance(value, dict) else None

    return {
        "host_page_faults": pick("page_faults", "count"),
        "host_page_faults_per_sec": pick("page_faults", "per_sec"),
        "host_mmap_calls": pick("mmap", "count"),
        "host_mmap_bytes": pick("mmap", "bytes"),
        "host_munmap_calls": pick("munmap", "count"),
        "host_munmap_bytes": pick("munmap", "bytes"),
        "host_direct_reclaim_episodes": pick("direct_reclaim", "episodes"),
        "host_direct_reclaim_ms": pick("direct_reclaim", "total_ms"),
        "host_memcg_reclaim_episodes": pick("memcg_reclaim", "episodes"),
        "host_memcg_reclaim_ms": pick("memcg_reclaim", "total_ms"),
        "host_reclaimed_pages": (
            None
            if metrics.get("direct_reclaim") is None and metrics.get("memcg_reclaim") is None
            else (pick("direct_reclaim", "pages_reclaimed") or 0)
            + (pick("memcg_reclaim", "pages_reclaimed") or 0)
        ),
        "host_page_migrations": pick("page_migrations", "pages"),
        "host_kswapd_wakeups": metrics.get("kswapd_wakeups"),
    }
