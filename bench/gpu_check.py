"""GPU backend check: hetero_kernels and tiny_kernel_stress at 1, 4, 16 streams, large preset.

Meant for one short session on a machine with a GPU (ROCm or CUDA build of torch). Each point
runs as its own `run` process; the script prints one JSON summary line per point and exits
non-zero if any point failed. Every point is run twice, per_iteration with op timing (the
default) and end_only without it, and each line carries the instrumentation cost the run
measured: its window vs an uninstrumented window of the same iterations (`instr_cost` =
instrumented / uninstrumented − 1). Then, as root (or with sudo -n), the eBPF points of
_gpu_runtime_points.py: tiny_kernel_stress at 1/4/16 streams with --ebpf-trace --ebpf-gpu-runtime
(launches seen == ops issued, HW queues vs streams, uprobe cost per launch). Last, the windows
of _gpu_memory_points.py: past 200,000 ops (tiny_kernel_stress 16 streams, 120 and 360
iterations per_iteration, 120 end_only), the op events held stay bounded and the op count exact.
Usage: python bench/gpu_check.py [--device cuda:0] [--out DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys

from _gpu_check_args import parse_check_args
from _gpu_memory_points import run_memory_points
from _gpu_runtime_points import run_points

POINTS = [(w, s) for w in ("hetero_kernels", "tiny_kernel_stress") for s in (1, 4, 16)]
MODES = {
    "timed": ["--sync-mode", "per_iteration", "--op-timing"],
    "lean": ["--sync-mode", "end_only", "--no-op-timing"],
}


def summarize(data: dict) -> dict:
    lat = data.get("latency_ms") or {}
    return {
        "workload": data["workload_name"],
        "streams": data["stream_count"],
        "status": data["status"],
        "device": data["environment"].get("device_name"),
        "throughput": data["throughput"],
        "unit": data["throughput_unit"],
        "p50_ms": lat.get("p50"),
        "p99_ms": lat.get("p99"),
        "switch_overhead_ms": data["switch_latency"]["switch_overhead_ms"],
        "concurrency": data["concurrency"]["achieved"],
        "instr_cost": (data.get("instrumentation") or {}).get("cost_ratio"),
        "plain_throughput": (data.get("instrumentation") or {}).get("plain_throughput"),
        "verification": data["verification"]["passed"],
        "peak_mem_mib": (data["memory"].get("peak_bytes") or 0) / 2**20,
    }


def main() -> int:
    args, out = parse_check_args(__doc__.splitlines()[0], "aorta-gpu-check-")
    failed = 0
    for (workload, streams), (mode, flags) in ((p, m) for p in POINTS for m in MODES.items()):
        path = out / f"{workload}_{streams}_{mode}.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "aorta.hw_queue_eval",
                "run",
                workload,
                "--streams",
                str(streams),
                "--size",
                "large",
                "-d",
                args.device,
                "-i",
                args.iterations,
                *flags,
                "-o",
                str(path),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not path.exists():
            failed += 1
            print(
                json.dumps(
                    {
                        "workload": workload,
                        "streams": streams,
                        "mode": mode,
                        "status": "failed",
                        "error": proc.stderr.strip().splitlines()[-1:],
                    }
                )
            )
            continue
        print(json.dumps({"mode": mode, **summarize(json.loads(path.read_text()))}))
    failed += run_points(args.device, args.iterations, out)
    failed += run_memory_points(args.device)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
