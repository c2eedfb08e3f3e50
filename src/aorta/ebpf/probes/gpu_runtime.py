"""GPU runtime uprobes: kernel launches per stream, doorbell rings per hardware queue, host syncs.

HIP and CUDA submit work from user space (packets into user-mode queues, a doorbell write): the
kernel never sees a launch. A uprobe on the runtime's exported entry points does. This family
probes, in the exact library files the traced processes mapped (/proc/PID/maps):

* launches (HIP, CUDA runtime, CUDA driver) with their stream argument: count per stream at entry,
  call latency entry → return (the host's launch cost) per stream;
* HSA `hsa_queue_create` (return path: the queue and its doorbell signal) and the doorbell stores
  `hsa_signal_store_screlease/_relaxed`: rings per hardware queue, and which stream's launch rang
  which doorbell (a store made on the launching thread while inside the launch call);
* stream creation (handle → API) and host synchronisation calls (how long the host blocked).

Only outermost launch calls count (a launch API calling another exported one is counted once, as
`nested`). Every symbol is checked in the file's ELF symbol table before it is rendered; absent
symbols are listed as not attached with the reason. Signatures: see docs/ebpf.md (sources).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.elfsyms import ElfError, function_addresses
from aorta.ebpf.probes import gpu_runtime_calibration as calibration
from aorta.ebpf.probes import gpu_runtime_loads as loads_probes
from aorta.ebpf.probes import gpu_runtime_metrics as m
from aorta.ebpf.probes import gpu_runtime_timeline as tl
from aorta.ebpf.probes import gpu_runtime_views as gv
from aorta.ebpf.probes.base import (
    CollectContext,
    FamilyResult,
    ProbeCode,
    ProbeFamily,
    RenderContext,
    TraceTarget,
)
from aorta.ebpf.probes.gpu_runtime_apis import APIS, AttachedProbe, MissedProbe, P
from aorta.ebpf.probes.gpu_runtime_bpf import Where, attach_point, blocks
from aorta.ebpf.runtime_libs import RUNTIME_LIBS, MappedLibrary, runtime_libraries, with_descendants


class GpuRuntimeFamily(ProbeFamily):
    """uprobes on HIP / HSA / CUDA runtime entry points in the libraries the process mapped."""

    name = "gpu_runtime"
    section = "queue"
    description = (
        "uprobes on HIP/HSA/CUDA runtime libraries: launches per stream, doorbells per "
        "hardware queue, stream→queue mapping, launch and host-sync latency"
    )
    uses_uprobes = True
    # every map that outlives a call: stream handles and signals are per-process addresses, so a
    # node program (torchrun) keys them by rank first (two ranks may use the same address)
    rank_keyed_maps = tuple(
        f"{P}{n}"
        for n in (
            "launches",
            "nested",
            "launch_ns",
            "streams",
            "sync_ns",
            "sync_calls",
            "queues",
            "doorbell",
            "rings",
            "launch_rings",
            "copies",
            "copies_ns",
            "colls",
            "colls_ns",
            "groups",
            "ev_src",
            "records",
            "edges",
            "wait_unknown",
        )
    )

    def __init__(
        self,
        libraries: list[MappedLibrary] | None = None,
        views: tuple[str, ...] | None = None,
        calibrate: bool = True,
        watch_loads: bool = True,
    ) -> None:
        """`libraries`: probe these instead of the ones the traced pids mapped (ebpf-info);
        `views`: the views to probe (--ebpf-gpu-runtime-views; views.DEFAULT_VIEWS if None);
        `calibrate`: carry the cost calibration probes (a late program's costs are not timed);
        `watch_loads`: record when the traced processes map executable files (gpu_runtime_loads:
        the clock of runtimes loaded after attach; a late program has no need of it)."""
        self.libraries = libraries
        self.calibrate = calibrate
        self.watch_loads = watch_loads
        self.loads_reason: str | None = None  # why mapping times are not recorded (set by render)
        self.views = gv.parse_views(",".join(views)) if views is not None else views_default()
        self.attached: list[AttachedProbe] = []
        self.not_attached: list[MissedProbe] = []
        self.seen_paths: list[str] = []  # every runtime file the last render judged (late_runtimes)
        self._calibration: calibration.Plan | None = None  # set by render when it attached probes
        self._hit_costs: calibration.HitCosts | None = None
        self.timeline_cap = 0  # set by render: calls kept per thread and kind (0: no timeline)

    def wanted_events(self) -> list[str]:
        return [f"uprobe:{a.lib}:{a.name}" for a in APIS]

    # -- render --------------------------------------------------------------------------------
    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        libs = (
            self.libraries
            if self.libraries is not None
            else runtime_libraries(with_descendants(ctx.target.pids))
        )
        self.attached, self.not_attached = [], []
        self._calibration = None
        self.seen_paths = [lib.path for lib in libs]
        # per-call records for --trace-out (gpu_runtime_timeline); not in a node program
        keep = ctx.target.timeline_events if ctx.rank is None else 0
        self.timeline_cap = tl.cap_per_thread(keep) if keep and libs else 0
        loads = loads_probes.render(ctx) if self.watch_loads else None
        self.loads_reason = loads.reason if loads is not None else "not asked for"
        code.probes.extend(loads.blocks if loads is not None else ())
        if not libs:
            code.missing["uprobe:*"] = (
                "no HIP/HSA/CUDA runtime library is mapped by the traced processes "
                "(nor NCCL/RCCL; see /proc/PID/maps)"
            )
            return code
        pf, gate = ctx.pid_filter, ctx.gate
        traced = with_descendants(ctx.target.pids) if ctx.target.pids else []
        times = "times" in self.views
        doorbell_streams = times and "launches" in self.views
        if self.timeline_cap:
            code.end.extend(tl.end_code())
        for lib in libs:
            if lib.problem:
                code.missing[f"uprobe:{lib.mapped_as}"] = lib.problem
                self.not_attached.append(MissedProbe("*", lib.mapped_as, lib.problem))
                continue
            try:
                present = function_addresses(lib.path)
            except ElfError as exc:
                code.missing[f"uprobe:{lib.mapped_as}"] = str(exc)
                self.not_attached.append(MissedProbe("*", lib.mapped_as, str(exc)))
                continue
            probed: dict[int, str] = {}  # address → the API probed there (aliases count once)
            addrs = [f.address for f in present.values()]
            span = (min(addrs), max(addrs)) if addrs else None
            callers = (
                caller_ranges(traced, CALLER_KINDS[lib.kind])
                if lib.kind in CALLER_KINDS and not times
                else ()
            )
            roles = gv.probed_roles(self.views)
            for api in (a for a in APIS if a.lib == lib.kind and a.role in roles):
                symbol = next((s for s in api.symbols if s in present), None)
                event = f"uprobe:{lib.kind}:{api.name}"
                reason = None
                if symbol is None:
                    reason = f"symbol not in {lib.mapped_as} (ELF .dynsym/.symtab)"
                elif present[symbol].address in probed:
                    reason = f"same address as {probed[present[symbol].address]} (an alias): counted there"
                if reason is not None:
                    code.missing[event] = reason
                    self.not_attached.append(MissedProbe(api.name, lib.mapped_as, reason))
                    continue
                assert symbol is not None
                fn = present[symbol]
                probed[fn.address] = api.name
                launch = api.role in ("launch", "graph_launch")
                at = Where(
                    f"{lib.path}:{attach_point(symbol, fn)}", fn.address, span, callers if launch else ()
                )
                code.probes.extend(
                    _label(b, api.name, symbol)
                    for b in blocks(api, at, pf, gate, ctx.prefix(), times, doorbell_streams)
                )
                if self.timeline_cap:
                    code.probes.extend(
                        _label(b, api.name, symbol)
                        for b in tl.blocks(
                            api, f"{lib.path}:{attach_point(symbol, fn)}", pf, gate, self.timeline_cap
                        )
                    )
                code.used_events.append(event)
                self.attached.append(
                    AttachedProbe(
                        api=api.name,
                        symbol=symbol,
                        address=f"0x{fn.address:x}",
                        library=lib.mapped_as,
                        probed_path=lib.path,
                        pid=lib.pid,
                        entry_instruction=calibration.entry_class(lib.path, fn),
                    )
                )
        if (
            self.attached and self.calibrate
        ):  # what one hit costs, timed on probes whose first instruction is alike
            self._calibration = calibration.plan([a.entry_instruction for a in self.attached], times)
            code.probes.extend(calibration.render(self._calibration) if self._calibration else [])
        return code

    def render_state(self) -> JsonObject:
        return {
            "attached": self._attached_json(),
            "not_attached": self._not_attached_json(),
            "views": list(self.views),
        }

    def restore_state(self, state: JsonObject) -> None:
        self.attached = [AttachedProbe.from_json(a) for a in state.get("attached") or []]
        self.not_attached = [MissedProbe.from_json(n) for n in state.get("not_attached") or []]
        if isinstance(state.get("views"), list):
            self.views = gv.parse_views(",".join(str(v) for v in state["views"]))

    def _attached_json(self) -> list[JsonObject]:
        return [a.to_json() for a in self.attached]

    def _not_attached_json(self) -> list[JsonObject]:
        return [n.to_json() for n in self.not_attached]

    def snapshot(self, target: TraceTarget) -> calibration.HitCosts | None:
        """What one uprobe hit costs here per entry-instruction class (gpu_runtime_calibration),
        timed once, right before the window; None when this program carries no calibration."""
        if not self.attached or self._calibration is None:
            return None
        if self._hit_costs is None:
            self._hit_costs = calibration.hit_costs(self._calibration)
        return self._hit_costs

    # -- collect -------------------------------------------------------------------------------
    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        on = set(self.views)
        times = "times" in on
        syncs: m.Syncs  # (calls, ns blocked: None at entry only)
        if times:
            syncs = {k: hist.stats(v) for k, v in hist.keyed(maps.get(f"{P}sync_ns")).items()}
        else:  # counted at entry only: calls, no time blocked
            syncs = {
                k: (n, None) for k, n in hist.keyed(maps.get(f"{P}sync_calls")).items() if isinstance(n, int)
            }
        per_stream = m.stream_rows(maps, syncs, "syncs" in on)
        queue_rows = m.queue_rows(maps, per_stream)
        handles = m.join_streams(per_stream, context.stream_handles)
        total_launches = sum(r.launches for r in per_stream.values())
        graph_total = sum(r.graph_launches for r in per_stream.values())
        hsa_probed = any(a.api.startswith("hsa_signal_store") for a in self.attached)
        rings_used = (
            sorted(m.hex_handle(s) for s, r in queue_rows.items() if r.doorbell_rings > 0)
            if hsa_probed
            else None
        )
        created = m.pair_map(maps.get(f"{P}streams"))  # (api, handle) → count
        copies, colls, graph = (
            gv.copy_rows(maps),
            gv.collective_rows(maps),
            gv.stream_graph(maps),
        )
        views_joined = gv.join_views(copies, colls, graph, m.handle_indices(context.stream_handles))
        launches = self.attached and "launches" in on  # a switched-off view: null, not zeros
        # without launches the family saw no submissions: it cannot head the queue section
        summary = m.family_summary(per_stream, rings_used) if launches else None
        streams_launching = len([r for r in per_stream.values() if r.launches or r.graph_launches])
        if "launches" not in on:
            for row in per_stream.values():
                row.launches_probed = False
        if summary is not None and not times:
            summary["launch_call_meaning"] = f"launch call time {gv.SWITCHED_OFF} (view times)"
        metrics = {
            "summary": summary,
            "streams": [  # the harness's streams by index, then the others by handle
                r.to_json()
                for r in sorted(
                    per_stream.values(), key=lambda r: (r.stream_index is None, r.stream_index or 0, r.handle)
                )
            ],
            "queues": (
                [r.to_json() for r in sorted(queue_rows.values(), key=lambda r: r.doorbell_signal)]
                if "doorbells" in on
                else None
            ),
            "streams_created": (
                [
                    {"api": m.api_name(a), "handle": m.hex_handle(h), "calls": n}
                    for (a, h), n in created.items()
                ]
                if "launches" in on
                else None
            ),
            "device_and_event_syncs": m.other_syncs(syncs) if "syncs" in on else None,
            "nested_launch_calls": (
                {m.api_name(int(k)): int(v) for k, v in hist.keyed(maps.get(f"{P}nested")).items() if k}
                if "launches" in on
                else None
            ),
            "stream_handles_joined": handles,
            "views_joined": views_joined,
            "launches_total": total_launches if launches else None,
            "hw_queues_used": len(rings_used) if self.attached and rings_used is not None else None,
            "streams_launching": streams_launching if "launches" in on else None,
            "graph_launches_total": graph_total if launches else None,
            "graph_launches_meaning": (
                "hip/cudaGraphLaunch calls: one per graph launched, not the kernels inside it "
                "(those are submitted by the runtime without an exported launch call)"
            ),
            "copies": [c.to_json() for c in copies] if "copies" in on else None,
            "collectives": [c.to_json() for c in colls] if "collectives" in on else None,
            "collective_groups": gv.group_calls(maps) if "collectives" in on else None,
            "stream_graph": graph.to_json() if "waits" in on else None,
            "views_probed": list(self.views),
            "views": gv.view_status(
                self.attached, self.not_attached, not self.attached and not self.not_attached, self.views
            ),
            "probes": {"attached": self._attached_json(), "not_attached": self._not_attached_json()},
            "probe_cost": (
                m.probe_cost(
                    context,
                    {
                        "launches": _pair(total_launches, times),
                        "graph_launches": _pair(graph_total, times),
                        "syncs": _pair(sum(v[0] for v in syncs.values() if v), times),
                        "doorbell_rings": (0, sum(r.doorbell_rings for r in queue_rows.values())),
                        **gv.probed_calls(maps, times),
                    },
                    m.kind_classes(self.attached),
                )
                if self.attached
                else None
            ),
        }
        coverage = {
            "statement": (
                f"uprobes on {len(self.attached)} runtime entry points"
                if self.attached
                else "no GPU runtime entry point attached"
            ),
            "covered": (
                "launch calls through the exported HIP/CUDA entry points; doorbell stores "
                "through hsa_signal_store_*; HSA queues created after attach"
            ),
            "not_covered": (
                "kernels the runtime submits internally without an exported launch "
                "call (blit kernels for copies/memset), CUDA channel/doorbell writes "
                "(inside the closed driver), GPU-side dispatch and execution"
            ),
        }
        if self.timeline_cap:
            metrics["timeline"] = tl.collect(maps, context, self.timeline_cap)
        return FamilyResult(self.name, self.section, metrics, coverage)


# a runtime kind → the runtimes whose calls into its exported launch functions are nested calls
# (libcudart reaches the driver through entry points it looks up: cuGetProcAddress)
CALLER_KINDS = {"cuda": ("cudart",)}
MAX_CALLER_RANGES = 64  # per probe: the test is inlined (pid, start, end) by (pid, start, end)


def caller_ranges(
    pids: list[int] | tuple[int, ...], kinds: tuple[str, ...]
) -> tuple[tuple[int, int, int], ...]:
    """(pid, start, end) of each executable mapping of a `kinds` runtime file in /proc/PID/maps of
    the traced processes, now (a process started later is not in it: there a driver launch made
    by the CUDA runtime counts as a launch too, unless the times view is on)."""
    out: list[tuple[int, int, int]] = []
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{int(pid)}/maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or "x" not in parts[1]:
                    continue
                name = parts[5].removesuffix(" (deleted)").rsplit("/", 1)[-1]
                if any(RUNTIME_LIBS[k].match(name) for k in kinds):
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    out.append((int(pid), lo, hi))
    return tuple(out[:MAX_CALLER_RANGES])


def _pair(calls: int, times: bool) -> tuple[int, int]:
    """(calls probed at entry and return, calls probed at entry only) for one kind of call."""
    return (calls, 0) if times else (0, calls)


def views_default() -> tuple[str, ...]:
    """The views probed when --ebpf-gpu-runtime-views is not given."""
    return gv.DEFAULT_VIEWS


def _label(block: str, api: str, symbol: str) -> str:
    """The block with a comment naming the entry point (its head line is an address)."""
    return block.replace("{\n", f"{{\n  // {api} ({symbol})\n", 1)
