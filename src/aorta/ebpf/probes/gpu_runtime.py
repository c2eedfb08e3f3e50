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

from dataclasses import dataclass
from typing import Any

from aorta.ebpf import hist
from aorta.ebpf.elfsyms import ElfError, defined_functions
from aorta.ebpf.probes.base import FamilyResult, ProbeCode, ProbeFamily, RenderContext
from aorta.ebpf.probes.common import both
from aorta.ebpf.runtime_libs import MappedLibrary, runtime_libraries, with_descendants
from aorta.ebpf.uprobes import hit_cost_ns

# How the stream argument is read at function entry (x86-64 SysV: a 12-byte dim3 by value takes
# two registers; arguments beyond six integer registers are on the stack: sargN).
STACK1, STACK2, CONFIG32 = "sarg1", "sarg2", "*(uint64*)(arg0 + 32)"


@dataclass(frozen=True)
class Api:
    """One probed entry point: numeric id (map key), role, library kind, symbol names, stream."""

    ident: int
    name: str
    role: str  # launch | stream_create | sync_stream | sync_device | sync_event | queue_create | doorbell
    lib: str  # key of runtime_libs.RUNTIME_LIBS
    symbols: tuple[str, ...]  # accepted ELF names (plain C name first; C++-mangled variants)
    stream: str | None = None  # bpftrace expression of the stream handle at entry


# older HIP releases declare hipExtModuleLaunchKernel without extern "C" (C++-mangled export)
_HIP_EXT_MODULE_MANGLED = ("_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_t"
                           "PPvS4_P11ihipEvent_tS6_j")

APIS: tuple[Api, ...] = (
    # HIP: hipLaunchKernel(const void*, dim3, dim3, void**, size_t shmem, hipStream_t)
    Api(1, "hipLaunchKernel", "launch", "hip", ("hipLaunchKernel",), STACK1),
    Api(2, "hipLaunchKernel_spt", "launch", "hip", ("hipLaunchKernel_spt",), STACK1),
    # hipExtLaunchKernel(const void*, dim3, dim3, void**, size_t, hipStream_t, event, event, int)
    Api(3, "hipExtLaunchKernel", "launch", "hip", ("hipExtLaunchKernel",), STACK1),
    # hipModuleLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, hipStream_t, params, extra)
    Api(4, "hipModuleLaunchKernel", "launch", "hip", ("hipModuleLaunchKernel",), STACK2),
    Api(5, "hipModuleLaunchKernel_spt", "launch", "hip", ("hipModuleLaunchKernel_spt",), STACK2),
    # hipExtModuleLaunchKernel(f, 6 x uint32, size_t shmem, hipStream_t, params, extra, ev, ev, flags)
    Api(6, "hipExtModuleLaunchKernel", "launch", "hip",
        ("hipExtModuleLaunchKernel", _HIP_EXT_MODULE_MANGLED), STACK2),
    # hipLaunchKernelExC(const hipLaunchConfig_t*, fn, args): stream at +32 (dim3, dim3, size_t);
    # hipDrvLaunchKernelEx(const HIP_LAUNCH_CONFIG*, f, params, extra): hStream at +32 (7 x uint)
    Api(7, "hipLaunchKernelExC", "launch", "hip", ("hipLaunchKernelExC",), CONFIG32),
    Api(8, "hipDrvLaunchKernelEx", "launch", "hip", ("hipDrvLaunchKernelEx",), CONFIG32),
    # CUDA runtime: same layout as hipLaunchKernel; ExC takes a cudaLaunchConfig_t* (stream at +32)
    Api(11, "cudaLaunchKernel", "launch", "cudart", ("cudaLaunchKernel",), STACK1),
    Api(12, "cudaLaunchKernel_ptsz", "launch", "cudart", ("cudaLaunchKernel_ptsz",), STACK1),
    Api(13, "cudaLaunchKernelExC", "launch", "cudart", ("cudaLaunchKernelExC",), CONFIG32),
    Api(14, "cudaLaunchKernelExC_ptsz", "launch", "cudart", ("cudaLaunchKernelExC_ptsz",), CONFIG32),
    # CUDA driver: cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, CUstream, params, extra);
    # cuLaunchKernelEx(const CUlaunchConfig*, f, params, extra), hStream at +32
    Api(21, "cuLaunchKernel", "launch", "cuda", ("cuLaunchKernel",), STACK2),
    Api(22, "cuLaunchKernel_ptsz", "launch", "cuda", ("cuLaunchKernel_ptsz",), STACK2),
    Api(23, "cuLaunchKernelEx", "launch", "cuda", ("cuLaunchKernelEx",), CONFIG32),
    Api(24, "cuLaunchKernelEx_ptsz", "launch", "cuda", ("cuLaunchKernelEx_ptsz",), CONFIG32),
    # stream creation: first argument is the out-pointer to the new handle
    Api(31, "hipStreamCreate", "stream_create", "hip", ("hipStreamCreate",), "arg0"),
    Api(32, "hipStreamCreateWithFlags", "stream_create", "hip", ("hipStreamCreateWithFlags",), "arg0"),
    Api(33, "hipStreamCreateWithPriority", "stream_create", "hip", ("hipStreamCreateWithPriority",), "arg0"),
    Api(41, "cudaStreamCreate", "stream_create", "cudart", ("cudaStreamCreate",), "arg0"),
    Api(42, "cudaStreamCreateWithFlags", "stream_create", "cudart", ("cudaStreamCreateWithFlags",), "arg0"),
    Api(43, "cudaStreamCreateWithPriority", "stream_create", "cudart",
        ("cudaStreamCreateWithPriority",), "arg0"),
    Api(51, "cuStreamCreate", "stream_create", "cuda", ("cuStreamCreate",), "arg0"),
    Api(52, "cuStreamCreateWithPriority", "stream_create", "cuda", ("cuStreamCreateWithPriority",), "arg0"),
    # host synchronisation
    Api(61, "hipStreamSynchronize", "sync_stream", "hip", ("hipStreamSynchronize",), "arg0"),
    Api(62, "hipDeviceSynchronize", "sync_device", "hip", ("hipDeviceSynchronize",)),
    Api(63, "hipEventSynchronize", "sync_event", "hip", ("hipEventSynchronize",)),
    Api(71, "cudaStreamSynchronize", "sync_stream", "cudart", ("cudaStreamSynchronize",), "arg0"),
    Api(72, "cudaDeviceSynchronize", "sync_device", "cudart", ("cudaDeviceSynchronize",)),
    Api(73, "cudaEventSynchronize", "sync_event", "cudart", ("cudaEventSynchronize",)),
    Api(81, "cuStreamSynchronize", "sync_stream", "cuda", ("cuStreamSynchronize",), "arg0"),
    Api(82, "cuCtxSynchronize", "sync_device", "cuda", ("cuCtxSynchronize",)),
    Api(83, "cuEventSynchronize", "sync_event", "cuda", ("cuEventSynchronize",)),
    # HSA: hsa_queue_create(agent, size, type, callback, data, private, group, hsa_queue_t **queue)
    Api(91, "hsa_queue_create", "queue_create", "hsa", ("hsa_queue_create",), "sarg1"),
    # doorbell stores: (hsa_signal_t signal, hsa_signal_value_t value); signal = {uint64 handle}
    Api(92, "hsa_signal_store_screlease", "doorbell", "hsa", ("hsa_signal_store_screlease",)),
    Api(93, "hsa_signal_store_relaxed", "doorbell", "hsa", ("hsa_signal_store_relaxed",)),
)
API_BY_ID = {a.ident: a for a in APIS}
# hsa_queue_t (hsa.h, 64-bit): type u32 @0, features u32 @4, base_address @8,
# doorbell_signal {u64 handle} @16, size u32 @24, reserved1 u32 @28, id u64 @32
QUEUE_DOORBELL_OFF, QUEUE_ID_OFF = 16, 32
P = "@gpu_runtime_"


class GpuRuntimeFamily(ProbeFamily):
    """uprobes on HIP / HSA / CUDA runtime entry points in the libraries the process mapped."""

    name = "gpu_runtime"
    section = "queue"
    description = ("uprobes on HIP/HSA/CUDA runtime libraries: launches per stream, doorbells per "
                   "hardware queue, stream→queue mapping, launch and host-sync latency")
    uses_uprobes = True

    def __init__(self, libraries: list[MappedLibrary] | None = None) -> None:
        """`libraries`: probe these instead of the ones the traced pids mapped (ebpf-info)."""
        self.libraries = libraries
        self.attached: list[dict[str, Any]] = []
        self.not_attached: list[dict[str, Any]] = []
        self._hit_ns: dict[str, float] | None = None

    def wanted_events(self) -> list[str]:
        return [f"uprobe:{a.lib}:{a.name}" for a in APIS]

    # -- render --------------------------------------------------------------------------------
    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        libs = (self.libraries if self.libraries is not None
                else runtime_libraries(with_descendants(ctx.target.pids)))
        self.attached, self.not_attached = [], []
        if not libs:
            code.missing["uprobe:*"] = ("no HIP/HSA/CUDA runtime library is mapped by the traced "
                                        "processes (see /proc/PID/maps)")
            return code
        pf, gate = ctx.pid_filter, ctx.gate
        for lib in libs:
            if lib.problem:
                code.missing[f"uprobe:{lib.mapped_as}"] = lib.problem
                continue
            try:
                present = defined_functions(lib.path)
            except ElfError as exc:
                code.missing[f"uprobe:{lib.mapped_as}"] = str(exc)
                continue
            for api in (a for a in APIS if a.lib == lib.kind):
                symbol = next((s for s in api.symbols if s in present), None)
                event = f"uprobe:{lib.kind}:{api.name}"
                if symbol is None:
                    reason = f"symbol not in {lib.mapped_as} (ELF .dynsym/.symtab)"
                    code.missing[event] = reason
                    self.not_attached.append({"api": api.name, "library": lib.mapped_as,
                                              "reason": reason})
                    continue
                code.probes.extend(_blocks(api, f"{lib.path}:{symbol}", pf, gate))
                code.used_events.append(event)
                self.attached.append({"api": api.name, "symbol": symbol, "library": lib.mapped_as,
                                      "probed_path": lib.path, "pid": lib.pid})
        return code

    def snapshot(self, target: Any) -> Any:
        """What one uprobe hit costs here (uprobes.hit_cost_ns), measured once, before the window."""
        if not self.attached:
            return None
        if self._hit_ns is None:
            self._hit_ns = hit_cost_ns()
        return dict(self._hit_ns)

    # -- collect -------------------------------------------------------------------------------
    def collect(self, maps: dict[str, Any], context: dict[str, Any]) -> FamilyResult:
        syncs = {k: hist.stats(v) for k, v in hist.keyed(maps.get(f"{P}sync_ns")).items()}
        per_stream = _stream_rows(maps, syncs)
        queue_rows = _queue_rows(maps, per_stream)
        handles = _join_streams(per_stream, context.get("stream_handles") or [])
        total_launches = sum(r["launches"] for r in per_stream.values())
        hsa_probed = any(a["api"].startswith("hsa_signal_store") for a in self.attached)
        rings_used = (sorted(_hex(s) for s, r in queue_rows.items() if r["doorbell_rings"] > 0)
                      if hsa_probed else None)
        created = _pairs(maps.get(f"{P}streams"))  # (api, handle) → count
        metrics = {
            "summary": _summary(per_stream, rings_used) if self.attached else None,
            "streams": sorted(per_stream.values(), key=lambda r: (r["stream_index"] is None,
                                                                  r["stream_index"], r["handle"])),
            "queues": sorted(queue_rows.values(), key=lambda r: r["doorbell_signal"]),
            "streams_created": [{"api": _api_name(a), "handle": _hex(h), "calls": n}
                                for (a, h), n in created.items()],
            "device_and_event_syncs": _other_syncs(syncs),
            "nested_launch_calls": {_api_name(int(k)): int(v) for k, v in
                                    hist.keyed(maps.get(f"{P}nested")).items() if k},
            "stream_handles_joined": handles,
            "launches_total": total_launches if self.attached else None,
            "hw_queues_used": len(rings_used) if self.attached and rings_used is not None else None,
            "streams_launching": len([r for r in per_stream.values() if r["launches"]]),
            "probes": {"attached": self.attached, "not_attached": self.not_attached},
            "probe_cost": (_cost(context, total_launches,
                                 sum(r["doorbell_rings"] for r in queue_rows.values()),
                                 sum(v[0] for v in syncs.values() if v)) if self.attached else None),
        }
        coverage = {
            "statement": (f"uprobes on {len(self.attached)} runtime entry points"
                          if self.attached else "no GPU runtime entry point attached"),
            "covered": ("launch calls through the exported HIP/CUDA entry points; doorbell stores "
                        "through hsa_signal_store_*; HSA queues created after attach"),
            "not_covered": ("kernels the runtime submits internally without an exported launch "
                            "call (blit kernels for copies/memset), CUDA channel/doorbell writes "
                            "(inside the closed driver), GPU-side dispatch and execution"),
        }
        return FamilyResult(self.name, self.section, metrics, coverage)


def _api_name(ident: int) -> str:
    return API_BY_ID[ident].name if ident in API_BY_ID else str(ident)


def _stream_rows(maps: dict[str, Any], syncs: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per stream handle: launches by API, launch-call latency, stream syncs."""
    per_stream: dict[int, dict[str, Any]] = {}
    for (api_id, stream), n in _pairs(maps.get(f"{P}launches")).items():
        row = per_stream.setdefault(stream, _stream_row(stream))
        row["launches"] += n
        row["by_api"][_api_name(api_id)] = row["by_api"].get(_api_name(api_id), 0) + n
    for key, value in hist.keyed(maps.get(f"{P}launch_ns")).items():
        stats = hist.stats(value)
        if stats is not None:
            row = per_stream.setdefault(_split2(key)[1], _stream_row(_split2(key)[1]))
            row["latency_count"] += stats[0]
            row["latency_total_ns"] += stats[1]
    for key, stats in syncs.items():
        api_id, stream = _split2(key)
        if stats is not None and api_id in API_BY_ID and API_BY_ID[api_id].role == "sync_stream":
            row = per_stream.setdefault(stream, _stream_row(stream))
            row["sync_calls"] += stats[0]
            row["sync_blocked_ms"] += stats[1] / 1e6
    for row in per_stream.values():
        row["launch_avg_us"] = (row["latency_total_ns"] / row["latency_count"] / 1e3
                                if row["latency_count"] else None)
    return per_stream


def _queue_rows(maps: dict[str, Any], per_stream: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per doorbell signal: rings (all on queues seen created; in-launch ones on inferred queues),
    rings per stream; adds each stream's queues to its row."""
    queues = _pairs(maps.get(f"{P}queues"))  # (queue ptr, doorbell) → queue id
    doorbell_queue = {sig: (qptr, qid) for (qptr, sig), qid in queues.items()}
    rows: dict[int, dict[str, Any]] = {}
    for key, n in hist.keyed(maps.get(f"{P}rings")).items():
        if key:
            sig = int(key) & (2**64 - 1)
            rows[sig] = _queue_row(sig, *doorbell_queue.get(sig, (None, None)), "hsa_queue_create seen")
            rows[sig]["doorbell_rings"] = int(n)
    for (stream, sig), n in _pairs(maps.get(f"{P}launch_rings")).items():
        if sig not in rows:
            rows[sig] = _queue_row(sig, *doorbell_queue.get(sig, (None, None)),
                                   "inferred: stored during a launch call (queue created before attach)")
        row = rows[sig]
        if row["source"].startswith("inferred"):
            row["doorbell_rings"] += n  # only in-launch stores are known for these
        row["streams"][_hex(stream)] = row["streams"].get(_hex(stream), 0) + n
        stream_row = per_stream.setdefault(stream, _stream_row(stream))
        stream_row["queues"] = sorted({*stream_row["queues"], _hex(sig)})
    return rows


def _other_syncs(syncs: dict[str, Any]) -> list[dict[str, Any]]:
    """Device-wide and event syncs (no stream): calls and host time blocked."""
    out = []
    for key, stats in syncs.items():
        api_id, _ = _split2(key)
        if stats is not None and api_id in API_BY_ID and API_BY_ID[api_id].role != "sync_stream":
            out.append({"api": API_BY_ID[api_id].name, "calls": stats[0], "blocked_ms": stats[1] / 1e6})
    return out


def _summary(per_stream: dict[int, dict[str, Any]], rings_used: list[str] | None) -> dict[str, Any]:
    """The queue section's summary keys from this family (launches as submissions)."""
    lat_n = sum(r["latency_count"] for r in per_stream.values())
    lat_total = sum(r["latency_total_ns"] for r in per_stream.values())
    return {
        "source": "gpu_runtime",
        "total_submissions": sum(r["launches"] for r in per_stream.values()),
        "submissions_meaning": ("kernel launch calls into the GPU runtime (uprobes on the launch "
                                "APIs, outermost calls, window only)"),
        "total_dispatches": None,
        "dispatches_meaning": "not visible: the GPU's packet processor dispatches, not the host",
        "hw_rings_used": rings_used,
        "hw_rings_meaning": ("HSA doorbell signals rung in the window (one per hardware queue); "
                             "null when no HSA runtime is probed (CUDA hides its channels)"),
        "submit_to_dispatch_avg_us": None,
        "submit_to_dispatch_p99_us": None,
        "submit_to_dispatch_meaning": ("not measured by this family: see launch_call_avg_us (host "
                                       "launch cost)"),
        "launch_call_avg_us": lat_total / lat_n / 1e3 if lat_n else None,
        "launch_call_total_ms": lat_total / 1e6 if lat_n else None,
        "launch_call_meaning": "uprobe entry → uretprobe return of launch calls (host time)",
    }


def _blocks(api: Api, where: str, pf: str, gate: str) -> list[str]:
    """bpftrace blocks for one entry point (arguments read once, at the top of each probe)."""
    i = api.ident
    if api.role == "launch":
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  $s = {api.stream};\n  $d = {P}depth[tid];\n"
            f"  {P}depth[tid] = $d + 1;\n"
            f"  if ($d == 0 && {gate}) {{\n    {P}launches[{i}, $s] = count();\n"
            f"    {P}t0[tid] = nsecs;\n    {P}cur[tid] = $s;\n    {P}api[tid] = {i};\n  }}\n"
            f"  if ($d > 0 && {gate}) {{ {P}nested[{i}] = count(); }}\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $d = {P}depth[tid];\n"
            f"  if ($d > 1) {{ {P}depth[tid] = $d - 1; }}\n"
            f"  if ($d == 1) {{\n    delete({P}depth[tid]);\n    $t = {P}t0[tid];\n"
            f"    if ($t != 0) {{\n      {P}launch_ns[{P}api[tid], {P}cur[tid]] = stats(nsecs - $t);\n"
            f"      delete({P}t0[tid]);\n      delete({P}cur[tid]);\n      delete({P}api[tid]);\n"
            f"    }}\n  }}\n}}",
        ]
    if api.role == "stream_create":
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  {P}sout[tid] = arg0;\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $o = {P}sout[tid];\n  delete({P}sout[tid]);\n"
            f"  if ((retval & 0xffffffff) == 0 && $o != 0) {{\n"
            f"    {P}streams[{i}, *(uint64*)$o] = count();\n  }}\n}}",
        ]
    if api.role.startswith("sync_"):
        key = api.stream or "0"
        return [
            f"uprobe:{where}\n/{both(pf, gate)}/\n{{\n  $s = {key};\n"
            f"  if ({P}s0[tid] == 0) {{\n    {P}s0[tid] = nsecs;\n    {P}skey[tid] = $s;\n"
            f"    {P}sapi[tid] = {i};\n  }}\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $t = {P}s0[tid];\n"
            f"  if ($t != 0 && {P}sapi[tid] == {i}) {{\n"
            f"    {P}sync_ns[{i}, {P}skey[tid]] = stats(nsecs - $t);\n"
            f"    delete({P}s0[tid]);\n    delete({P}skey[tid]);\n    delete({P}sapi[tid]);\n  }}\n}}",
        ]
    if api.role == "queue_create":
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  {P}qout[tid] = {api.stream};\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $o = {P}qout[tid];\n  delete({P}qout[tid]);\n"
            f"  if ((retval & 0xffffffff) == 0 && $o != 0) {{\n    $q = *(uint64*)$o;\n"
            f"    $sig = *(uint64*)($q + {QUEUE_DOORBELL_OFF});\n"
            f"    {P}doorbell[$sig] = $q;\n"
            f"    {P}queues[$q, $sig] = *(uint64*)($q + {QUEUE_ID_OFF});\n  }}\n}}",
        ]
    if api.role == "doorbell":
        return [
            f"uprobe:{where}\n/{both(pf, gate)}/\n{{\n  $sig = arg0;\n"
            f"  if ({P}doorbell[$sig] != 0) {{ {P}rings[$sig] = count(); }}\n"
            f"  if ({P}t0[tid] != 0) {{ {P}launch_rings[{P}cur[tid], $sig] = count(); }}\n}}",
        ]
    raise ValueError(f"unknown role {api.role}")


def _split2(key: str) -> tuple[int, int]:
    """A two-part printed key "a,b" as unsigned 64-bit ints."""
    a, b = key.split(",")
    return int(a) & (2**64 - 1), int(b) & (2**64 - 1)


def _pairs(value: Any) -> dict[tuple[int, int], int]:
    """A two-key map printed as {"a,b": n} → {(a, b): n} (unsigned)."""
    return {_split2(k): n for k, n in hist.keyed(value).items()
            if k.count(",") == 1 and isinstance(n, int)}


def _hex(value: int) -> str:
    return f"0x{value & (2**64 - 1):x}"


def _stream_row(stream: int) -> dict[str, Any]:
    return {"handle": _hex(stream), "stream_index": None, "launches": 0, "by_api": {},
            "latency_count": 0, "latency_total_ns": 0, "launch_avg_us": None, "queues": [],
            "sync_calls": 0, "sync_blocked_ms": 0.0}


def _queue_row(sig: int, qptr: int | None, qid: int | None, source: str) -> dict[str, Any]:
    return {"doorbell_signal": _hex(sig), "queue": _hex(qptr) if qptr else None, "queue_id": qid,
            "source": source, "doorbell_rings": 0, "streams": {}}


def _join_streams(per_stream: dict[int, dict[str, Any]],
                  handles: list[dict[str, Any]]) -> dict[str, Any]:
    """Label eBPF stream rows with the harness's stream index (GPU backend's `cuda_stream`)."""
    by_handle = {int(h["handle"]) & (2**64 - 1): int(h["stream"]) for h in handles
                 if isinstance(h.get("handle"), int) and isinstance(h.get("stream"), int)}
    for handle, index in by_handle.items():
        if handle in per_stream:
            per_stream[handle]["stream_index"] = index
    return {"harness_streams": len(by_handle),
            "matched": sum(1 for h in by_handle if h in per_stream and per_stream[h]["launches"]),
            "ebpf_streams_not_in_harness": sum(1 for h, r in per_stream.items()
                                               if h not in by_handle and r["launches"])}


def _cost(context: dict[str, Any], launches: int, rings: int, syncs: int) -> dict[str, Any]:
    """uprobe cost per launch and as a share of the window, from costs measured at its start.

    Launch and sync calls cost an entry + return pair, doorbell rings an entry probe; both costs
    are timed in the tracer right before the window (uprobes.hit_cost_ns). The probed functions'
    first instruction (emulated or single-stepped) changes the real cost a little.
    """
    start = ((context.get("snapshots") or {}).get("gpu_runtime") or {}).get("start") or {}
    entry = start.get("entry_ns") if isinstance(start, dict) else None
    pair = start.get("entry_return_ns") if isinstance(start, dict) else None
    window_ms = (context.get("window") or {}).get("duration_ms")
    if not isinstance(entry, (int, float)) or not isinstance(pair, (int, float)):
        return {"entry_probe_us": None, "entry_return_pair_us": None,
                "reason": "probe costs were not measured (no window start)"}
    spent_ns = (launches + syncs) * pair + rings * entry
    return {"entry_probe_us": entry / 1e3, "entry_return_pair_us": pair / 1e3,
            "per_launch_us": (pair + entry * rings / launches) / 1e3 if launches else None,
            "hits_in_window": 2 * (launches + syncs) + rings,
            "probe_time_in_window_ms": spent_ns / 1e6,
            "window_share_pct": (100 * spent_ns / (window_ms * 1e6)
                                 if isinstance(window_ms, (int, float)) and window_ms > 0 else None),
            "meaning": ("host time spent in uprobe traps: costs timed in the tracer right before "
                        "the window (llabs entry probe vs labs; ffsll entry+return vs ffs; medians "
                        "of 3 x 100 calls) x calls counted in the window (launch and sync calls: "
                        "entry+return; doorbell rings: entry); share = that time / window duration, "
                        "all threads together")}
