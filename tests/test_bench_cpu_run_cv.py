"""bench/cpu_run_cv.py: runs two code states and the plain-threads control interleaved and prints
what the issue asks for (runs, mean, CV, control CV, backend/control ratio, verdict, the machine's
steal and other processes' share, load at start and end); bad input is one line, exit 2. Its
pure parts (the /proc/stat shares, the CV ratio, the verdict) are checked on known inputs."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_file_module

BENCH = Path(__file__).resolve().parents[1] / "bench" / "cpu_run_cv.py"
CONTROL = BENCH.parent / "_plain_threads_control.py"


def _module() -> ModuleType:
    return load_file_module(BENCH)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--against", "no-such-ref-anywhere"),
        ("--against", "-x"),
        ("--rounds", "1"),
        ("--iterations", "0"),
        ("--cpus", "999"),
        ("--cpus", "x"),
        ("--json", "/no/such/folder/x.json"),
        ("--configs", "no_such_workload@8"),
        ("--configs", "hetero_kernels@0"),
        ("--configs", "hetero_kernels"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    proc = _bench(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].count("error") == 1


def test_default_configurations_and_the_configs_option() -> None:
    """Without --configs the bench runs its two published configurations (docs/sweep-compare-report.md);
    the option replaces them, in order, without duplicates."""
    bench = _module()
    assert bench.CONFIGS == (("hetero_kernels", 8), ("tiny_kernel_stress", 16))
    assert bench.parse_configs("tiny_kernel_stress@16, hetero_kernels@2,tiny_kernel_stress@16") == (
        ("tiny_kernel_stress", 16),
        ("hetero_kernels", 2),
    )


@pytest.mark.slow
def test_two_code_states_side_by_side(tmp_path: Path) -> None:
    """One configuration, not a default one (the default two are checked above), keeps it to six
    fresh processes: 2 rounds × (this tree, HEAD, its control); the comparison covers it."""
    head = subprocess.run(
        ["git", "-C", str(BENCH.parent), "rev-parse", "--verify", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout: --against needs one")
    out = tmp_path / "cv.json"
    proc = _bench(
        *("--rounds", "2", "--iterations", "2", "--warmup", "1", "--against", "HEAD"),
        *("--configs", "hetero_kernels@4", "--json", str(out)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {(r["configuration"], r["code"]): r for r in data["results"]}
    assert set(rows) == {("hetero_kernels @ 4", s) for s in ("this tree", "HEAD", "control")}
    for row in rows.values():
        assert row["runs"] == len(row["throughputs"]) == len(row["machine_per_run"]) == 2
        assert row["mean"] == pytest.approx(sum(row["throughputs"]) / 2)
        # the queue threads' (the control's threads') on-CPU time over the window, > 0 when they ran
        assert len(row["on_cpu_threads"]) == 2 and all(0 < n <= 4 for n in row["on_cpu_threads"])
        for share in row["machine_per_run"]:
            assert 0 <= share["others_cpu_pct"] <= 100 and 0 <= share["steal_pct"] <= 100
    for name, per_state in data["comparison"].items():
        assert set(per_state) == {"this tree", "HEAD"}
        for entry in per_state.values():
            assert entry["control_cv_pct"] == rows[(name, "control")]["cv_pct"]
            assert entry["cv_ratio"]["ratio"] == pytest.approx(entry["cv_pct"] / entry["control_cv_pct"])
            assert entry["verdict"].startswith(("meets target", "above target"))
            assert entry["control_per_cpu_cv_pct"] == rows[(name, "control")]["per_cpu_cv_pct"]
    assert set(data["comparison"]) == set(data["paired"]) == {"hetero_kernels @ 4"}
    assert len(data["load_start"]) == len(data["load_end"]) == 3
    assert set(data["machine"]) >= {"steal_pct", "iowait_pct", "others_cpu_pct", "busy"}
    assert data["cpus"] == sorted(os.sched_getaffinity(0))
    for text in (
        "load at start:",
        "load at end:",
        "target CV ≤ 5 %",
        "paired by round",
        "backend/control",
        "steal",
    ):
        assert text in proc.stdout


@pytest.mark.slow
def test_control_runs_the_workloads_ops_and_verifies() -> None:
    """The control computes what the workload computes (its verification passes) on one thread
    per queue, one intra-op thread each, and its throughput is the workload's work / window."""
    proc = subprocess.run(
        [sys.executable, "-I", str(CONTROL), "hetero_kernels", "8", "4", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["verification_passed"] is True
    assert data["threads"] == 4 and data["torch_threads"] == 1
    assert len(data["iteration_times_ms"]) == 4
    # small hetero_kernels @ 8: 4 GEMM streams × 2 GEMMs of 384³ + 4 tiny streams × 8 adds of 1024
    work = (4 * 2 * 2.0 * 384**3 + 4 * 8 * 2.0 * 1024) * 4
    assert data["throughput"] == pytest.approx(work / (data["total_time_ms"] / 1e3) / 1e9, rel=1e-9)
    assert sum(data["iteration_times_ms"]) <= data["total_time_ms"]


@pytest.mark.slow
def test_control_pins_its_threads_as_run_cpus_does() -> None:
    """With CPUS the control's host and threads are pinned by the backend's own mapping."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    proc = subprocess.run(
        [sys.executable, "-I", str(CONTROL), "hetero_kernels", "4", "2", "1", str(cpu)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    pinned = json.loads(proc.stdout.strip().splitlines()[-1])["cpus_pinned"]
    assert pinned["host"] == [cpu] and pinned["queues"] == [[cpu]] * 4


def test_machine_share_from_known_readings() -> None:
    bench = _module()
    ticks = bench.os.sysconf("SC_CLK_TCK")
    # 1000 ticks over all cores: 500 idle, 100 iowait, 50 steal → 350 busy, of which the child used 1 s
    before = bench.CpuTimes(idle=1000, iowait=10, steal=5, total=5000, children_cpu_s=2.0)
    after = bench.CpuTimes(idle=1500, iowait=110, steal=55, total=6000, children_cpu_s=2.0 + 100 / ticks)
    share = bench.machine_share(before, after)
    assert share["steal_pct"] == pytest.approx(5.0)
    assert share["iowait_pct"] == pytest.approx(10.0)
    assert share["others_cpu_pct"] == pytest.approx(25.0)  # (350 − 100) / 1000
    # the child used more than was counted busy (tick granularity): clamped at 0, not negative
    greedy = bench.CpuTimes(idle=1500, iowait=110, steal=55, total=6000, children_cpu_s=2.0 + 400 / ticks)
    assert bench.machine_share(before, greedy)["others_cpu_pct"] == 0.0
    assert bench.machine_share(None, after)["others_cpu_pct"] is None
    now = bench.CpuTimes.now()
    assert now is not None and now.total > now.idle > 0


def test_cv_ratio_and_its_interval() -> None:
    bench = _module()
    steady = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0]
    noisy = [100.0, 120.0, 80.0, 110.0, 90.0, 100.0]
    ratio = bench.cv_ratio(noisy, steady)
    cv = lambda xs: statistics.stdev(xs) / statistics.mean(xs)  # noqa: E731
    assert ratio["ratio"] == pytest.approx(cv(noisy) / cv(steady))
    assert 1.0 < ratio["low"] < ratio["ratio"] < ratio["high"]
    same = bench.cv_ratio(steady, steady)
    assert same["low"] < 1.0 < same["high"]
    assert bench.cv_ratio([1.0], steady)["ratio"] is None
    few = bench.cv_ratio(noisy[:2], steady[:2])  # 2 runs a side: a ratio, no interval
    assert few["ratio"] == pytest.approx(cv(noisy[:2]) / cv(steady[:2])) and few["low"] is None
    # the interval is the variance-ratio (F) test's: F(5, 5) 5 % and 95 % points 0.198 and 5.05
    ratio = bench.cv_ratio(noisy, noisy)
    assert ratio["ratio"] == pytest.approx(1.0)
    assert ratio["low"] == pytest.approx(1 / 5.050**0.5, rel=0.02)
    assert ratio["high"] == pytest.approx(1 / 0.198**0.5, rel=0.02)
    low, high = bench.f_quantiles(9, 9, 0.90)  # tables: 0.315, 3.179
    assert low == pytest.approx(0.315, rel=0.02) and high == pytest.approx(3.179, rel=0.02)
    assert bench.cv_ratio(noisy, [5.0, 5.0, 5.0])["ratio"] is None  # a control without spread


def test_per_cpu_cv_leaves_out_the_cpu_each_run_got() -> None:
    bench = _module()
    # the same work per CPU-second, on 1 or 2 CPUs: throughput CV large, per-CPU CV 0
    assert bench.per_cpu_cv([100.0, 200.0, 150.0], [1.0, 2.0, 1.5]) == pytest.approx(0.0, abs=1e-9)
    got = bench.per_cpu_cv([100.0, 220.0, 90.0], [1.0, 2.0, 1.0])
    assert got == pytest.approx(statistics.stdev([100, 110, 90]) / 100 * 100)
    assert bench.per_cpu_cv([100.0, 200.0], [1.0, None]) is None  # one run with a figure
    assert bench.per_cpu_note(23.0, 3.1).endswith("the spread above is how much CPU each run got")
    assert bench.per_cpu_note(40.0, 30.0).endswith("not only the CPU each run got")
    assert bench.per_cpu_note(4.0, 3.0) == "" and bench.per_cpu_note(9.0, None) == ""


def test_verdict_tells_backend_noise_from_machine_noise() -> None:
    bench = _module()
    above = {"ratio": 3.0, "low": 1.5, "high": 6.0, "level": 0.9}
    inside = {"ratio": 1.2, "low": 0.5, "high": 2.5, "level": 0.9}
    assert bench.verdict(4.0, 2.0, above, None) == "meets target"
    floor_high = bench.verdict(12.0, 8.0, inside, None)
    assert (
        "so is the machine's floor (control CV 8.0 %)" in floor_high and "within the control's" in floor_high
    )
    backend = bench.verdict(9.0, 3.0, above, None)
    assert "the machine's floor meets it" in backend and "adds noise beyond the control's" in backend
    busy = bench.verdict(9.0, 3.0, inside, "1-min load 2.00 at start")
    assert busy.endswith("(machine busy: 1-min load 2.00 at start)")
    assert bench.verdict(None, 3.0, inside, None).startswith("n/a")
    unsure = bench.verdict(9.0, 3.0, {"ratio": 3.0, "low": None, "high": None, "level": 0.9}, None)
    assert unsure.endswith("too few runs to tell the backend's noise from the machine's")
    assert bench.busy_reason(0.0, 50.0) == "other processes used 50 % of all cores"
    assert bench.busy_reason(0.0, 1.0) is None
    assert bench.busy_reason(0.0, 0.4, 3.1) == "the hypervisor took 3.1 % of the cores (steal)"
    assert bench.busy_reason(0.0, 0.4, 0.5) is None
