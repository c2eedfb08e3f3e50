"""gpu_runtime's cost per call vs an empty entry uprobe on the same symbol (issue 26 item 7).

On the real vendor libraries from the pinned test wheels (tests/vendor_libs.py): a launch
(libcudart's `cudaLaunchKernel`), a copy, an event record and a stream sync (libcudart) and a
collective (libnccl's `ncclAllReduce`), each called on a fake stream or a NULL communicator, so
every call fails early without a GPU, after the entry uprobe fired. (libamdhip64's
`hipLaunchKernel` is left out: without a GPU each call takes ~20 us, varying by as much, which
hides a probe's cost.)

Each round times four conditions, in an order that rotates from round to round: untraced; one
empty entry uprobe on each symbol's address (`uprobe:LIB:ADDR {}`, bpftrace directly); the
gpu_runtime family with its default views; the family with every view (`times` adds the return
probes). Each figure is the fastest of short batches (uprobe_cost._time_calls). Printed per kind:
untraced ns/call, the ns an empty uprobe adds, the ns each family condition adds (medians over
rounds), and the median over rounds of (family - untraced) / (empty - untraced), the goal <= 1.3
for the default views.

Usage: sudo PYTHONPATH=src:tests python bench/uprobe_cost_launch.py [--calls 4000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

V, S, INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
STREAM = 0x5101000
CONDITIONS = ("plain", "empty", "default", "all")


def _kinds() -> dict[str, tuple[str, str, Callable[[], object]]]:
    """kind → (library path, symbol, one call of it)."""
    import vendor_libs
    from gpu_standins import LAUNCH_ARGTYPES, Dim3

    paths = {k: vendor_libs.library(k) for k in ("cudart", "nccl")}
    missing = [k for k, p in paths.items() if p is None]
    if missing:
        raise SystemExit(f"vendor libraries not fetched: run python tests/vendor_libs.py {' '.join(missing)}")
    rt, nc = (ctypes.CDLL(str(paths[k])) for k in ("cudart", "nccl"))
    one = Dim3(1, 1, 1)
    rt.cudaLaunchKernel.argtypes = LAUNCH_ARGTYPES
    rt.cudaMemcpyAsync.argtypes = [V, V, S, INT, V]
    rt.cudaEventRecord.argtypes = [V, V]
    rt.cudaStreamSynchronize.argtypes = [V]
    nc.ncclAllReduce.argtypes = [V, V, S, INT, INT, V, V]
    cudart, nccl = (str(paths[k]) for k in ("cudart", "nccl"))
    return {
        "launch cudaLaunchKernel": (
            cudart,
            "cudaLaunchKernel",
            lambda: rt.cudaLaunchKernel(None, one, one, None, 0, STREAM),
        ),
        "copy cudaMemcpyAsync": (
            cudart,
            "cudaMemcpyAsync",
            lambda: rt.cudaMemcpyAsync(16, 32, 4096, 1, STREAM),
        ),
        "event cudaEventRecord": (cudart, "cudaEventRecord", lambda: rt.cudaEventRecord(0xE100000, STREAM)),
        "sync cudaStreamSynchronize": (
            cudart,
            "cudaStreamSynchronize",
            lambda: rt.cudaStreamSynchronize(STREAM),
        ),
        "collective ncclAllReduce": (
            nccl,
            "ncclAllReduce",
            lambda: nc.ncclAllReduce(16, 32, 100, 7, 0, None, STREAM),
        ),
    }


def _empty_probes(bpftrace: str, points: list[tuple[str, str]]) -> subprocess.Popen:
    """bpftrace with one empty entry uprobe on each (path, symbol)'s address, once attached."""
    from aorta.ebpf.elfsyms import function_addresses
    from aorta.ebpf.probes.gpu_runtime_bpf import attach_point

    lines = []
    for path, symbol in points:
        point = attach_point(symbol, function_addresses(path)[symbol])
        lines.append(f"uprobe:{path}:{point} {{ }}")
    code = "\n".join(lines) + '\nBEGIN { printf("ready\\n"); }'
    child = subprocess.Popen([bpftrace, "-B", "line", "-e", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:  # "Attaching N probes...", then BEGIN once every probe is attached
        if line.strip() == "ready":
            return child
    child.kill()
    raise SystemExit("bpftrace did not attach the empty uprobes")


def _ratio(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x" if ratios else "null (empty probe cost within noise)"


def main() -> None:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
    from aorta.ebpf.probes.gpu_runtime_views import ALL_VIEWS, DEFAULT_VIEWS
    from uprobe_cost import _time_calls

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    kinds = _kinds()
    for _, _, fn in kinds.values():
        fn()  # lazy runtime initialisation
    ready = engine.check_readiness()
    if not ready.ok or ready.tracefs is None or ready.bpftrace is None:
        raise SystemExit(f"eBPF unavailable: {ready.reason}")
    families = {"default": GpuRuntimeFamily(views=DEFAULT_VIEWS), "all": GpuRuntimeFamily(views=ALL_VIEWS)}
    programs = {
        name: engine.make_program(
            True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[family]
        )
        for name, family in families.items()
    }
    ns: dict[str, dict[str, list[float]]] = {k: {c: [] for c in CONDITIONS} for k in kinds}

    def time_all(cond: str) -> None:
        for kind, (_, _, fn) in kinds.items():
            ns[kind][cond].append(_time_calls(fn, args.calls))

    for r in range(args.rounds):
        order = CONDITIONS[r % len(CONDITIONS) :] + CONDITIONS[: r % len(CONDITIONS)]
        for cond in order:
            if cond == "plain":
                time_all(cond)
            elif cond == "empty":
                child = _empty_probes(ready.bpftrace, [(p, s) for p, s, _ in kinds.values()])
                try:
                    time_all(cond)
                finally:
                    child.terminate()
                    child.wait()
            else:
                session = engine.start_session(programs[cond], ready)
                session.window_start()
                try:
                    time_all(cond)
                finally:
                    session.window_stop()
                    session.stop()
    print(
        f"calls per figure {args.calls}, rounds {args.rounds} (conditions rotated per round); "
        f"default views {','.join(DEFAULT_VIEWS)}; all: {','.join(ALL_VIEWS)}"
    )
    for kind, v in ns.items():
        empty = [e - p for e, p in zip(v["empty"], v["plain"], strict=True)]
        line = (
            f"{kind}: untraced {statistics.median(v['plain']):.0f} ns/call; "
            f"empty uprobe +{statistics.median(empty):.0f} ns"
        )
        for cond in ("default", "all"):
            added = [f - p for f, p in zip(v[cond], v["plain"], strict=True)]
            ratios = [a / e for a, e in zip(added, empty, strict=True) if e > 0]
            line += (
                f"; {cond} views +{statistics.median(added):.0f} ns, ratio {_ratio(ratios)} "
                f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
            )
        print(line)
    calib = families["default"].snapshot(TraceTarget(()))
    entry = calib.entry_ns if calib is not None else {}
    print(
        "family calibration (probe_cost in the result), ns per entry hit by the probed function's "
        "first instruction: "
        + ", ".join(
            f"{cls} {ns:.0f}" if ns is not None else f"{cls} not measured" for cls, ns in entry.items()
        )
        + (
            f"; return probe +{calib.return_ns:.0f}"
            if calib is not None and calib.return_ns is not None
            else ""
        )
        + "  (compare: the default views' added ns per call above; libcudart and libnccl's "
        "entry points start with a push, but ncclBcast)"
    )


if __name__ == "__main__":
    main()
