"""Benchmark: the CPU backend's run-to-run noise — throughput CV over interleaved fresh runs,
against a control that shows the machine's own.

Runs `run WORKLOAD --streams N -d cpu` as fresh processes (childrun.run_point, as sweeps and
`run --repeats` do), ROUNDS rounds, every (configuration, code state) pair once per round, the
order rotating between rounds so drift of a shared machine hits every pair alike. Configurations:
hetero_kernels @ 8 streams and tiny_kernel_stress @ 16 streams. Code states: this tree, and with
`--against REF` also the package at git REF (extracted into a private temp folder and run the
same way), so a backend change is judged side by side, under the same load.

The control, in every round and per configuration: the same workload's ops on plain Python
threads in a fresh process, no backend (bench/_plain_threads_control.py: same op mix, same
stream → thread mapping, one torch intra-op thread per thread, same warm-up and GC handling, a
new session like the runs). Its CV is what any Python-threaded run of those ops shows on this
machine, so backend CV / control CV is the noise the backend adds.

Around every child the bench reads /proc/stat and its own children's CPU time: the share of all
cores' time that was steal (the hypervisor ran someone else), iowait, and used by other processes
(busy time minus the child's own CPU time): machine noise, as opposed to the backend's.

Prints every run, then per configuration and code state: runs, mean, median with its
order-statistic CI, CV (sample std / mean), spread ((max − min) / median), mean window, others'
CPU share; per configuration the backend's CV, the control's, their ratio with its F interval,
the CV of throughput per CPU received (throughput / threads on CPU, which leaves out how much
of the cores the machine gave each run) for both, and the verdict against the target (CV ≤ 5 %
on an otherwise idle machine), which says whether the machine's floor (control CV) already
misses it; and the bench's steal, iowait and others' CPU share over all its runs, and the load
averages at the start and end.

`--cpus LIST` pins threads as `run --cpus LIST` does (run/cpupin.py: thread k of [host, queue 0,
queue 1, …] on the k-th listed CPU, round-robin) in every backend run, and the control's host and
threads the same way: thread placement, which decides most of tiny_kernel_stress's throughput on
2 vCPUs (docs/sweep-compare-report.md), is then the same in every run of both, so what is left is
the rest of the noise. (`--against REF` then needs a REF whose `run` has `--cpus`.)

Usage: python bench/cpu_run_cv.py [--rounds 6] [--iterations 30] [--warmup 3] [--against REF]
       [--configs WORKLOAD@STREAMS,…] [--cpus LIST] [--json FILE]
(`--configs` replaces the two configurations, e.g. `--configs hetero_kernels@8`; each keeps its
control.)
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import numpy as np

from aorta.common.atomicio import atomic_write_json, check_output_path
from aorta.common.errors import UsageError
from aorta.hw_queue_eval.analysis.stats import median_ci
from aorta.hw_queue_eval.run.cpupin import format_cpu_list, parse_cpu_list
from aorta.hw_queue_eval.sweeps.childrun import point_command, run_point

CONFIGS = (("hetero_kernels", 8), ("tiny_kernel_stress", 16))
TARGET_CV_PCT = 5.0
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONTROL_SCRIPT = os.path.join(REPO, "bench", "_plain_threads_control.py")
CONTROL = "control"  # the code label of the plain-threads control rows
BUSY_LOAD_PER_CORE = 0.25  # start load above this × cores: "not idle" (the bench adds its own)
BUSY_OTHERS_PCT = 10.0  # other processes using more than this share of all cores: "not idle"
BUSY_STEAL_PCT = 1.0  # the hypervisor running others on our vCPUs more than this: "not idle" either
F_DRAWS = 200_000  # chi-square draws for the F quantiles of the CV ratio's interval
RATIO_LEVEL = 0.90
MIN_RUNS_FOR_INTERVAL = 3  # with 2 runs a side the F interval spans orders of magnitude


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


@dataclass(frozen=True)
class CpuTimes:
    """All cores' time from /proc/stat's `cpu` line (clock ticks) and this process's children's
    CPU time (s), read at one moment."""

    idle: int
    iowait: int
    steal: int
    total: int
    children_cpu_s: float

    @classmethod
    def now(cls, stat_path: str = "/proc/stat") -> CpuTimes | None:
        """Read both now; None where /proc/stat is not readable (not Linux)."""
        try:
            with open(stat_path) as fh:
                fields = [int(x) for x in fh.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        # user nice system idle iowait irq softirq steal (guest time is already inside user)
        return cls(fields[3], fields[4], fields[7], sum(fields), usage.ru_utime + usage.ru_stime)


def machine_share(before: CpuTimes | None, after: CpuTimes | None) -> dict[str, float | None]:
    """Between two readings, in % of all cores' time: steal, iowait, and other processes' busy
    time (busy minus the children's CPU time that ended in between, clamped at 0)."""
    if before is None or after is None or after.total <= before.total:
        return {"steal_pct": None, "iowait_pct": None, "others_cpu_pct": None}
    total = after.total - before.total
    steal = after.steal - before.steal
    iowait = after.iowait - before.iowait
    busy = total - (after.idle - before.idle) - iowait - steal
    mine = (after.children_cpu_s - before.children_cpu_s) * os.sysconf("SC_CLK_TCK")
    return {
        "steal_pct": 100.0 * steal / total,
        "iowait_pct": 100.0 * iowait / total,
        "others_cpu_pct": 100.0 * max(0.0, busy - mine) / total,
    }


def f_quantiles(d1: int, d2: int, level: float, draws: int = F_DRAWS) -> tuple[float, float]:
    """The (1 − level)/2 and (1 + level)/2 quantiles of the F(d1, d2) distribution, from a fixed
    seed's chi-square draws (numpy has no F quantile function; 200 000 draws: within ~1 %)."""
    rng = np.random.default_rng(0)
    ratios = (rng.chisquare(d1, draws) / d1) / (rng.chisquare(d2, draws) / d2)
    tail = (1.0 - level) / 2
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def cv_ratio(
    backend: list[float], control: list[float], level: float = RATIO_LEVEL
) -> dict[str, float | None]:
    """Backend CV / control CV with its F interval (the variance-ratio test's, treating each
    side's runs as independent normal draws); None where a side has fewer than 2 runs or no
    spread, the interval None with fewer than MIN_RUNS_FOR_INTERVAL runs a side.

    A percentile bootstrap was tried first: from 6 runs a side it resamples mostly the same few
    values and its interval is far too narrow (it called a backend noisier than the control whose
    per-CPU CV matched the control's)."""
    out: dict[str, float | None] = {"ratio": None, "low": None, "high": None, "level": level}
    if min(len(backend), len(control)) < 2:
        return out
    a, b = np.asarray(backend, float), np.asarray(control, float)
    cv_a, cv_b = a.std(ddof=1) / a.mean(), b.std(ddof=1) / b.mean()
    if cv_b <= 0:
        return out
    ratio = float(cv_a / cv_b)
    out["ratio"] = ratio
    if min(a.size, b.size) < MIN_RUNS_FOR_INTERVAL:
        return out
    f_low, f_high = f_quantiles(a.size - 1, b.size - 1, level)
    out.update({"low": ratio / f_high**0.5, "high": ratio / f_low**0.5})
    return out


def verdict(
    cv_pct: float | None, control_cv_pct: float | None, ratio: dict[str, float | None], busy: str | None
) -> str:
    """The backend's CV against the target, told apart from the machine's floor (the control)."""
    if cv_pct is None:
        return "n/a (fewer than 2 runs)"
    if cv_pct <= TARGET_CV_PCT:
        text = "meets target"
    elif control_cv_pct is None:
        text = "above target; machine floor unknown (no control CV)"
    else:
        low, high = ratio["low"], ratio["high"]
        if low is None or high is None:
            excess = "too few runs to tell the backend's noise from the machine's"
        elif low > 1.0:
            excess = "the backend adds noise beyond the control's"
        elif high < 1.0:
            excess = "the backend is steadier than the control"
        else:
            excess = "the backend's CV is within the control's, as far as these runs can tell"
        floor = (
            f"so is the machine's floor (control CV {control_cv_pct:.1f} %): the target is not "
            "reachable on this machine now"
            if control_cv_pct > TARGET_CV_PCT
            else f"the machine's floor meets it (control CV {control_cv_pct:.1f} %)"
        )
        text = f"above target; {floor}; {excess}"
    if busy:
        text += f" (machine busy: {busy})"
    return text


def per_cpu_note(cv_pct: float | None, per_cpu_pct: float | None) -> str:
    """What the per-CPU CV says about a CV above target: whether the CPU each run got explains it."""
    if cv_pct is None or per_cpu_pct is None or cv_pct <= TARGET_CV_PCT:
        return ""
    if per_cpu_pct <= TARGET_CV_PCT:
        return " — within target per CPU: the spread above is how much CPU each run got"
    return " — above target per CPU too: not only the CPU each run got"


def busy_reason(start_load: float, others_pct: float | None, steal_pct: float | None = None) -> str | None:
    """Why the machine was not idle during the bench (its own load, or the hypervisor's), or None."""
    cores = os.cpu_count() or 1
    reasons = []
    if steal_pct is not None and steal_pct > BUSY_STEAL_PCT:
        reasons.append(f"the hypervisor took {steal_pct:.1f} % of the cores (steal)")
    if start_load > BUSY_LOAD_PER_CORE * cores:
        reasons.append(f"1-min load {start_load:.2f} at start")
    if others_pct is not None and others_pct > BUSY_OTHERS_PCT:
        reasons.append(f"other processes used {others_pct:.0f} % of all cores")
    return ", ".join(reasons) or None


def config_name(workload: str, streams: int) -> str:
    """How a configuration is printed and keyed in the JSON."""
    return f"{workload} @ {streams}"


def control_run(
    workload: str, streams: int, iterations: int, warmup: int, cwd: str, cpus: str | None = None
) -> dict[str, Any] | None:
    """One control process (same session treatment as run_point's children); its JSON, or None."""
    pin = [] if cpus is None else [cpus]
    proc = subprocess.run(
        [sys.executable, "-I", CONTROL_SCRIPT, workload, str(streams), str(iterations), str(warmup), *pin],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        start_new_session=True,
        cwd=cwd,
    )
    if proc.returncode != 0:
        print(f"control run failed: {proc.stderr.strip()[-300:]}", flush=True)
        return None
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if not data.get("verification_passed"):
        print("control run failed: its outputs did not verify", flush=True)
        return None
    return data


def load_text(loads: tuple[float, float, float] | None = None) -> str:
    """The 1/5/15-min load averages (now, or as read earlier)."""
    one, five, fifteen = loads or os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min, {os.cpu_count()} cores)"


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    """A number as `spec` formats it, or n/a."""
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def _pct(value: float | None) -> str:
    """A percentage to one decimal, or n/a."""
    return _num(value, ".1f", " %")


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def summarize(
    values: list[float], windows: list[float], shares: list[dict[str, Any]], on_cpu: list[float | None]
) -> dict[str, Any]:
    """One (configuration, code state): the printed figures, as the JSON keeps them."""
    ci = median_ci(values)
    return {
        "runs": len(values),
        "mean": sum(values) / len(values),
        **ci.to_dict(),
        "mean_window_ms": sum(windows) / len(windows),
        "mean_others_cpu_pct": _mean([s["others_cpu_pct"] for s in shares]),
        "mean_steal_pct": _mean([s["steal_pct"] for s in shares]),
        "mean_on_cpu_threads": _mean(on_cpu),
        "per_cpu_cv_pct": per_cpu_cv(values, on_cpu),
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


def per_cpu_cv(values: list[float], on_cpu: list[float | None]) -> float | None:
    """CV (%) of throughput / threads on CPU: the work per CPU-second the (queue) threads got.

    It leaves out how much CPU the machine gave each run, so for compute-bound work it is the
    part of the noise that is not the machine's share of the cores. None with fewer than 2 runs
    that have an on-CPU figure."""
    per_cpu = [v / n for v, n in zip(values, on_cpu, strict=True) if n]
    if len(per_cpu) < 2:
        return None
    return float(np.std(per_cpu, ddof=1) / np.mean(per_cpu) * 100.0)


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
    parser.add_argument(
        "--cpus",
        default=None,
        metavar="LIST",
        help="pin the host and queue threads of every backend run (run --cpus) and the "
        "control's the same way (e.g. 0,1 or 0-1): thread placement held fixed",
    )
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (a CV needs two runs)")
    if args.iterations < 1 or args.warmup < 1:
        parser.error("--iterations and --warmup must be at least 1")
    tmp = tempfile.mkdtemp(prefix="aorta-cv-bench-")
    try:
        args.configs = parse_configs(args.configs) if args.configs else CONFIGS
        if args.json:
            check_output_path(args.json)
        if args.cpus is not None:  # checked here; every child gets the text as given
            args.cpus = format_cpu_list(parse_cpu_list(args.cpus) or ())
        states: list[tuple[str, str | None]] = [("this tree", None)]
        if args.against:
            states.append((args.against, extract_package(args.against, tmp)))
        return run_bench(args, states, tmp)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: one child run: throughput, window ms, unit, on-CPU threads (None when unmeasured)
Measured = tuple[float, float, str, float | None]


def measure(
    args: argparse.Namespace, workload: str, streams: int, label: str, package: str | None, tmp: str
) -> Measured | None:
    """One child: the plain-threads control (label CONTROL) or a backend run; None when it failed."""
    if label == CONTROL:
        data = control_run(workload, streams, args.iterations, args.warmup, tmp, args.cpus)
        if data is None:
            return None
        return (
            float(data["throughput"]),
            float(data["total_time_ms"]),
            str(data["throughput_unit"]),
            data.get("on_cpu_threads"),
        )
    run_args = ["-d", "cpu", "-i", str(args.iterations), "-w", str(args.warmup)]
    if args.cpus is not None:
        run_args += ["--cpus", args.cpus]
    outcome = run_point(
        [workload, "--streams", str(streams), *run_args],
        build_command=functools.partial(point_command, package_dir=package),
    )
    if outcome.status != "ok" or outcome.result is None:
        print(f"{config_name(workload, streams)} [{label}]: {outcome.status}: {outcome.error}", flush=True)
        return None
    result = outcome.result
    return (
        float(result["throughput"]),
        float(result["total_time_ms"]),
        str(result["throughput_unit"]),
        (result.get("concurrency") or {}).get("on_cpu_queues"),
    )


def run_bench(args: argparse.Namespace, states: list[tuple[str, str | None]], tmp: str) -> int:
    """The interleaved rounds, the table, the JSON."""
    pairs = [(w, s, label, pkg) for w, s in args.configs for label, pkg in [*states, (CONTROL, None)]]
    start_loads = os.getloadavg()
    print(f"load at start: {load_text()}", flush=True)
    keys = [(config_name(w, s), lab) for w, s, lab, _ in pairs]
    tput: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    windows: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    loads: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    shares: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in keys}
    on_cpu: dict[tuple[str, str], list[float | None]] = {key: [] for key in keys}
    by_round: dict[tuple[str, str], dict[int, float]] = {key: {} for key in keys}
    bench_start = CpuTimes.now()
    for round_index in range(args.rounds):
        shift = round_index % len(pairs)
        for workload, streams, label, package in pairs[shift:] + pairs[:shift]:
            key = (config_name(workload, streams), label)
            load = os.getloadavg()[0]
            before = CpuTimes.now()
            measured = measure(args, workload, streams, label, package, tmp)
            share = machine_share(before, CpuTimes.now())
            if measured is None:
                continue
            value, window_ms, unit, threads_on_cpu = measured
            tput[key].append(value)
            on_cpu[key].append(threads_on_cpu)
            windows[key].append(window_ms)
            loads[key].append(load)
            shares[key].append(share)
            by_round[key][round_index] = value
            others = share["others_cpu_pct"]
            print(
                f"round {round_index + 1} {key[0]:<24} [{label}]: {value:.4g} {unit}, window "
                f"{window_ms:.1f} ms, threads on CPU {_num(threads_on_cpu, '.2f')} (load {load:.2f}, "
                f"others' CPU {_num(others, '.0f', ' %')})",
                flush=True,
            )
    machine = machine_share(bench_start, CpuTimes.now())
    end_loads = os.getloadavg()
    busy = busy_reason(start_loads[0], machine["others_cpu_pct"], machine["steal_pct"])
    report: dict[str, Any] = {
        "load_start": list(start_loads),
        "load_end": list(end_loads),
        "cpu_count": os.cpu_count(),
        "target_cv_pct": TARGET_CV_PCT,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "states": [s[0] for s in states],
        "cpus": sorted(os.sched_getaffinity(0)),
        "cpus_pinned": None if args.cpus is None else [int(c) for c in args.cpus.split(",")],
        "machine": {**machine, "busy": busy, "window": "from the first child's start to the last's end"},
        "results": [],
        "comparison": {},
    }
    print(
        f"\n{'configuration':<24} {'code':<12} {'runs':>4} {'mean':>10} {'median [CI]':>34} "
        f"{'CV':>6} {'spread':>7} {'window':>9} {'on CPU':>6} {'others':>7}"
    )
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for key, values in tput.items():
        if len(values) < 2:
            print(f"{key[0]:<24} {key[1]:<12} {len(values):>4}  too few ok runs for a CV")
            continue
        row = rows[key] = summarize(values, windows[key], shares[key], on_cpu[key])
        ci_text = (
            f"{row['median']:.4g} [{row['low']:.4g}, {row['high']:.4g}] {row['level']:.0%}"
            if row["low"] is not None
            else f"{row['median']:.4g}"
        )
        others = row["mean_others_cpu_pct"]
        print(
            f"{key[0]:<24} {key[1]:<12} {row['runs']:>4} {row['mean']:>10.4g} {ci_text:>34} "
            f"{row['cv_pct']:>5.1f}% {row['spread_pct']:>6.1f}% {row['mean_window_ms']:>6.1f} ms "
            f"{_num(row['mean_on_cpu_threads'], '.2f'):>6} {_num(others, '.0f', ' %'):>7}"
        )
        report["results"].append(
            {
                "configuration": key[0],
                "code": key[1],
                "throughputs": values,
                "window_ms": windows[key],
                "loadavg_1m": loads[key],
                "machine_per_run": shares[key],
                "on_cpu_threads": on_cpu[key],
                **row,
            }
        )
    print(
        "\nbackend noise vs the machine's (control: the same ops on plain threads), "
        f"target CV ≤ {TARGET_CV_PCT:g} %:"
    )
    for workload, streams in args.configs:
        name = config_name(workload, streams)
        control = rows.get((name, CONTROL))
        for label, _ in states:
            row = rows.get((name, label))
            if row is None:
                continue
            control_cv = control["cv_pct"] if control else None
            ratio = cv_ratio(tput[(name, label)], tput[(name, CONTROL)])  # None ratio without a control CV
            text = verdict(row["cv_pct"], control_cv, ratio, busy)
            ratio_text = _num(ratio["ratio"], ".2f")
            if ratio["low"] is not None:
                ratio_text += f" [{ratio['low']:.2f}, {ratio['high']:.2f}] {ratio['level']:.0%}"
            control_per_cpu = control["per_cpu_cv_pct"] if control else None
            print(
                f"  {name:<24} [{label}] CV {row['cv_pct']:.1f} %, control CV {_pct(control_cv)}, "
                f"backend/control {ratio_text}: {text}\n"
                f"  {'':<24} per CPU received (throughput / threads on CPU): CV "
                f"{_pct(row['per_cpu_cv_pct'])}, control {_pct(control_per_cpu)}"
                f"{per_cpu_note(row['cv_pct'], row['per_cpu_cv_pct'])}"
            )
            report["comparison"].setdefault(name, {})[label] = {
                "cv_pct": row["cv_pct"],
                "control_cv_pct": control_cv,
                "cv_ratio": ratio,
                "verdict": text,
                "per_cpu_cv_pct": row["per_cpu_cv_pct"],
                "control_per_cpu_cv_pct": control_per_cpu,
            }
    if len(states) == 2:
        report["paired"] = print_paired(by_round, states)

    print(
        f"\nmachine over the bench (share of all cores' time): steal {_pct(machine['steal_pct'])}, "
        f"iowait {_pct(machine['iowait_pct'])}, other processes {_pct(machine['others_cpu_pct'])}"
        f"\nload at start: {load_text(start_loads)}\nload at end:   {load_text(end_loads)}"
        f"\n(the bench's own runs add about 1–2 to the 1-min load; a start load above "
        f"{BUSY_LOAD_PER_CORE * (os.cpu_count() or 1):.2f} or other processes above "
        f"{BUSY_OTHERS_PCT:g} % of the cores or steal above {BUSY_STEAL_PCT:g} % mark the machine busy)"
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
            continue
        a, b = by_round[(name, mine)], by_round[(name, other)]
        ratios = [a[r] / b[r] for r in sorted(set(a) & set(b)) if b[r] > 0]
        if not ratios:
            continue
        ratios.sort()
        mid = len(ratios) // 2
        median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
        wins = sum(1 for r in ratios if r > 1)
        print(
            f"  {name:<24} throughput ratio median {median:.3f} (range {ratios[0]:.3f}–"
            f"{ratios[-1]:.3f}); {mine} higher in {wins} of {len(ratios)} rounds"
        )
        out[name] = {"ratios": ratios, "median_ratio": median, "rounds_higher": wins}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
