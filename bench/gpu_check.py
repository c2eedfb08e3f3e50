"""GPU backend check: hetero_kernels and tiny_kernel_stress at 1, 4, 16 streams, large preset.

Meant for one short session on a machine with a GPU (ROCm or CUDA build of torch). Each point
runs as its own `run` process; the script prints one JSON summary line per point and exits
non-zero if any point failed. Every point is run twice, per_iteration with op timing (the
default) and end_only without it, and each line carries the instrumentation cost the run
measured: its window vs an uninstrumented window of the same iterations (`instr_cost` =
instrumented / uninstrumented − 1). Then, as root (or with sudo -n), the eBPF points of
_gpu_runtime_points.py: tiny_kernel_stress at 1/4/16 streams with --ebpf-trace --ebpf-gpu-runtime
(launches seen == ops issued, HW queues vs streams, uprobe cost per launch), and the views of
_gpu_view_points.py: a driver's known graph launches, host→device copies, cross-stream waits and
all-reduces (a world-size-1 NCCL process group) under `ebpf-attach --ebpf-gpu-runtime`, counted
exactly, with the cost per call (traced vs untraced; without eBPF or a GPU, lines saying why).
Last, the windows of _gpu_memory_points.py: past 200,000 ops (tiny_kernel_stress 16 streams, 120
and 360 iterations per_iteration, 120 end_only), the op events held stay bounded and the op count
exact.
Then the diagnosis sweeps of _gpu_diagnosis_points.py: tiny_kernel_stress at 1/4/16 streams, 3
repeats, unmodified and with the runtime held to one hardware queue: the causes named and the
causes not measured on this GPU, each with why.
On a lent machine it runs from the carried tree with nothing installed (_gpu_check_env.py: the
wheels of .gpu-wheels/ go into a private folder on every child's path); the eBPF points run only
where bpftrace, privileges and bpf() are all there (_gpu_ebpf_gate.py), else a line says why not.
Every line printed is also written to DIR/gpu_check.jsonl. `--device cpu --quick` is the dry run.
Usage: PYTHONPATH=src python3 bench/gpu_check.py [--device cuda:0] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from _gpu_check_args import parse_check_args
from _gpu_check_env import WHEELS, child_env, child_paths, imported_from, install_wheels
from _gpu_diagnosis_points import run_diagnosis_points
from _gpu_ebpf_gate import ebpf_gate
from _gpu_memory_points import run_memory_points
from _gpu_runtime_points import run_points
from _gpu_view_points import run_view_points

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
        "switch_overhead_ms": data["switch_latency"]["switch_overhead_ms"],  # null on GPU: readiness unknown
        "switch_overhead_all_gaps_ms": (data["switch_latency"].get("all_gaps") or {}).get(
            "switch_overhead_ms"
        ),
        "concurrency": data["concurrency"]["achieved"],
        "instr_cost": (data.get("instrumentation") or {}).get("cost_ratio"),
        "plain_throughput": (data.get("instrumentation") or {}).get("plain_throughput"),
        "verification": data["verification"]["passed"],
        "peak_mem_mib": (data["memory"].get("peak_bytes") or 0) / 2**20,
    }


def _options(parser: argparse.ArgumentParser) -> None:
    """gpu_check's own options: the wheels folder and the dry run's small points."""
    parser.add_argument("--wheels", type=Path, default=None, help="wheels to install (.gpu-wheels/)")
    parser.add_argument(
        "--quick", action="store_true", help="dry run: 2 iterations, small preset (not measurements)"
    )


class _Tee:
    """stdout that also writes every line to the --out folder's gpu_check.jsonl."""

    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def main() -> int:
    args, out = parse_check_args(__doc__.splitlines()[0], "aorta-gpu-check-", _options)
    size = "small" if args.quick else "large"
    if args.quick:
        args.iterations = "2"
    sys.stdout = _Tee(sys.stdout, (out / "gpu_check.jsonl").open("w", encoding="utf-8"))
    extra, wheels = install_wheels(args.wheels or WHEELS)
    paths = child_paths(extra)
    env = child_env(paths)
    print(json.dumps({**wheels, "jsonschema_from": imported_from("jsonschema", env)}))
    failed = 0 if "error" not in wheels else 1
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
                size,
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
            env=env,
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
    ebpf, reason = ebpf_gate()
    print(json.dumps({"check": "ebpf_points", "ran": ebpf, "reason": reason}))
    if ebpf:
        failed += run_points(args.device, args.iterations, out, env)
    failed += run_view_points(args.device, out, env, (ebpf, reason))
    failed += run_memory_points(args.device, paths, env)
    failed += run_diagnosis_points(args.device, args.iterations, args.quick, out, env)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
