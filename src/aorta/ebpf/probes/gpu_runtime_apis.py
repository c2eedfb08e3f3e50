"""The GPU runtime entry points the gpu_runtime family probes: names, roles, where the stream is.

Facts from the public headers and API references listed in docs/ebpf.md (names, argument order,
struct offsets); x86-64 SysV calling convention.
"""

from __future__ import annotations

from dataclasses import dataclass

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
