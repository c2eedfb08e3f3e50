"""GPU backend check: hetero_kernels and tiny_kernel_stress at 1, 4, 16 streams, large preset.

Meant for one short session on a machine with a GPU (ROCm or CUDA build of torch). Each point
runs as its own `run` process; the script prints one JSON summary line per point and exits
non-zero if any point failed. Usage: python bench/gpu_check.py [--device cuda:0] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

POINTS = [(w, s) for w in ("hetero_kernels", "tiny_kernel_stress") for s in (1, 4, 16)]


def summarize(data: dict) -> dict:
    lat = data.get("latency_ms") or {}
    return {"workload": data["workload_name"], "streams": data["stream_count"],
            "status": data["status"], "device": data["environment"].get("device_name"),
            "throughput": data["throughput"], "unit": data["throughput_unit"],
            "p50_ms": lat.get("p50"), "p99_ms": lat.get("p99"),
            "switch_overhead_ms": data["switch_latency"]["switch_overhead_ms"],
            "concurrency": data["concurrency"]["achieved"],
            "verification": data["verification"]["passed"],
            "peak_mem_mib": (data["memory"].get("peak_bytes") or 0) / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--iterations", default="20")
    parser.add_argument("--out", default=None, help="keep the result JSON files here")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="aorta-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for workload, streams in POINTS:
        path = out / f"{workload}_{streams}.json"
        proc = subprocess.run([sys.executable, "-m", "aorta.hw_queue_eval", "run", workload,
                               "--streams", str(streams), "--size", "large", "-d", args.device,
                               "-i", args.iterations, "-o", str(path)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not path.exists():
            failed += 1
            print(json.dumps({"workload": workload, "streams": streams, "status": "failed",
                              "error": proc.stderr.strip().splitlines()[-1:]}))
            continue
        print(json.dumps(summarize(json.loads(path.read_text()))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
