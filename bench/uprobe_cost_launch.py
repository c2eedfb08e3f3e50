"""gpu_runtime's cost per kernel launch vs an empty entry uprobe on the same symbol (issue 26 item 7).

On the real vendor libraries from the pinned test wheels (tests/vendor_libs.py): libamdhip64's
`hipLaunchKernel` and libcudart's `cudaLaunchKernel`, called on a fake stream (every call fails
early without a GPU, after the entry uprobe fired). Each round times three conditions, in an
order that rotates from round to round: untraced, one empty entry uprobe on the symbol's address
(`uprobe:LIB:ADDR {}`, bpftrace directly), and the gpu_runtime family (entry + return probes with
its maps). Each figure is the fastest of short batches (uprobe_cost._time_calls); the headline
per library is the median over rounds of (family − untraced) / (empty − untraced), the goal ≤ 1.3.
Also printed: what the family's own calibration (uprobes.hit_cost_ns, the cost the result
reports per launch: entry+return pair) says, next to the paired measurement.

Usage: sudo PYTHONPATH=src:tests python bench/uprobe_cost_launch.py [--calls 4000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

V, S = ctypes.c_void_p, ctypes.c_size_t
STREAM = 0x5101000
SYMBOLS = {"rocm": "hipLaunchKernel", "cudart": "cudaLaunchKernel"}


def _launchers() -> dict[str, tuple[str, str, object]]:
    """library key → (path, symbol, a call of it)."""
    import vendor_libs
    from gpu_standins import Dim3

    one = Dim3(1, 1, 1)
    out = {}
    for key, symbol in SYMBOLS.items():
        path = vendor_libs.library(key)
        if path is None:
            raise SystemExit(f"vendor library {key} not fetched: run python tests/vendor_libs.py {key}")
        fn = getattr(ctypes.CDLL(str(path)), symbol)
        fn.argtypes = [V, Dim3, Dim3, V, S, V]
        out[key] = (str(path), symbol, lambda fn=fn: fn(None, one, one, None, 0, STREAM))
    return out


def _empty_probe(bpftrace: str, path: str, symbol: str) -> subprocess.Popen:
    """bpftrace with one empty entry uprobe on `symbol`'s address in `path`, once attached."""
    from aorta.ebpf.elfsyms import function_addresses
    from aorta.ebpf.probes.gpu_runtime import _attach_point

    point = _attach_point(symbol, function_addresses(path)[symbol])
    code = f'uprobe:{path}:{point} {{ }}\nBEGIN {{ printf("ready\\n"); }}'
    child = subprocess.Popen([bpftrace, "-B", "line", "-e", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:  # "Attaching N probes...", then BEGIN once every probe is attached
        if line.strip() == "ready":
            return child
    child.kill()
    raise SystemExit("bpftrace did not attach the empty uprobe")


def _ratio(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x" if ratios else "null (empty probe cost within noise)"


def main() -> None:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
    from uprobe_cost import _time_calls

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    libs = _launchers()
    for _, _, fn in libs.values():
        fn()  # lazy runtime initialisation
    ready = engine.check_readiness()
    if not ready.ok or ready.tracefs is None:
        raise SystemExit(f"eBPF unavailable: {ready.reason}")
    family = GpuRuntimeFamily()
    program = engine.make_program(
        True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[family]
    )
    conditions = ("plain", "empty", "family")
    ns: dict[str, dict[str, list[float]]] = {k: {c: [] for c in conditions} for k in libs}
    for r in range(args.rounds):
        order = conditions[r % 3 :] + conditions[: r % 3]
        for cond in order:
            for key, (path, symbol, fn) in libs.items():
                if cond == "plain":
                    ns[key][cond].append(_time_calls(fn, args.calls))
                elif cond == "empty":
                    child = _empty_probe(ready.bpftrace, path, symbol)
                    try:
                        ns[key][cond].append(_time_calls(fn, args.calls))
                    finally:
                        child.terminate()
                        child.wait()
            if cond == "family":
                session = engine.start_session(program, ready)
                session.window_start()
                try:
                    for key, (_, _, fn) in libs.items():
                        ns[key][cond].append(_time_calls(fn, args.calls))
                finally:
                    session.window_stop()
                    session.stop()
    calib = family.snapshot(None) or {}
    print(f"calls per figure {args.calls}, rounds {args.rounds} (conditions rotated per round)")
    for key, v in ns.items():
        empty = [e - p for e, p in zip(v["empty"], v["plain"], strict=True)]
        fam = [f - p for f, p in zip(v["family"], v["plain"], strict=True)]
        ratios = [f / e for f, e in zip(fam, empty, strict=True) if e > 0]
        print(
            f"{SYMBOLS[key]} ({key}): untraced {statistics.median(v['plain']) / 1e3:.2f} us; "
            f"empty uprobe +{statistics.median(empty) / 1e3:.2f} us; gpu_runtime "
            f"+{statistics.median(fam) / 1e3:.2f} us; ratio {_ratio(ratios)} "
            f"(per round: {', '.join(f'{x:.2f}' for x in ratios)})"
        )
    pair = calib.get("entry_return_ns")
    print(
        "family calibration (reported as per_launch_us): entry+return "
        + (f"{pair / 1e3:.2f} us" if isinstance(pair, (int, float)) else "not measured")
        + f", entry {calib.get('entry_ns', 0) / 1e3:.2f} us"
    )


if __name__ == "__main__":
    main()
