"""GPU backend op memory without a GPU: events alive and peak RSS at N and 4N iterations.

Runs the GPU backend over the fake device of tests/fake_cuda.py (a model of the torch.cuda
stream/event API; events are Python objects, so RSS here is host memory only, not driver memory)
with the shape of tiny_kernel_stress large at 16 streams (2,048 empty ops per iteration), each
size in a fresh process, and prints side by side: the most event objects alive at any
fold_pending, peak RSS, host µs per op spent reading events inside the window and in
stop_window. `--old FILE` runs a copy of an older backends/gpu.py (e.g. `git show
013d16f:src/aorta/hw_queue_eval/backends/gpu.py > /tmp/gpu_old.py`) the same way.
Usage: python bench/gpu_event_memory_fake.py [--iterations 100] [--mode per_iteration|end_only] [--old FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STREAMS, OPS = 16, 128

_CHILD = """
import importlib.util, json, resource, sys, time
sys.path.insert(0, sys.argv[4])
import pytest
from fake_cuda import DEVICE, GRID_MS, FakeEvent, install

old, iterations, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
install(pytest.MonkeyPatch())
if old:
    spec = importlib.util.spec_from_file_location("gpu_old", old)
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
else:
    from aorta.hw_queue_eval.backends import gpu
backend = gpu.GpuBackend(16, "cuda:0")
backend.row_cap = 200_000
backend.set_instrumentation(op_timing=True, iteration_joins=(mode == "per_iteration"))
backend.start_window()
most = 0
start = time.perf_counter()
for i in range(iterations):
    backend.begin_iteration(i)
    for stream in backend.streams:
        for _ in range(128):
            stream.launch(lambda: DEVICE.run(GRID_MS), "tiny_mul")
    backend.end_iteration()
    if mode == "per_iteration":
        backend.synchronize()
    else:
        DEVICE.advance(DEVICE.latest() - 40 * GRID_MS)  # the device lags the host
    backend.fold_pending()
    most = max(most, FakeEvent.alive)
window = time.perf_counter() - start
start = time.perf_counter()
rows = backend.stop_window()
stop = time.perf_counter() - start
ops = iterations * 16 * 128
print(json.dumps({"ops": ops, "rows": len(rows), "max_events_alive": most,
                  "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "read_us_per_op_in_window": round(getattr(backend, "fold_ns", 0) / 1e3 / ops, 3),
                  "stop_window_us_per_op": round(stop * 1e6 / ops, 3),
                  "window_us_per_op": round(window * 1e6 / ops, 3)}))
"""


def measure(old: str, iterations: int, mode: str) -> dict:
    """One window in a fresh process (its own peak RSS)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, old, str(iterations), mode, str(REPO / "tests")],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--mode", choices=("per_iteration", "end_only"), default="per_iteration")
    parser.add_argument("--old", default="", help="an older backends/gpu.py to run the same way")
    args = parser.parse_args()
    for label, old in (("old", args.old), ("new", "")) if args.old else (("new", ""),):
        sizes = {n: measure(old, n, args.mode) for n in (args.iterations, 4 * args.iterations)}
        small, large = sizes[args.iterations], sizes[4 * args.iterations]
        for n, point in sizes.items():
            print(json.dumps({"code": label, "mode": args.mode, "iterations": n, **point}))
        print(
            json.dumps(
                {
                    "code": label,
                    "events_4N_over_N": round(large["max_events_alive"] / small["max_events_alive"], 3),
                    "rss_growth_mib_4N_minus_N": round(large["maxrss_mib"] - small["maxrss_mib"], 1),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
