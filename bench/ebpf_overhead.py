"""Tracer overhead: throughput with and without tracing, interleaved rounds, median ratio.

Each round runs `run WORKLOAD -d cpu` as fresh processes three ways, the order rotating between
rounds so drift favours no side: `plain` (no flag), `untraced` (`--ebpf-trace` with bpftrace made
unavailable: the same code path and imports, nothing traced) and `traced`. Tracing modes
(`--modes`): queue (--ebpf-trace), memory (--ebpf-memory-trace), both (one bpftrace process).
The headline ratio is traced/untraced: on this CPU backend the throughput of a fresh process
also moves with what
Python imported after torch (importing unrelated stdlib modules moved hetero_kernels by ~15 % on
the development VM), which is not tracer cost; traced/plain is printed beside it. Throughput
comes from the result JSON (measurement window only). Targets: queue ≤ 2 % (hetero_kernels),
≤ 5 % (tiny_kernel_stress); memory and both ≤ 3 % (hetero_kernels). Time inside the BPF programs
(queue mode, the doorbell design): ≤ 1 % of one CPU (hetero_kernels), ≤ 3 % (tiny_kernel_stress).
Throughput ratios are noisy on a shared machine, so the bench also asks the kernel how long it
spent inside the tracer's BPF programs (BPF_ENABLE_STATS while the bench runs, fdinfo run_time_ns)
and reports that as a share of the window: a noise-free upper bound of the in-kernel probe cost.

Usage: sudo .venv/bin/python bench/ebpf_overhead.py [--pairs 5] [--iterations 40]
       [--modes queue,memory,both] [--no-bpf-stats] [--json FILE]
(the venv scripts/setup.sh made has aorta and torch; a plain `sudo python` has neither)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aorta.common.atomicio import atomic_write_json, check_output_path, read_json_file

_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
_BPF_ENABLE_STATS, _BPF_STATS_RUN_TIME = 32, 0


@contextlib.contextmanager
def bpf_run_time_stats() -> Any:
    """Let the kernel time BPF programs while this is open (BPF_ENABLE_STATS fd: released on exit
    or crash, unlike the kernel.bpf_stats_enabled sysctl). Yields whether it worked."""
    nr = _BPF_SYSCALL.get(platform.machine())
    fd = -1
    if nr is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(struct.pack("I", _BPF_STATS_RUN_TIME) + b"\0" * 124)
        fd = libc.syscall(nr, _BPF_ENABLE_STATS, attr, 128)
    try:
        yield fd >= 0
    finally:
        if fd >= 0:
            os.close(fd)


STREAMS = {"hetero_kernels": 8, "tiny_kernel_stress": 16}
#: tracing mode → (flags, result section read for status/lost events/probe cost, targets in %)
TRACE_MODES: dict[str, tuple[list[str], str, dict[str, float]]] = {
    "queue": (["--ebpf-trace"], "ebpf_queue_metrics", {"hetero_kernels": 2.0, "tiny_kernel_stress": 5.0}),
    "memory": (["--ebpf-memory-trace"], "ebpf_memory_metrics", {"hetero_kernels": 3.0}),
    "both": (["--ebpf-trace", "--ebpf-memory-trace"], "ebpf_memory_metrics", {"hetero_kernels": 3.0}),
}
VARIANTS = ("plain", "same_path", "traced")
#: queue mode: time inside the BPF programs as % of the window (one CPU)
BPF_TIME_TARGETS = {"hetero_kernels": 1.0, "tiny_kernel_stress": 3.0}


def _run(
    workload: str, variant: str, iterations: int, folder: Path, tag: str, mode: str = "queue"
) -> dict[str, Any]:
    """One fresh `run` process: plain (no flag), same_path (the mode's flags with bpftrace made
    unavailable: identical code path and imports, no tracing) or traced."""
    flags, section_key, _ = TRACE_MODES[mode]
    out = folder / f"{workload}-{tag}.json"
    cmd = [
        sys.executable,
        "-m",
        "aorta.hw_queue_eval",
        "run",
        workload,
        "--streams",
        str(STREAMS[workload]),
        "-d",
        "cpu",
        "-i",
        str(iterations),
        "-w",
        "3",
        "-o",
        str(out),
    ]
    env = dict(os.environ)
    if variant != "plain":
        cmd.extend(flags)
    if variant == "same_path":  # no bpftrace on PATH: the tracer's code path, tracing off
        env["PATH"] = os.pathsep.join(
            d
            for d in env.get("PATH", "").split(os.pathsep)
            if d and not os.path.exists(os.path.join(d, "bpftrace"))
        )
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    data = read_json_file(out, "result")
    section = data.get(section_key) or {}
    if variant == "traced" and section.get("status") != "ok":
        raise SystemExit(f"tracing did not run: {section.get('error')}")
    cost = section.get("probe_cost") or {}
    return {
        "throughput": data["throughput"],
        "lost": section.get("lost_events"),
        "probe_ms": cost.get("run_time_ms"),
        "window_ms": data["total_time_ms"],
    }


def measure(workload: str, pairs: int, iterations: int, folder: Path, mode: str = "queue") -> dict[str, Any]:
    """Interleaved rounds (order rotates) → per-round ratios and their medians."""
    got: dict[str, list[float]] = {v: [] for v in VARIANTS}
    lost, probe_share = [], []
    for i in range(pairs):
        order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]
        for variant in order:
            r = _run(workload, variant, iterations, folder, f"{mode}-{i}-{variant}", mode)
            got[variant].append(r["throughput"])
            if variant == "traced":
                lost.append(r["lost"])
                if r["probe_ms"] is not None:
                    probe_share.append(100 * r["probe_ms"] / r["window_ms"])
    ratios = [t / u for t, u in zip(got["traced"], got["same_path"], strict=True)]
    plain_ratios = [t / u for t, u in zip(got["traced"], got["plain"], strict=True)]
    median_ratio = statistics.median(ratios)
    return {
        "workload": workload,
        "mode": mode,
        "flags": TRACE_MODES[mode][0],
        "pairs": pairs,
        "plain": got["plain"],
        "untraced": got["same_path"],
        "traced": got["traced"],
        "ratios": ratios,
        "median_ratio": median_ratio,
        "overhead_pct": (1 - median_ratio) * 100,
        "target_pct": TRACE_MODES[mode][2][workload],
        "ratios_vs_plain": plain_ratios,
        "median_ratio_vs_plain": statistics.median(plain_ratios),
        "lost_events": lost,
        "probe_time_pct_of_window": probe_share,
        "probe_time_median_pct": statistics.median(probe_share) if probe_share else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument(
        "--no-bpf-stats",
        action="store_true",
        help="do not let the kernel time BPF programs (timing itself costs a little)",
    )
    parser.add_argument("--modes", default="queue", help="comma list of queue, memory, both (default: queue)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in TRACE_MODES for m in modes):
        parser.error(f"--modes: choose from {', '.join(TRACE_MODES)}")
    if args.pairs < 5:
        parser.error("--pairs must be ≥ 5 (rounds)")
    if args.json_out:
        check_output_path(args.json_out)
    stats = contextlib.nullcontext(False) if args.no_bpf_stats else bpf_run_time_stats()
    with tempfile.TemporaryDirectory(prefix="aorta-overhead-") as tmp, stats as timed:
        results = [
            measure(w, args.pairs, args.iterations, Path(tmp), m) for m in modes for w in TRACE_MODES[m][2]
        ]
    print(
        f"{'mode':<7}{'workload':<20}{'untraced (median)':>18}{'traced (median)':>17}{'median ratio':>14}"
        f"{'overhead':>10}{'target':>8}{'vs plain':>10}  ratios per round (traced/untraced)"
    )
    for r in results:
        print(
            f"{r['mode']:<7}{r['workload']:<20}{statistics.median(r['untraced']):>18.4g}"
            f"{statistics.median(r['traced']):>17.4g}{r['median_ratio']:>14.3f}"
            f"{r['overhead_pct']:>9.1f}%{r['target_pct']:>7.0f}%"
            f"{r['median_ratio_vs_plain']:>10.3f}  " + " ".join(f"{x:.3f}" for x in r["ratios"])
        )
    print(f"lost events per traced run: {[r['lost_events'] for r in results]}; cpus: {os.cpu_count()}")
    why_not = (
        "--no-bpf-stats"
        if args.no_bpf_stats
        else "BPF_ENABLE_STATS failed"
        if not timed
        else "fdinfo unreadable"
    )
    for r in results:
        share = r["probe_time_median_pct"]
        target = BPF_TIME_TARGETS.get(r["workload"]) if r["mode"] == "queue" else None
        goal = f" (target ≤ {target:g}%)" if target is not None else ""
        print(
            f"{r['mode']} {r['workload']}: time inside the BPF programs (all hits since attach, warm-up "
            f"included) = median {share:.2f}% of the window (one CPU){goal}"
            if share is not None
            else f"{r['mode']} {r['workload']}: BPF run time not measured ({why_not})"
        )
    if args.json_out:
        atomic_write_json(args.json_out, {"results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
