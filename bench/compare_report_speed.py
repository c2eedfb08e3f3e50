"""Time `compare` and `report` end to end (fresh processes) on large synthetic files; no torch.

    python bench/compare_report_speed.py [--samples 10000] [--ops 100000]

Targets (issue 5): compare of two files with 10 000 samples per point < 1 s; report < 10 s;
neither imports torch. Prints one line per measurement and exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STREAMS = (1, 2, 4, 8, 16, 32)
PROBE = (
    "import sys, runpy; sys.argv = ['aorta'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('aorta.hw_queue_eval', run_name='__main__')\n"
    "except SystemExit as e:\n    code = e.code\n"
    "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'NO_TORCH', code, file=sys.stderr)\n"
)


def synthetic_run(streams: int, samples: int, ops: int, seed: int, shift: float) -> dict:
    """A schema-v1-shaped run with `samples` iteration times and `ops` op intervals."""
    rng = np.random.default_rng(seed)
    times = rng.lognormal(np.log(1.0 + 0.1 * streams) + shift, 0.05, samples)
    per_iter = max(1, ops // max(1, samples))
    rows, t = [], 0.0
    for i in range(min(samples, max(1, ops // per_iter))):
        for k in range(per_iter):
            s = k % streams
            rows.append([i, s, s % 4, k % 2, round(t, 3), round(t + 1, 3), round(t + 40, 3)])
        t += 50.0
    p = np.percentile(times, [50, 95, 99])
    return {
        "schema_version": 1,
        "kind": "run",
        "status": "ok",
        "error": None,
        "workload_name": "hetero_kernels",
        "stream_count": streams,
        "config": {"size": "small", "backend": "cpu", "sync_mode": "per_iteration"},
        "throughput": 100.0 * streams / float(np.mean(times)),
        "throughput_unit": "GFLOPS",
        "latency_ms": {
            "mean": float(times.mean()),
            "p50": float(p[0]),
            "p95": float(p[1]),
            "p99": float(p[2]),
            "min": float(times.min()),
            "max": float(times.max()),
            "std": float(times.std()),
        },
        "iteration_times_ms": [round(float(x), 6) for x in times],
        "total_time_ms": t / 1e3,
        "metadata": {"work_per_iteration": 1e8 * streams},
        "queue_mapping": {
            "pool_size": 4,
            "queues_created": min(streams, 4),
            "stream_to_queue": [s % 4 for s in range(streams)],
        },
        "environment": {"backend": "cpu", "cpu_count": 2},
        "switch_latency": {"switch_overhead_ms": 0.001},
        "concurrency": {"achieved": 1.0},
        "ops": {"per_label": {}},
        "warnings": [],
        "op_intervals": {
            "columns": ["iteration", "stream", "queue", "label", "ready_us", "start_us", "end_us"],
            "labels": ["gemm", "tiny"],
            "rows": rows,
            "total_ops": len(rows),
            "truncated": False,
        },
        "ebpf_queue_metrics": None,
        "ebpf_memory_metrics": None,
        "ebpf_vs_cuda_comparison": None,
    }


def synthetic_sweep(samples: int, seed: int, shift: float) -> dict:
    sys.path.insert(0, str(REPO / "src"))
    from aorta.hw_queue_eval.sweeps.stream_sweep import analysis_of

    points = [
        {
            "key": {"workload": "hetero_kernels", "streams": n},
            "status": "ok",
            "result": synthetic_run(n, samples, 0, seed + n, shift),
        }
        for n in STREAMS
    ]
    return {
        "schema_version": 1,
        "kind": "sweep",
        "workload": "hetero_kernels",
        "throughput_unit": "GFLOPS",
        "points": points,
        "analysis": analysis_of(points, "per_stream"),
    }


def timed(*args: str) -> tuple[float, str, int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, check=False
    )
    elapsed = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return elapsed, last, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--ops", type=int, default=100_000)
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        base, test = Path(tmp, "base.json"), Path(tmp, "test.json")
        base.write_text(json.dumps(synthetic_sweep(args.samples, 1, 0.0)))
        test.write_text(json.dumps(synthetic_sweep(args.samples, 2, 0.02)))
        run = Path(tmp, "run.json")
        run.write_text(json.dumps(synthetic_run(8, 1000, args.ops, 3, 0.0)))
        checks = [
            (
                f"compare: 2 sweeps x {len(STREAMS)} points x {args.samples} samples",
                1.0,
                base,
                ("compare", "-b", str(base), "-t", str(test), "--json"),
            ),
            (
                f"report: sweep of {len(STREAMS)} points x {args.samples} samples",
                10.0,
                base,
                ("report", str(base), "-o", str(Path(tmp, "rep_sweep"))),
            ),
            (
                f"report: run with {args.ops} op intervals",
                10.0,
                run,
                ("report", str(run), "-o", str(Path(tmp, "rep_run"))),
            ),
        ]
        for label, limit, source, cli_args in checks:
            elapsed, probe, rc = timed(*cli_args)
            ok = elapsed < limit and probe.startswith("NO_TORCH") and rc in (0, 1, None)
            failures += not ok
            print(
                f"{'ok  ' if ok else 'FAIL'} {label}: {elapsed:.2f} s (limit {limit:g} s; "
                f"{probe}; input {source.stat().st_size / 1e6:.1f} MB)"
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
