"""Benchmark: the CPU backend's run-to-run noise — throughput CV over interleaved fresh runs.

Runs `run WORKLOAD --streams N -d cpu` as fresh processes (childrun.run_point, as sweeps and
`run --repeats` do), ROUNDS rounds, the configurations alternating inside each round (the order
rotating) so drift of a shared machine hits every configuration alike. Prints, per configuration,
every run's window throughput, the median with its order-statistic CI, the CV (sample std / mean)
and the spread (max − min) / median, plus the 1-min load average before each run; a CV well
above the target says the machine was busy, not that the backend is noisy — the load column tells
which. Target (issue 11): CV ≤ 5 % on an otherwise idle machine.

Usage: python bench/cpu_run_cv.py [--rounds 6] [--iterations 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

CONFIGS = (("hetero_kernels", 8), ("tiny_kernel_stress", 16))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from aorta.hw_queue_eval.analysis.stats import median_ci
    from aorta.hw_queue_eval.sweeps.childrun import run_point

    runs: dict[str, list[float]] = {f"{w} @ {s}": [] for w, s in CONFIGS}
    loads: dict[str, list[float]] = {k: [] for k in runs}
    for round_index in range(args.rounds):
        shift = round_index % len(CONFIGS)
        for workload, streams in CONFIGS[shift:] + CONFIGS[:shift]:
            name = f"{workload} @ {streams}"
            loads[name].append(os.getloadavg()[0])
            outcome = run_point([workload, "--streams", str(streams), "-d", "cpu", "-i",
                                 str(args.iterations), "-w", str(args.warmup)])
            if outcome.status != "ok" or outcome.result is None:
                print(f"round {round_index + 1} {name}: {outcome.status}: {outcome.error}")
                continue
            runs[name].append(float(outcome.result["throughput"]))
            print(f"round {round_index + 1} {name}: {runs[name][-1]:.4g} "
                  f"{outcome.result['throughput_unit']} (load {loads[name][-1]:.2f})", flush=True)
    print(f"\n{'configuration':<26} {'runs':>4} {'median [CI]':>30} {'CV':>7} {'spread':>8} "
          f"{'load 1m':>13}")
    report = {}
    for name, values in runs.items():
        if not values:
            continue
        ci = median_ci(values)
        ci_text = (f"{ci.median:.4g} [{ci.low:.4g}, {ci.high:.4g}] {ci.level:.0%}"
                   if ci.low is not None else f"{ci.median:.4g}")
        print(f"{name:<26} {len(values):>4} {ci_text:>30} {ci.cv_pct or 0:>6.1f}% "
              f"{ci.spread_pct or 0:>7.1f}% {min(loads[name]):>5.2f}–{max(loads[name]):<5.2f}")
        report[name] = {"throughputs": values, "loadavg_1m": loads[name], **ci.to_dict()}
    print(f"\ntarget: CV ≤ 5 % on an otherwise idle machine ({os.cpu_count()} cores here)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
