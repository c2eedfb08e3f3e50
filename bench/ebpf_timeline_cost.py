"""Cost of the eBPF timeline (--trace-out with --ebpf-trace) against the aggregates alone.

Interleaved rounds of `run WORKLOAD -d cpu --ebpf-trace` as fresh processes, `aggregates` (-o
only) and `timeline` (-o and --trace-out: the per-event records of aorta/ebpf/timeline.py), the
order alternating between rounds. Per run it reads from the result: the time the kernel spent in
the tracer's BPF programs (BPF_ENABLE_STATS held while the bench runs; every hit since attach, so
warm-up included: an upper bound for the window), the events the timeline saw, the window, the
throughput and the attach time. It prints medians per side and the timeline's own cost: the
difference of in-kernel time, per timeline event and as a share of the window.

Usage: sudo .venv/bin/python bench/ebpf_timeline_cost.py [--rounds 5] [--iterations 100]
       [--workload hetero_kernels] [--streams 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench module, not the cwd
from aorta.common.atomicio import atomic_write_json, check_output_path
from ebpf_overhead import bpf_run_time_stats

KINDS = ("on_cpu", "run_queue", "doorbells")


def one_run(workload: str, streams: int, iterations: int, timeline: bool, folder: Path) -> dict[str, Any]:
    """One fresh traced run; the figures this bench compares."""
    result_path, trace_path = folder / "r.json", folder / "t.json"
    cmd = [sys.executable, "-m", "aorta.hw_queue_eval", "run", workload, "--streams", str(streams)]
    cmd += ["-i", str(iterations), "-w", "3", "-d", "cpu", "--ebpf-trace", "-o", str(result_path), "--force"]
    if timeline:
        cmd += ["--trace-out", str(trace_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=folder)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    result = json.loads(result_path.read_text())
    section = result.get("ebpf_queue_metrics") or {}
    cost = section.get("probe_cost") or {}
    tl = ((section.get("families") or {}).get("cpu_sched") or {}).get("metrics", {}).get("timeline")
    return {
        "bpf_ms": cost.get("run_time_ms"),
        "bpf_runs": cost.get("run_count"),
        "window_ms": result.get("total_time_ms"),
        "throughput": result.get("throughput"),
        "attach_s": section.get("attach_s"),
        "events": sum(tl[k]["seen"] for k in KINDS) if tl else 0,
        "dropped": sum(tl[k]["dropped"] for k in KINDS) if tl else 0,
        "trace_bytes": trace_path.stat().st_size if timeline and trace_path.exists() else None,
    }


def median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--workload", default="hetero_kernels")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    if args.json_out:
        check_output_path(args.json_out)
    runs: dict[str, list[dict[str, Any]]] = {"aggregates": [], "timeline": []}
    with bpf_run_time_stats() as timed, tempfile.TemporaryDirectory(prefix="aorta-tlcost-") as tmp:
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for timeline in order:
                side = "timeline" if timeline else "aggregates"
                runs[side].append(one_run(args.workload, args.streams, args.iterations, timeline, Path(tmp)))
    summary: dict[str, Any] = {
        "workload": args.workload,
        "streams": args.streams,
        "iterations": args.iterations,
        "rounds": args.rounds,
        "bpf_stats": timed,
        "medians": {
            side: {
                k: median(r, k)
                for k in ("bpf_ms", "bpf_runs", "window_ms", "throughput", "attach_s", "events")
            }
            for side, r in runs.items()
        },
        "runs": runs,
    }
    on, off = summary["medians"]["timeline"], summary["medians"]["aggregates"]
    extra = on["bpf_ms"] - off["bpf_ms"] if on["bpf_ms"] is not None and off["bpf_ms"] is not None else None
    summary["timeline_cost"] = {
        "bpf_ms": extra,
        "ns_per_event": extra * 1e6 / on["events"] if extra is not None and on["events"] else None,
        "share_of_window_pct": 100 * extra / on["window_ms"]
        if extra is not None and on["window_ms"]
        else None,
        "aggregates_share_of_window_pct": 100 * off["bpf_ms"] / off["window_ms"]
        if off["bpf_ms"] is not None and off["window_ms"]
        else None,
        "attach_s_delta": on["attach_s"] - off["attach_s"]
        if on["attach_s"] is not None and off["attach_s"] is not None
        else None,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    if args.json_out:
        atomic_write_json(args.json_out, summary)


if __name__ == "__main__":
    main()
