"""Benchmark: every workload at its recommended stream count on the CPU backend.

Prints, per workload: throughput (its unit), the window, measured ops per second, and the share of
the window each stream was busy (merged op intervals / window), so a reader sees that every
stream works and which role dominates. Ops/s and busy shares come from the per-op intervals the
CPU backend records; throughput from the workload's own work count over the same window.
One process, one run per workload: numbers are for orientation, not for comparing runs.
Usage: python bench/workload_catalogue.py [--iterations 10] [--size small] [--only a,b]
"""

from __future__ import annotations

import argparse

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.run.harness import run_benchmark
from aorta.hw_queue_eval.workloads.registry import list_workloads


def busy_shares(result: dict) -> list[float]:
    """Per-stream busy time as a share of the window."""
    window = result["total_time_ms"]
    return [busy / window for busy in result["per_stream_times_ms"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--size", default="small")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    print(
        f"{'workload':22} {'S':>3} {'throughput':>12} {'unit':12} {'window ms':>10} "
        f"{'ops/s':>9} {'idle':>4}  busy share per stream"
    )
    for info in list_workloads():
        if only and info.name not in only:
            continue
        config = RunConfig(
            workload=info.name,
            streams=info.recommended_streams,
            iterations=args.iterations,
            warmup=2,
            device="cpu",
            size=args.size,
        )
        result = run_benchmark(config).to_dict()
        shares = busy_shares(result)
        ops_per_s = result["ops"]["count"] / (result["total_time_ms"] / 1e3)
        idle = sum(1 for count in result["per_stream_op_counts"] if count == 0)
        status = "" if result["status"] == "ok" else f"  [{result['status']}]"
        print(
            f"{info.name:22} {info.recommended_streams:>3} {result['throughput']:>12.4g} "
            f"{info.throughput_unit:12} {result['total_time_ms']:>10.1f} {ops_per_s:>9.0f} "
            f"{idle:>4}  " + " ".join(f"{s:.3f}" for s in shares) + status,
            flush=True,
        )


if __name__ == "__main__":
    main()
