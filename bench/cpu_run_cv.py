"""Benchmark: the CPU backend's run-to-run noise — throughput CV over interleaved fresh runs.

Runs `run WORKLOAD --streams N -d cpu` as fresh processes (childrun.run_point, as sweeps and
`run --repeats` do), ROUNDS rounds, every (configuration, code state) pair once per round, the
order rotating between rounds so drift of a shared machine hits every pair alike. Configurations:
hetero_kernels @ 8 streams and tiny_kernel_stress @ 16 streams, plus a control: plain torch
matmuls in a fresh process without aorta, whose CV is the machine's own noise floor (a backend
cannot be shown steadier than the machine it runs on). Code states: this
tree, and with `--against REF` also the package at git REF (extracted into a private temp folder
and run the same way), so a backend change is judged side by side, under the same load.

Prints every run's window throughput with the 1-min load before it, then per configuration and
code state: runs, mean, median with its order-statistic CI, CV (sample std / mean), spread
((max − min) / median), mean window ms, and the verdict against the target (CV ≤ 5 %
on an otherwise idle machine), plus the load averages at the start and end of the bench. A CV
above target while the start load was high says the machine was busy, not that the backend is
noisy: the load lines tell which.

Usage: python bench/cpu_run_cv.py [--rounds 6] [--iterations 30] [--warmup 3] [--against REF]
       [--configs WORKLOAD@STREAMS,…] [--json FILE]
(`--configs` replaces the two configurations, e.g. `--configs hetero_kernels@8`; the control
always runs.)
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from aorta.common.atomicio import atomic_write_json, check_output_path
from aorta.common.errors import UsageError
from aorta.hw_queue_eval.analysis.stats import median_ci
from aorta.hw_queue_eval.sweeps.childrun import point_command, run_point

CONFIGS = (("hetero_kernels", 8), ("tiny_kernel_stress", 16))
TARGET_CV_PCT = 5.0
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUSY_LOAD_PER_CORE = 0.25  # start load above this × cores: "not idle" (the bench adds its own)


def extract_package(ref: str, into: str) -> str:
    """src/aorta of git REF unpacked under `into` (a private folder); the package's path."""
    if not ref or ref.startswith("-"):
        raise UsageError(f"--against {ref!r} is not a git revision; give a branch, tag or commit hash")
    probe = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise UsageError(f"--against {ref!r} is not a commit in {REPO}; give a branch, tag or commit hash")
    commit = probe.stdout.strip()
    archive = subprocess.run(
        ["git", "-C", REPO, "archive", "--format=tar", commit, "src/aorta"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Python < 3.11.4 (Debian 12's 3.11.2): only plain files and folders under `into`
            members = tar.getmembers()
            for member in members:
                parts = Path(member.name).parts
                if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                    raise UsageError(f"--against {ref!r}: unexpected archive entry {member.name!r}")
            tar.extractall(into, members=members)
    return os.path.join(into, "src", "aorta")


#: the machine's own noise floor: plain torch matmuls in a fresh process, no aorta, on every
#: core, timed like a window (after warm-up); its CV is what any CPU measurement here can reach
CONTROL = ("control: torch.mm", 0)
_CONTROL_CODE = """
import time, torch
torch.manual_seed(0)
torch.set_num_threads(max(1, __import__("os").cpu_count() or 1))
a, b = torch.rand(384, 384), torch.rand(384, 384)
for _ in range(20):
    torch.mm(a, b)
n = 400
t0 = time.perf_counter()
for _ in range(n):
    torch.mm(a, b)
dt = time.perf_counter() - t0
print(2 * 384 ** 3 * n / dt / 1e9, dt * 1e3)
"""


def config_name(workload: str, streams: int) -> str:
    """How a configuration is printed and keyed in the JSON."""
    return "control: torch.mm, no aorta" if (workload, streams) == CONTROL else f"{workload} @ {streams}"


def control_run() -> tuple[float, float] | None:
    """(GFLOPS, window ms) of one control process, or None when it failed."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _CONTROL_CODE], capture_output=True, text=True, check=False, timeout=300
    )
    if proc.returncode != 0:
        print(f"control run failed: {proc.stderr.strip()[-300:]}", flush=True)
        return None
    gflops, window_ms = (float(x) for x in proc.stdout.split())
    return gflops, window_ms


def load_text(loads: tuple[float, float, float] | None = None) -> str:
    """The 1/5/15-min load averages (now, or as read earlier)."""
    one, five, fifteen = loads or os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min, {os.cpu_count()} cores)"


def verdict(cv_pct: float | None, start_load: float) -> str:
    """CV against the target, qualified when the machine was not idle at the start."""
    if cv_pct is None:
        return "n/a (fewer than 2 runs)"
    text = "meets target" if cv_pct <= TARGET_CV_PCT else "above target"
    if start_load > BUSY_LOAD_PER_CORE * (os.cpu_count() or 1):
        text += " (machine busy)"
    return text


def summarize(values: list[float], windows: list[float], start_load: float) -> dict[str, Any]:
    """One (configuration, code state): the printed figures, as the JSON keeps them."""
    ci = median_ci(values)
    return {
        "runs": len(values),
        "mean": sum(values) / len(values),
        **ci.to_dict(),
        "mean_window_ms": sum(windows) / len(windows),
        "verdict": verdict(ci.cv_pct, start_load),
    }


def parse_configs(text: str) -> tuple[tuple[str, int], ...]:
    """`--configs hetero_kernels@8,tiny_kernel_stress@16` → ((workload, streams), …)."""
    from aorta.hw_queue_eval.workloads.registry import workload_names

    configs = []
    for item in text.split(","):
        workload, _, streams = item.strip().partition("@")
        if workload not in workload_names() or not streams.isdigit() or int(streams) < 1:
            raise UsageError(
                f"--configs: {item.strip()!r} is not WORKLOAD@STREAMS with a known workload "
                f"(e.g. hetero_kernels@8; `aorta-hwq list` names them)"
            )
        configs.append((workload, int(streams)))
    return tuple(dict.fromkeys(configs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--against",
        default=None,
        metavar="REF",
        help="also run the package at this git commit/branch, interleaved",
    )
    parser.add_argument(
        "--configs",
        default=None,
        metavar="WORKLOAD@STREAMS,…",
        help=f"configurations to run instead of {','.join(f'{w}@{s}' for w, s in CONFIGS)}",
    )
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (a CV needs two runs)")
    tmp = tempfile.mkdtemp(prefix="aorta-cv-bench-")
    try:
        args.configs = parse_configs(args.configs) if args.configs else CONFIGS
        if args.json:
            check_output_path(args.json)
        states: list[tuple[str, str | None]] = [("this tree", None)]
        if args.against:
            states.append((args.against, extract_package(args.against, tmp)))
        return run_bench(args, states)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_bench(args: argparse.Namespace, states: list[tuple[str, str | None]]) -> int:
    """The interleaved rounds, the table, the JSON."""
    pairs = [(w, s, label, pkg) for w, s in args.configs for label, pkg in states]
    pairs.append((*CONTROL, "—", None))
    start_loads = os.getloadavg()
    print(f"load at start: {load_text()}", flush=True)
    tput: dict[tuple[str, str], list[float]] = {(config_name(w, s), lab): [] for w, s, lab, _ in pairs}
    windows: dict[tuple[str, str], list[float]] = {key: [] for key in tput}
    loads: dict[tuple[str, str], list[float]] = {key: [] for key in tput}
    by_round: dict[tuple[str, str], dict[int, float]] = {key: {} for key in tput}
    for round_index in range(args.rounds):
        shift = round_index % len(pairs)
        for workload, streams, label, package in pairs[shift:] + pairs[:shift]:
            key = (config_name(workload, streams), label)
            loads[key].append(os.getloadavg()[0])
            if (workload, streams) == CONTROL:
                measured = control_run()
                if measured is not None:
                    tput[key].append(measured[0])
                    by_round[key][round_index] = measured[0]
                    windows[key].append(measured[1])
                    print(
                        f"round {round_index + 1} {key[0]:<28} [{label}]: {measured[0]:.4g} GFLOPS, "
                        f"window {measured[1]:.1f} ms (load {loads[key][-1]:.2f})",
                        flush=True,
                    )
                continue
            outcome = run_point(
                [
                    workload,
                    "--streams",
                    str(streams),
                    "-d",
                    "cpu",
                    "-i",
                    str(args.iterations),
                    "-w",
                    str(args.warmup),
                ],
                build_command=functools.partial(point_command, package_dir=package),
            )
            if outcome.status != "ok" or outcome.result is None:
                print(
                    f"round {round_index + 1} {key[0]} [{label}]: {outcome.status}: {outcome.error}",
                    flush=True,
                )
                continue
            tput[key].append(float(outcome.result["throughput"]))
            by_round[key][round_index] = tput[key][-1]
            windows[key].append(float(outcome.result["total_time_ms"]))
            print(
                f"round {round_index + 1} {key[0]:<28} [{label}]: {tput[key][-1]:.4g} "
                f"{outcome.result['throughput_unit']}, window {windows[key][-1]:.1f} ms "
                f"(load {loads[key][-1]:.2f})",
                flush=True,
            )
    end_loads = os.getloadavg()
    print(
        f"\n{'configuration':<28} {'code':<12} {'runs':>4} {'mean':>10} {'median [CI]':>34} "
        f"{'CV':>6} {'spread':>7} {'window':>9}  verdict (CV ≤ {TARGET_CV_PCT:g} %)"
    )
    report: dict[str, Any] = {
        "load_start": list(start_loads),
        "load_end": list(end_loads),
        "cpu_count": os.cpu_count(),
        "target_cv_pct": TARGET_CV_PCT,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "states": [s[0] for s in states],
        "results": [],
    }
    for key, values in tput.items():
        if len(values) < 2:
            print(f"{key[0]:<28} {key[1]:<12} {len(values):>4}  too few ok runs for a CV")
            continue
        row = summarize(values, windows[key], start_loads[0])
        ci_text = (
            f"{row['median']:.4g} [{row['low']:.4g}, {row['high']:.4g}] {row['level']:.0%}"
            if row["low"] is not None
            else f"{row['median']:.4g}"
        )
        print(
            f"{key[0]:<28} {key[1]:<12} {row['runs']:>4} {row['mean']:>10.4g} {ci_text:>34} "
            f"{row['cv_pct']:>5.1f}% {row['spread_pct']:>6.1f}% {row['mean_window_ms']:>6.1f} ms"
            f"  {row['verdict']}"
        )
        report["results"].append(
            {
                "configuration": key[0],
                "code": key[1],
                "throughputs": values,
                "window_ms": windows[key],
                "loadavg_1m": loads[key],
                **row,
            }
        )
    if len(states) == 2:
        report["paired"] = print_paired(by_round, states)
    print(
        f"\nload at start: {load_text(start_loads)}\nload at end:   {load_text()}"
        f"\n(the bench's own runs add about 1–2 to the 1-min load; a start load above "
        f"{BUSY_LOAD_PER_CORE * (os.cpu_count() or 1):.2f} marks the machine busy)"
    )
    if args.json:
        atomic_write_json(args.json, report)
    return 0


def print_paired(
    by_round: dict[tuple[str, str], dict[int, float]], states: list[tuple[str, str | None]]
) -> dict[str, Any]:
    """Per configuration, this tree / the other state within each round (same load), the median
    ratio and how many rounds each side won: the comparison that survives a busy machine."""
    mine, other = states[0][0], states[1][0]
    print(f"\npaired by round ({mine} / {other}, the two runs of a round ran back to back):")
    out: dict[str, Any] = {}
    for name in dict.fromkeys(key[0] for key in by_round):
        if (name, mine) not in by_round or (name, other) not in by_round:
            continue  # the control runs once per round, not per code state
        a, b = by_round[(name, mine)], by_round[(name, other)]
        ratios = [a[r] / b[r] for r in sorted(set(a) & set(b)) if b[r] > 0]
        if not ratios:
            continue
        ratios.sort()
        mid = len(ratios) // 2
        median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
        wins = sum(1 for r in ratios if r > 1)
        print(
            f"  {name:<28} throughput ratio median {median:.3f} (range {ratios[0]:.3f}–"
            f"{ratios[-1]:.3f}); {mine} higher in {wins} of {len(ratios)} rounds"
        )
        out[name] = {"ratios": ratios, "median_ratio": median, "rounds_higher": wins}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
