"""Driver process for the real-vendor-library tests: dlopens one real runtime, calls its APIs.

Run as `python -I vendor_driver.py KIND LIBRARY`; prints "ready" once the library is loaded, then
for each phase name read from stdin ("before", "window", "after") makes that phase's calls of
PLANS[KIND] and prints "done". With no GPU every call fails early (cudaErrorInsufficientDriver,
hipErrorNoDevice, ncclInvalidArgument for a NULL communicator): the entry uprobe fires first.
Stream, event and graph handles are fake, distinct numbers (never dereferenced by a failing call).
The plan is the ground truth: the tests compute every expected count, byte and edge from it.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aorta.ebpf.probes.gpu_runtime_apis import APIS
from gpu_standins import LAUNCH_ARGTYPES, Dim3, LaunchConfig

API = {a.name: a for a in APIS}

V, S, INT, U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint


@dataclass(frozen=True)
class Call:
    """`n` calls of `api` on `stream`; size: bytes (copies) or elements (collectives); kind: the
    memcpy kind or the NCCL datatype; event: the event handle (record / wait)."""

    api: str
    n: int
    stream: int
    size: int = 0
    kind: int = 0
    event: int = 0


def s(i: int) -> int:
    """Fake stream handle i (distinct, page-aligned like real ones)."""
    return 0x5100000 + i * 0x1000


def e(i: int) -> int:
    """Fake event handle i."""
    return 0xE100000 + i * 0x100


def _gpu_plan(rt: str, pt: str, sync_suffix: str, extra_launches: list[Call]) -> dict[str, list[Call]]:
    """One plan shape for HIP and CUDA runtime (`rt` prefix, `pt` per-thread suffix)."""
    return {
        "before": [  # attached, window closed: none counted; the event record is remembered
            Call(f"{rt}LaunchKernel", 2, s(1)),
            Call(f"{rt}MemcpyAsync", 1, s(1), 99, 1),
            Call(f"{rt}EventRecord", 1, s(6), event=e(7)),
        ],
        "window": [
            Call(f"{rt}LaunchKernel", 2, s(1)),
            Call(f"{rt}LaunchKernel{pt}", 3, s(2)),
            Call(f"{rt}LaunchCooperativeKernel", 4, s(1)),
            Call(f"{rt}LaunchCooperativeKernel{pt}", 1, s(2)),
            *extra_launches,
            Call(f"{rt}GraphLaunch", 5, s(3)),
            Call(f"{rt}GraphLaunch{pt}", 2, s(4)),
            Call(f"{rt}MemcpyAsync", 3, s(1), 4096, 1),
            Call(f"{rt}MemcpyAsync", 2, s(2), 1000, 2),
            Call(f"{rt}MemcpyAsync{pt}", 1, s(3), 512, 3),
            Call(f"{rt}MemcpyAsync", 1, s(1), 8, 4),
            Call(f"{rt}Memcpy2DAsync", 2, s(4), 32 * 8, 2),
            Call(f"{rt}Memcpy2DAsync{pt}", 1, s(4), 16 * 8, 1),
            Call(f"{rt}MemcpyPeerAsync", 2, s(6), 777),
            Call(f"{rt}Memcpy", 1, 0, 64, 1),
            Call(f"{rt}Memcpy{sync_suffix}", 2, 2, 32, 2),
            Call(f"{rt}MemsetAsync", 3, s(5), 100),
            Call(f"{rt}MemsetAsync{pt}", 1, s(5), 50),
            Call(f"{rt}Memset", 1, 0, 10),
            Call(f"{rt}Memset{sync_suffix}", 1, 2, 20),
            Call(f"{rt}EventRecord", 1, s(1), event=e(1)),
            Call(f"{rt}StreamWaitEvent", 3, s(2), event=e(1)),  # edge s1 → s2, 3 waits
            Call(f"{rt}EventRecord{pt}", 1, s(3), event=e(2)),
            Call(f"{rt}StreamWaitEvent{pt}", 2, s(4), event=e(2)),  # s3 → s4
            Call(f"{rt}EventRecord", 1, s(5), event=e(1)),  # e1 now on s5
            Call(f"{rt}StreamWaitEvent", 1, s(6), event=e(1)),  # s5 → s6
            Call(f"{rt}StreamWaitEvent", 1, s(1), event=e(7)),  # s6 → s1 (recorded before the window)
            Call(f"{rt}StreamWaitEvent", 1, s(2), event=e(9)),  # never recorded: producer unknown
            Call(f"{rt}StreamSynchronize", 1, s(1)),
            Call(f"{rt}StreamSynchronize{pt}", 2, s(2)),
            Call(f"{rt}DeviceSynchronize", 1, 0),
            Call(f"{rt}EventSynchronize", 1, 0, event=e(1)),
        ],
        "after": [Call(f"{rt}LaunchKernel", 1, s(1)), Call(f"{rt}StreamWaitEvent", 1, s(2), event=e(1))],
    }


PLANS: dict[str, dict[str, list[Call]]] = {
    "cudart": _gpu_plan(
        "cuda",
        "_ptsz",
        "_ptds",
        [Call("cudaLaunchKernelExC", 2, s(3)), Call("cudaLaunchKernelExC_ptsz", 1, s(4))],
    ),
    "rocm": _gpu_plan(
        "hip",
        "_spt",
        "_spt",
        [
            Call("hipModuleLaunchKernel", 2, s(3)),
            Call("hipExtLaunchKernel", 1, s(4)),
            Call("hipExtModuleLaunchKernel", 3, s(5)),  # exported C++-mangled by ROCm 5
        ],
    ),
}
PLANS["cudart"]["window"] += [  # records with flags: CUDA only
    Call("cudaEventRecordWithFlags", 1, s(2), event=e(3)),
    Call("cudaEventRecordWithFlags_ptsz", 1, s(3), event=e(4)),
    Call("cudaStreamWaitEvent", 2, s(1), event=e(3)),  # s2 → s1
    Call("cudaStreamWaitEvent_ptsz", 1, s(5), event=e(4)),  # s3 → s5
]
PLANS["cudart13"] = PLANS["cudart"]  # CUDA 13's libcudart: the same entry points and signatures
# ncclDataType_t: int8 0, int32 2, int64 4, float16 6, float32 7, float64 8, bfloat16 9
PLANS["nccl"] = {
    "before": [Call("ncclAllReduce", 1, s(1), 1000, 7)],
    "window": [
        Call("ncclAllReduce", 2, s(1), 1000, 7),
        Call("ncclAllReduce", 1, s(1), 10, 99),  # not an ncclDataType_t: bytes unknown for the row
        Call("ncclAllReduce", 1, s(2), 64, 9),
        Call("ncclAllGather", 1, s(2), 256, 0),
        Call("ncclReduceScatter", 3, s(3), 10, 8),
        Call("ncclBroadcast", 1, s(1), 5, 9),
        Call("ncclBcast", 1, s(4), 4, 2),
        Call("ncclReduce", 1, s(2), 7, 4),
        Call("ncclAllToAll", 2, s(4), 3, 6),
        Call("ncclGather", 1, s(3), 11, 7),
        Call("ncclScatter", 1, s(3), 13, 7),
        Call("ncclGroupStart", 1, 0),
        Call("ncclSend", 2, s(5), 100, 0),
        Call("ncclRecv", 2, s(5), 100, 0),
        Call("ncclGroupEnd", 1, 0),
    ],
    "after": [Call("ncclAllReduce", 1, s(1), 1000, 7)],
}


def _launch(lib: ctypes.CDLL, name: str, c: Call) -> None:
    one = Dim3(1, 1, 1)
    if name == "hipExtModuleLaunchKernel":
        fn = getattr(lib, API[name].symbols[-1])
        fn(None, *([1] * 6), S(0), V(c.stream), None, None, None, None, U(0))
    elif name == "hipExtLaunchKernel":  # (f, grid, block, args, shmem, stream, start, stop, flags)
        lib.hipExtLaunchKernel.argtypes = [V, Dim3, Dim3, V, S, V, V, V, INT]
        lib.hipExtLaunchKernel(None, one, one, None, 0, c.stream, None, None, 0)
    elif name.endswith(("ExC", "ExC_ptsz")):
        config = LaunchConfig(one, one, 0, c.stream, None, 0)
        getattr(lib, name)(ctypes.byref(config), None, None)
    elif name == "hipModuleLaunchKernel":
        lib.hipModuleLaunchKernel(None, *([1] * 6), 0, V(c.stream), None, None)
    else:  # (func, dim3 grid, dim3 block, void** args, shmem, stream)
        fn = getattr(lib, name)
        fn.argtypes = LAUNCH_ARGTYPES
        fn(None, one, one, None, 0, c.stream)


def call(lib: ctypes.CDLL, c: Call) -> None:
    """One call of `c.api` with the plan's arguments (the library's own signature)."""
    name = c.api
    base = name.removeprefix("hip").removeprefix("cuda").split("_", 1)[0]
    if "Launch" in base and base != "GraphLaunch":
        _launch(lib, name, c)
        return
    fn = getattr(lib, name) if not name.startswith("nccl") else None
    if base == "GraphLaunch":
        fn(V(0x6A00000), V(c.stream))
    elif base in ("MemcpyAsync", "Memcpy"):
        fn.argtypes = [V, V, S, INT, V][: 5 if base == "MemcpyAsync" else 4]
        fn(0x10, 0x20, c.size, c.kind, *([c.stream] if base == "MemcpyAsync" else []))
    elif base == "Memcpy2DAsync":
        fn.argtypes = [V, S, V, S, S, S, INT, V]
        fn(0x10, 64, 0x20, 64, c.size // 8, 8, c.kind, c.stream)
    elif base == "MemcpyPeerAsync":
        fn.argtypes = [V, INT, V, INT, S, V]
        fn(0x10, 1, 0x20, 0, c.size, c.stream)
    elif base in ("MemsetAsync", "Memset"):
        fn.argtypes = [V, INT, S, V][: 4 if base == "MemsetAsync" else 3]
        fn(0x10, 0, c.size, *([c.stream] if base == "MemsetAsync" else []))
    elif base.startswith("EventRecord"):
        fn(V(c.event), V(c.stream), *([U(0)] if "WithFlags" in name else []))
    elif base == "StreamWaitEvent":
        fn(V(c.stream), V(c.event), U(0))
    elif base == "StreamSynchronize":
        fn(V(c.stream))
    elif base == "EventSynchronize":
        fn(V(c.event))
    elif base == "DeviceSynchronize":
        fn()
    else:
        _nccl(lib, c)


def _nccl(lib: ctypes.CDLL, c: Call) -> None:
    """NCCL/RCCL with a NULL communicator: ncclInvalidArgument before any device work."""
    op = c.api.removeprefix("nccl")
    if op == "AllToAll" and not hasattr(lib, "ncclAllToAll"):
        op = "AlltoAll"  # NCCL's spelling; RCCL's is AllToAll
    fn = getattr(lib, f"nccl{op}")
    head: list = [V(0x10), V(0x20), S(c.size), INT(c.kind)]
    if op in ("AllReduce", "ReduceScatter") or op in ("Broadcast", "Gather", "Scatter"):
        fn(*head, INT(0), None, V(c.stream))
    elif op == "Reduce":
        fn(*head, INT(0), INT(0), None, V(c.stream))
    elif op in ("AllGather", "AlltoAll", "AllToAll"):
        fn(*head, None, V(c.stream))
    elif op in ("Bcast", "Send", "Recv"):
        fn(V(0x10), S(c.size), INT(c.kind), INT(1), None, V(c.stream))
    else:  # GroupStart / GroupEnd
        fn()


def main() -> None:
    kind, path = sys.argv[1], sys.argv[2]
    lib = ctypes.CDLL(path)
    print("ready", flush=True)
    for line in sys.stdin:
        phase = line.strip()
        if phase not in PLANS[kind]:
            break
        for c in PLANS[kind][phase]:
            for _ in range(c.n):
                call(lib, c)
        print("done", flush=True)


if __name__ == "__main__":
    main()
