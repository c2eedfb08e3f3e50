"""The GPU runtime entry points the gpu_runtime family probes: names, roles, where the stream is;
and what a render probed (`AttachedProbe`) or could not (`MissedProbe`).

Facts from the public headers and API references listed in docs/ebpf.md (names, argument order,
struct offsets); x86-64 SysV calling convention.
"""

from __future__ import annotations

from dataclasses import dataclass

from aorta.common.jsontypes import JsonObject

# How the stream argument is read at function entry (x86-64 SysV: a 12-byte dim3 by value takes
# two registers; arguments beyond six integer registers are on the stack: sargN).
STACK1, STACK2, CONFIG32 = "sarg1", "sarg2", "*(uint64*)(arg0 + 32)"


@dataclass(frozen=True)
class Api:
    """One probed entry point: numeric id (map key), role, library kind, symbol names, stream."""

    ident: int
    name: str
    # launch | graph_launch | copy | memset | collective | group | event_record | stream_wait |
    # stream_create | sync_stream | sync_device | sync_event | queue_create | doorbell
    role: str
    lib: str  # key of runtime_libs.RUNTIME_LIBS
    symbols: tuple[str, ...]  # accepted ELF names (plain C name first; aliases, mangled variants)
    stream: str | None = None  # bpftrace expression of the stream handle at entry
    size: str | None = None  # copy/memset: bytes; collective: element count (bpftrace expression)
    kind: str | None = None  # copy: the cudaMemcpyKind/hipMemcpyKind argument; collective: datatype
    event: str | None = None  # event_record / stream_wait: the event handle
    direction: str | None = None  # fixed direction when the API has no kind argument (peer, memset)


# older HIP releases declare hipExtModuleLaunchKernel without extern "C" (C++-mangled export)
_HIP_EXT_MODULE_MANGLED = (
    "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j"
)

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
    Api(
        6,
        "hipExtModuleLaunchKernel",
        "launch",
        "hip",
        ("hipExtModuleLaunchKernel", _HIP_EXT_MODULE_MANGLED),
        STACK2,
    ),
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
    # cooperative launches: same argument layout as hip/cudaLaunchKernel (hipLaunchCooperativeKernel
    # takes an unsigned shmem: still one stack slot); hipModuleLaunchCooperativeKernel(f, gx, gy,
    # gz, bx, by, bz, shmem, hipStream_t, params) like hipModuleLaunchKernel
    Api(15, "cudaLaunchCooperativeKernel", "launch", "cudart", ("cudaLaunchCooperativeKernel",), STACK1),
    Api(
        16,
        "cudaLaunchCooperativeKernel_ptsz",
        "launch",
        "cudart",
        ("cudaLaunchCooperativeKernel_ptsz",),
        STACK1,
    ),
    Api(9, "hipLaunchCooperativeKernel", "launch", "hip", ("hipLaunchCooperativeKernel",), STACK1),
    Api(10, "hipLaunchCooperativeKernel_spt", "launch", "hip", ("hipLaunchCooperativeKernel_spt",), STACK1),
    Api(
        17, "hipModuleLaunchCooperativeKernel", "launch", "hip", ("hipModuleLaunchCooperativeKernel",), STACK2
    ),
    # graph launches: (graphExec, stream); one call = one graph launch, however many kernels it holds
    Api(101, "hipGraphLaunch", "graph_launch", "hip", ("hipGraphLaunch",), "arg1"),
    Api(102, "hipGraphLaunch_spt", "graph_launch", "hip", ("hipGraphLaunch_spt",), "arg1"),
    Api(103, "cudaGraphLaunch", "graph_launch", "cudart", ("cudaGraphLaunch",), "arg1"),
    Api(104, "cudaGraphLaunch_ptsz", "graph_launch", "cudart", ("cudaGraphLaunch_ptsz",), "arg1"),
    # copies. MemcpyAsync(dst, src, bytes, kind, stream); Memcpy2DAsync(dst, dpitch, src, spitch,
    # width, height, kind, stream): bytes = width x height; MemcpyPeerAsync(dst, dstDev, src,
    # srcDev, bytes, stream); synchronous Memcpy(dst, src, bytes, kind) on the default stream
    # (legacy 0; the _ptds/_spt forms: the per-thread default stream, handle 0x2)
    *(
        Api(ident, f"{rt}{name}", "copy", lib, (f"{rt}{name}",), stream, size, kind, direction=direction)
        for ident, rt, lib, name, stream, size, kind, direction in (
            (111, "hip", "hip", "MemcpyAsync", "arg4", "arg2", "arg3", None),
            (112, "hip", "hip", "MemcpyAsync_spt", "arg4", "arg2", "arg3", None),
            (113, "hip", "hip", "Memcpy2DAsync", STACK1, "arg4 * arg5", "sarg0", None),
            (114, "hip", "hip", "Memcpy2DAsync_spt", STACK1, "arg4 * arg5", "sarg0", None),
            (115, "hip", "hip", "MemcpyPeerAsync", "arg5", "arg4", "0", "peer"),
            (116, "hip", "hip", "Memcpy", "0", "arg2", "arg3", None),
            (117, "hip", "hip", "Memcpy_spt", "2", "arg2", "arg3", None),
            (121, "cuda", "cudart", "MemcpyAsync", "arg4", "arg2", "arg3", None),
            (122, "cuda", "cudart", "MemcpyAsync_ptsz", "arg4", "arg2", "arg3", None),
            (123, "cuda", "cudart", "Memcpy2DAsync", STACK1, "arg4 * arg5", "sarg0", None),
            (124, "cuda", "cudart", "Memcpy2DAsync_ptsz", STACK1, "arg4 * arg5", "sarg0", None),
            (125, "cuda", "cudart", "MemcpyPeerAsync", "arg5", "arg4", "0", "peer"),
            (126, "cuda", "cudart", "Memcpy", "0", "arg2", "arg3", None),
            (127, "cuda", "cudart", "Memcpy_ptds", "2", "arg2", "arg3", None),
        )
    ),
    # memsets: MemsetAsync(dst, int value, bytes, stream); Memset(dst, value, bytes) synchronous
    *(
        Api(ident, f"{rt}{name}", "memset", lib, (f"{rt}{name}",), stream, "arg2", "0", direction="memset")
        for ident, rt, lib, name, stream in (
            (131, "hip", "hip", "MemsetAsync", "arg3"),
            (132, "hip", "hip", "MemsetAsync_spt", "arg3"),
            (133, "hip", "hip", "Memset", "0"),
            (134, "hip", "hip", "Memset_spt", "2"),
            (141, "cuda", "cudart", "MemsetAsync", "arg3"),
            (142, "cuda", "cudart", "MemsetAsync_ptsz", "arg3"),
            (143, "cuda", "cudart", "Memset", "0"),
            (144, "cuda", "cudart", "Memset_ptds", "2"),
        )
    ),
    # collectives (nccl.h; RCCL keeps the API): element count and datatype by position, stream last.
    # AllReduce/ReduceScatter(send, recv, count, dtype, op, comm, stream): stream on the stack;
    # Broadcast/Gather/Scatter(send, recv, count, dtype, root, comm, stream): same;
    # Reduce(send, recv, count, dtype, op, root, comm, stream): second stack slot;
    # AllGather/AlltoAll(send, recv, count, dtype, comm, stream): arg5;
    # Bcast(buff, count, dtype, root, comm, stream), Send/Recv(buff, count, dtype, peer, comm, stream).
    # The p-prefixed names (profiling interface) are aliases at the same address: probed once.
    *(
        Api(ident, f"nccl{op}", "collective", "nccl", (f"nccl{op}", *alts, f"pnccl{op}"), stream, size, dtype)
        for ident, op, alts, stream, size, dtype in (
            (151, "AllReduce", (), "sarg0", "arg2", "arg3"),
            (152, "AllGather", (), "arg5", "arg2", "arg3"),
            (153, "ReduceScatter", (), "sarg0", "arg2", "arg3"),
            (154, "Broadcast", (), "sarg0", "arg2", "arg3"),
            (155, "Bcast", (), "arg5", "arg1", "arg2"),
            (156, "Reduce", (), "sarg1", "arg2", "arg3"),
            (157, "AllToAll", ("ncclAlltoAll", "pncclAlltoAll"), "arg5", "arg2", "arg3"),
            (158, "Gather", (), "sarg0", "arg2", "arg3"),
            (159, "Scatter", (), "sarg0", "arg2", "arg3"),
            (160, "Send", (), "arg5", "arg1", "arg2"),
            (161, "Recv", (), "arg5", "arg1", "arg2"),
        )
    ),
    Api(171, "ncclGroupStart", "group", "nccl", ("ncclGroupStart", "pncclGroupStart")),
    Api(172, "ncclGroupEnd", "group", "nccl", ("ncclGroupEnd", "pncclGroupEnd")),
    # cross-stream ordering: EventRecord(event, stream[, flags]); StreamWaitEvent(stream, event, flags)
    *(
        Api(ident, name, "event_record", lib, (name,), "arg1", event="arg0")
        for ident, name, lib in (
            (181, "hipEventRecord", "hip"),
            (182, "hipEventRecord_spt", "hip"),
            (183, "cudaEventRecord", "cudart"),
            (184, "cudaEventRecord_ptsz", "cudart"),
            (185, "cudaEventRecordWithFlags", "cudart"),
            (186, "cudaEventRecordWithFlags_ptsz", "cudart"),
        )
    ),
    *(
        Api(ident, name, "stream_wait", lib, (name,), "arg0", event="arg1")
        for ident, name, lib in (
            (191, "hipStreamWaitEvent", "hip"),
            (192, "hipStreamWaitEvent_spt", "hip"),
            (193, "cudaStreamWaitEvent", "cudart"),
            (194, "cudaStreamWaitEvent_ptsz", "cudart"),
        )
    ),
    # stream creation: first argument is the out-pointer to the new handle
    Api(31, "hipStreamCreate", "stream_create", "hip", ("hipStreamCreate",), "arg0"),
    Api(32, "hipStreamCreateWithFlags", "stream_create", "hip", ("hipStreamCreateWithFlags",), "arg0"),
    Api(33, "hipStreamCreateWithPriority", "stream_create", "hip", ("hipStreamCreateWithPriority",), "arg0"),
    Api(41, "cudaStreamCreate", "stream_create", "cudart", ("cudaStreamCreate",), "arg0"),
    Api(42, "cudaStreamCreateWithFlags", "stream_create", "cudart", ("cudaStreamCreateWithFlags",), "arg0"),
    Api(
        43,
        "cudaStreamCreateWithPriority",
        "stream_create",
        "cudart",
        ("cudaStreamCreateWithPriority",),
        "arg0",
    ),
    Api(51, "cuStreamCreate", "stream_create", "cuda", ("cuStreamCreate",), "arg0"),
    Api(52, "cuStreamCreateWithPriority", "stream_create", "cuda", ("cuStreamCreateWithPriority",), "arg0"),
    # host synchronisation
    Api(61, "hipStreamSynchronize", "sync_stream", "hip", ("hipStreamSynchronize",), "arg0"),
    Api(64, "hipStreamSynchronize_spt", "sync_stream", "hip", ("hipStreamSynchronize_spt",), "arg0"),
    Api(62, "hipDeviceSynchronize", "sync_device", "hip", ("hipDeviceSynchronize",)),
    Api(63, "hipEventSynchronize", "sync_event", "hip", ("hipEventSynchronize",)),
    Api(71, "cudaStreamSynchronize", "sync_stream", "cudart", ("cudaStreamSynchronize",), "arg0"),
    Api(74, "cudaStreamSynchronize_ptsz", "sync_stream", "cudart", ("cudaStreamSynchronize_ptsz",), "arg0"),
    Api(72, "cudaDeviceSynchronize", "sync_device", "cudart", ("cudaDeviceSynchronize",)),
    Api(73, "cudaEventSynchronize", "sync_event", "cudart", ("cudaEventSynchronize",)),
    Api(81, "cuStreamSynchronize", "sync_stream", "cuda", ("cuStreamSynchronize",), "arg0"),
    Api(84, "cuStreamSynchronize_ptsz", "sync_stream", "cuda", ("cuStreamSynchronize_ptsz",), "arg0"),
    Api(82, "cuCtxSynchronize", "sync_device", "cuda", ("cuCtxSynchronize",)),
    Api(83, "cuEventSynchronize", "sync_event", "cuda", ("cuEventSynchronize",)),
    # HSA: hsa_queue_create(agent, size, type, callback, data, private, group, hsa_queue_t **queue)
    Api(91, "hsa_queue_create", "queue_create", "hsa", ("hsa_queue_create",), "sarg1"),
    # doorbell stores: (hsa_signal_t signal, hsa_signal_value_t value); signal = {uint64 handle}
    Api(92, "hsa_signal_store_screlease", "doorbell", "hsa", ("hsa_signal_store_screlease",)),
    Api(93, "hsa_signal_store_relaxed", "doorbell", "hsa", ("hsa_signal_store_relaxed",)),
)
API_BY_ID = {a.ident: a for a in APIS}
assert len(API_BY_ID) == len(APIS), "duplicate API ids"

# cudaMemcpyKind (driver_types.h) = hipMemcpyKind (hip_runtime_api.h); 1024: HIP's
# hipMemcpyDeviceToDeviceNoCU (a device-to-device copy kept off the compute units)
MEMCPY_KINDS = {0: "H2H", 1: "H2D", 2: "D2H", 3: "D2D", 4: "default", 1024: "D2D_noCU"}
# ncclDataType_t (nccl.h 2.2x; RCCL the same numbering) → bytes per element
NCCL_TYPE_SIZES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
NCCL_TYPE_NAMES = {
    0: "int8",
    1: "uint8",
    2: "int32",
    3: "uint32",
    4: "int64",
    5: "uint64",
    6: "float16",
    7: "float32",
    8: "float64",
    9: "bfloat16",
    10: "float8e4m3",
    11: "float8e5m2",
}
# hsa_queue_t (hsa.h, 64-bit): type u32 @0, features u32 @4, base_address @8,
# doorbell_signal {u64 handle} @16, size u32 @24, reserved1 u32 @28, id u64 @32
QUEUE_DOORBELL_OFF, QUEUE_ID_OFF = 16, 32
P = "@gpu_runtime_"


@dataclass(frozen=True)
class AttachedProbe:
    """One entry point the family probed: the API and the symbol probed for it, its address and
    file (as the process maps it, and the path probed), the process whose mapping was judged,
    and the class of its first instruction (gpu_runtime_calibration). `late`: probed by a late
    program (late_runtimes), whose probes went live `late_attach_s` after the window opened
    (None: unknown)."""

    api: str
    symbol: str
    address: str  # "0x…"
    library: str
    probed_path: str
    pid: int
    entry_instruction: str
    late: bool = False
    late_attach_s: float | None = None

    def to_json(self) -> JsonObject:
        """The row of `probes.attached` (`late_attach_s` only on a late program's probes)."""
        row: JsonObject = {
            "api": self.api,
            "symbol": self.symbol,
            "address": self.address,
            "library": self.library,
            "probed_path": self.probed_path,
            "pid": self.pid,
            "entry_instruction": self.entry_instruction,
        }
        if self.late:
            row["late_attach_s"] = self.late_attach_s
        return row

    @classmethod
    def from_json(cls, row: JsonObject) -> AttachedProbe:
        """The probe a `to_json()` row describes (a node's other ranks get them as JSON)."""
        return cls(
            row["api"],
            row["symbol"],
            row["address"],
            row["library"],
            row["probed_path"],
            row["pid"],
            row["entry_instruction"],
            "late_attach_s" in row,
            row.get("late_attach_s"),
        )


@dataclass(frozen=True)
class MissedProbe:
    """An entry point (or a whole file: api "*") the family did not probe, and why."""

    api: str
    library: str
    reason: str

    def to_json(self) -> JsonObject:
        """The row of `probes.not_attached`."""
        return {"api": self.api, "library": self.library, "reason": self.reason}

    @classmethod
    def from_json(cls, row: JsonObject) -> MissedProbe:
        """The miss a `to_json()` row describes."""
        return cls(row["api"], row["library"], row["reason"])
