"""The eBPF part of bench/gpu_check.py: GPU backend with the gpu_runtime uprobes at 1/4/16 streams.

For each stream count, tiny_kernel_stress runs twice as fresh processes: plain and with
`--ebpf-trace --ebpf-gpu-runtime`. Printed per point: launches the uprobes saw on the harness's
streams vs ops the harness issued (they should be equal: one kernel per op), HW queues used vs
streams, host launch-call latency, and the tracing cost: throughput traced/plain, its share of the
window, and that share spread over the window's launches (µs per launch; an estimate from two
runs, inconclusive inside run-to-run noise). Needs root or `sudo -n` for bpftrace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

STREAMS = (1, 4, 16)
WORKLOAD = "tiny_kernel_stress"


def _run(
    device: str, iterations: str, streams: int, path: Path, traced: bool, env: dict[str, str]
) -> dict[str, Any] | None:
    flags = ["--ebpf-trace", "--ebpf-gpu-runtime"] if traced else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "run",
            WORKLOAD,
            "--streams",
            str(streams),
            "-d",
            device,
            "-i",
            iterations,
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
        print(
            json.dumps(
                {
                    "workload": WORKLOAD,
                    "streams": streams,
                    "traced": traced,
                    "status": "failed",
                    "error": proc.stderr.strip().splitlines()[-3:],
                }
            )
        )
        return None
    return json.loads(path.read_text())


def summarize(plain: dict[str, Any], traced: dict[str, Any]) -> dict[str, Any]:
    """One line per stream count: launches vs ops, queues vs streams, cost."""
    queue = traced.get("ebpf_queue_metrics") or {}
    fam = ((queue.get("families") or {}).get("gpu_runtime") or {}).get("metrics") or {}
    cmp = traced.get("ebpf_vs_cuda_comparison") or {}
    ops = (traced.get("ops") or {}).get("count")
    ratio = (
        traced["throughput"] / plain["throughput"]
        if plain.get("throughput") and traced.get("throughput")
        else None
    )
    window_ms = (queue.get("window") or {}).get("duration_ms")
    launches = fam.get("launches_total")
    share = (1 - ratio) if ratio is not None else None
    return {
        "workload": WORKLOAD,
        "streams": traced["stream_count"],
        "status": queue.get("status"),
        "error": queue.get("error"),
        "ops_issued": ops,
        "launches_seen": launches,
        "launches_matched": cmp.get("launches_matched"),
        "launches_seen_eq_ops": cmp.get("launches_matched") == ops if ops is not None else None,
        "accuracy_pct": cmp.get("coverage_pct"),
        "hw_queues_used": fam.get("hw_queues_used"),
        "lost_events": queue.get("lost_events"),
        "launch_call_avg_us": (fam.get("summary") or {}).get("launch_call_avg_us"),
        "op_gap_avg_us": cmp.get("harness_op_gap_avg_us"),
        "throughput_traced_over_plain": ratio,
        "cost_share_of_window": share,
        "cost_us_per_launch_est": (
            share * window_ms * 1e3 / launches if share is not None and window_ms and launches else None
        ),
        "uprobe_cost_in_result": fam.get("probe_cost"),
        "not_attached": (fam.get("probes") or {}).get("not_attached"),
        "missing": (queue.get("families") or {}).get("gpu_runtime", {}).get("events_missing"),
    }


def run_points(device: str, iterations: str, out: Path, env: dict[str, str]) -> int:
    """Run every point (children get `env`), print one JSON line each; the number failed."""
    failed = 0
    for streams in STREAMS:
        plain = _run(device, iterations, streams, out / f"gpu_runtime_plain_{streams}.json", False, env)
        traced = _run(device, iterations, streams, out / f"gpu_runtime_traced_{streams}.json", True, env)
        if plain is None or traced is None:
            failed += 1
            continue
        line = summarize(plain, traced)
        failed += 0 if line["status"] == "ok" and line["launches_seen_eq_ops"] else 1
        print(json.dumps(line))
    return failed
