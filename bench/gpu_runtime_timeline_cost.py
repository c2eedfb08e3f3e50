"""Cost per call of gpu_runtime's --trace-out timeline, on the real libcudart (no GPU needed).

Times calls into the real libcudart.so.12 from the pinned test wheel (tests/vendor_libs.py;
`python tests/vendor_libs.py cudart` fetches it) that fail early without a GPU — a launch, an
async copy (entry + return probes already), an event record and a stream wait (entry probe only:
the timeline adds their return probe) — under the gpu_runtime family with the timeline off (the
default program) and on, in rounds whose order alternates, each figure the fastest of short
batches (uprobe_cost._time_calls). The timeline's cap is set so that every call of the round is
kept (the worst case: past the cap a call is only counted). Headline per call: the median over
rounds of (on − off) ns, and of off − untraced for scale.

Usage: sudo PYTHONPATH=src:tests python bench/gpu_runtime_timeline_cost.py [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

V, S, INT, U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint


def _calls() -> dict[str, Any]:
    import vendor_libs
    from gpu_standins import LAUNCH_ARGTYPES, Dim3

    path = vendor_libs.library("cudart")
    if path is None:
        raise SystemExit("libcudart not fetched: run python tests/vendor_libs.py cudart")
    rt = ctypes.CDLL(str(path))
    rt.cudaLaunchKernel.argtypes = LAUNCH_ARGTYPES
    rt.cudaMemcpyAsync.argtypes = [V, V, S, INT, V]
    rt.cudaEventRecord.argtypes = [V, V]
    rt.cudaStreamWaitEvent.argtypes = [V, V, U]
    one = Dim3(1, 1, 1)
    return {
        "launch (cudaLaunchKernel)": lambda: rt.cudaLaunchKernel(None, one, one, None, 0, 0x5101000),
        "copy (cudaMemcpyAsync)": lambda: rt.cudaMemcpyAsync(16, 32, 4096, 1, 0x5101000),
        "event record (cudaEventRecord)": lambda: rt.cudaEventRecord(0xE100000, 0x5101000),
        "stream wait (cudaStreamWaitEvent)": lambda: rt.cudaStreamWaitEvent(0x5102000, 0xE100000, 0),
    }


def main() -> None:
    from aorta.ebpf import engine
    from aorta.ebpf.probes import gpu_runtime_timeline as gtl
    from aorta.ebpf.probes.base import CollectContext, TraceTarget
    from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
    from aorta.ebpf.session import stop_timeout_s
    from uprobe_cost import _time_calls

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("gpu_runtime_timeline_cost: needs root (uprobes); run with sudo")
    fns = _calls()
    for fn in fns.values():
        fn()  # lazy initialisation (cudart looks for the driver once)
    ready = engine.check_readiness()
    if not ready.ok or ready.tracefs is None:
        raise SystemExit(f"eBPF unavailable: {ready.reason}")
    programs = {}
    for mode, events in (("off", 0), ("on", gtl.THREAD_SHARE * 2 * args.calls)):
        target = TraceTarget((os.getpid(),), timeline_events=events)
        family = GpuRuntimeFamily()
        programs[mode] = (
            engine.make_program(True, False, target, ready.tracefs, ready.version, families=[family]),
            family,
        )
    per: dict[str, dict[str, list[float]]] = {m: {k: [] for k in fns} for m in ("plain", "off", "on")}
    kept: list[int] = []
    for r in range(args.rounds):
        per_round = {"plain": {k: _time_calls(f, args.calls) for k, f in fns.items()}}
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            program, family = programs[mode]
            session = engine.start_session(program, ready)
            session.window_start()
            per_round[mode] = {k: _time_calls(f, args.calls) for k, f in fns.items()}
            session.window_stop()
            out = session.stop(timeout_s=stop_timeout_s(session.output.attached_probes))
            if mode == "on":
                tl = engine.collect_results(program, out, CollectContext(window=engine.window_edges(out)))[0]
                kinds = tl.metrics["timeline"]["kinds"]
                assert all(k["dropped"] == 0 for k in kinds.values()), "the cap dropped calls"
                kept.append(sum(k["kept"] for k in kinds.values()))
        for mode, times in per_round.items():
            for k, ns in times.items():
                per[mode][k].append(ns)
    print(f"{args.rounds} rounds of {args.calls} calls per kind; timeline kept {kept} calls per round")
    for k in fns:
        plain, off, on = (statistics.median(per[m][k]) for m in ("plain", "off", "on"))
        diffs = [a - b for a, b in zip(per["on"][k], per["off"][k], strict=True)]
        print(
            f"{k}: untraced {plain:.0f} ns, timeline off {off:.0f} ns, on {on:.0f} ns per call; "
            f"timeline adds {statistics.median(diffs) / 1e3:+.2f} us (median of per-round "
            f"differences; {min(diffs) / 1e3:+.2f} .. {max(diffs) / 1e3:+.2f})"
        )


if __name__ == "__main__":
    main()
