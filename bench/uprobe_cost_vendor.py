"""Cost of one gpu_runtime probe per kind, on the real vendor libraries (no GPU needed).

Times calls into the real libcudart.so.12 and libnccl.so.2 from the pinned test wheels
(tests/vendor_libs.py; `python tests/vendor_libs.py` fetches them) that fail early without a
GPU — an async copy, an event record, an AllReduce with a NULL communicator (entry probes with
the default views; bench/uprobe_cost_launch.py compares the views) — untraced and traced by the
gpu_runtime family with its default views, in rounds
(order alternating), each figure the fastest of short batches (uprobe_cost._time_calls). The
headline per kind is the median over rounds of (traced − untraced) ns per call.

Usage: sudo PYTHONPATH=src:tests python bench/uprobe_cost_vendor.py [--calls 4000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

V, S, INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


def _calls() -> dict[str, object]:
    import vendor_libs

    paths = {k: vendor_libs.library(k) for k in ("cudart", "nccl")}
    if None in paths.values():
        raise SystemExit("vendor libraries not fetched: run python tests/vendor_libs.py cudart nccl")
    rt, nc = ctypes.CDLL(str(paths["cudart"])), ctypes.CDLL(str(paths["nccl"]))
    rt.cudaMemcpyAsync.argtypes = [V, V, S, INT, V]
    rt.cudaEventRecord.argtypes = [V, V]
    nc.ncclAllReduce.argtypes = [V, V, S, INT, INT, V, V]
    return {
        "copy (cudaMemcpyAsync, entry+return)": lambda: rt.cudaMemcpyAsync(16, 32, 4096, 1, 0x5101000),
        "event record (cudaEventRecord, entry)": lambda: rt.cudaEventRecord(0xE100000, 0x5101000),
        "collective (ncclAllReduce, entry+return)": lambda: nc.ncclAllReduce(
            16, 32, 100, 7, 0, None, 0x5101000
        ),
    }


def main() -> None:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
    from uprobe_cost import _time_calls

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    fns = _calls()
    for fn in fns.values():
        fn()  # lazy initialisation (cudart looks for the driver once)
    ready = engine.check_readiness()
    if not ready.ok or ready.tracefs is None:
        raise SystemExit(f"eBPF unavailable: {ready.reason}")
    program = engine.make_program(
        True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[GpuRuntimeFamily()]
    )
    deltas: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(args.rounds):
        plain = {k: _time_calls(f, args.calls) for k, f in fns.items()} if r % 2 == 0 else None
        session = engine.start_session(program, ready)
        session.window_start()
        traced = {k: _time_calls(f, args.calls) for k, f in fns.items()}
        session.window_stop()
        session.stop()
        plain = plain or {k: _time_calls(f, args.calls) for k, f in fns.items()}
        for k in fns:
            deltas[k].append(traced[k] - plain[k])
    for k, d in deltas.items():
        print(f"{k}: +{statistics.median(d) / 1e3:.2f} us per call (median of {len(d)} rounds)")


if __name__ == "__main__":
    main()
