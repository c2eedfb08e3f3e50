"""Tracer overhead: throughput with and without tracing, interleaved pairs, median ratio.

Each pair runs `run WORKLOAD -d cpu` twice as fresh processes, once traced and once not, the order
alternating between pairs so drift does not favour one side. Throughput comes from the result
JSON (measurement window only). Modes: queue (--ebpf-trace; targets ≤ 2 % hetero_kernels, ≤ 5 %
tiny_kernel_stress), memory (--ebpf-memory-trace; ≤ 3 % hetero_kernels) and both (the two flags,
one bpftrace process; ≤ 3 % hetero_kernels).

Usage: sudo PYTHONPATH=src python bench/ebpf_overhead.py [--pairs 5] [--iterations 40]
                                                          [--modes queue,memory,both]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aorta.common.atomicio import atomic_write_json, check_output_path, read_json_file

TARGETS = {"hetero_kernels": 2.0, "tiny_kernel_stress": 5.0}
STREAMS = {"hetero_kernels": 8, "tiny_kernel_stress": 16}
#: mode → (flags, result section that must be "ok", targets per workload in %)
MODES: dict[str, tuple[list[str], str, dict[str, float]]] = {
    "queue": (["--ebpf-trace"], "ebpf_queue_metrics", TARGETS),
    "memory": (["--ebpf-memory-trace"], "ebpf_memory_metrics", {"hetero_kernels": 3.0}),
    "both": (["--ebpf-trace", "--ebpf-memory-trace"], "ebpf_memory_metrics",
             {"hetero_kernels": 3.0}),
}


def _run(workload: str, traced: bool, iterations: int, folder: Path, tag: str,
         mode: str = "queue") -> dict[str, Any]:
    out = folder / f"{workload}-{tag}.json"
    cmd = [sys.executable, "-m", "aorta.hw_queue_eval", "run", workload, "--streams",
           str(STREAMS[workload]), "-d", "cpu", "-i", str(iterations), "-w", "3", "-o", str(out)]
    flags, section_key, _ = MODES[mode]
    if traced:
        cmd.extend(flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    data = read_json_file(out, "result")
    section = data.get(section_key) or {}
    if traced and section.get("status") != "ok":
        raise SystemExit(f"tracing did not run: {section.get('error')}")
    return {"throughput": data["throughput"], "lost": section.get("lost_events")}


def measure(workload: str, pairs: int, iterations: int, folder: Path,
            mode: str = "queue") -> dict[str, Any]:
    """Interleaved pairs → per-pair ratio traced/untraced and its median."""
    plain, traced, ratios, lost = [], [], [], []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {flag: _run(workload, flag, iterations, folder, f"{mode}-{i}-{int(flag)}", mode)
               for flag in order}
        plain.append(got[False]["throughput"])
        traced.append(got[True]["throughput"])
        lost.append(got[True]["lost"])
        ratios.append(got[True]["throughput"] / got[False]["throughput"])
    median_ratio = statistics.median(ratios)
    return {"workload": workload, "mode": mode, "flags": MODES[mode][0], "pairs": pairs,
            "untraced": plain, "traced": traced, "ratios": ratios, "median_ratio": median_ratio,
            "overhead_pct": (1 - median_ratio) * 100, "target_pct": MODES[mode][2][workload],
            "lost_events": lost}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--modes", default="queue",
                        help="comma list of queue, memory, both (default: queue)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    if args.pairs < 5:
        parser.error("--pairs must be ≥ 5")
    if args.json_out:
        check_output_path(args.json_out)
    with tempfile.TemporaryDirectory(prefix="aorta-overhead-") as tmp:
        results = [measure(w, args.pairs, args.iterations, Path(tmp), m)
                   for m in modes for w in MODES[m][2]]
    print(f"{'mode':<7}{'workload':<20}{'untraced (median)':>18}{'traced (median)':>17}"
          f"{'median ratio':>14}{'overhead':>10}{'target':>8}  ratios per pair")
    for r in results:
        print(f"{r['mode']:<7}{r['workload']:<20}{statistics.median(r['untraced']):>18.2f}"
              f"{statistics.median(r['traced']):>17.2f}{r['median_ratio']:>14.3f}"
              f"{r['overhead_pct']:>9.1f}%{r['target_pct']:>7.0f}%  "
              + " ".join(f"{x:.3f}" for x in r["ratios"]))
    print(f"lost events per traced run: {[r['lost_events'] for r in results]}; cpus: {os.cpu_count()}")
    if args.json_out:
        atomic_write_json(args.json_out, {"results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
