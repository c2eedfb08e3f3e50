"""compare: known outcomes on synthetic sample sets, pairing by key, bad input, upstream layouts.

The command runs in-process (main(), same exit code and streams as a real process:
test_cli.test_inprocess_helper_matches_a_real_process); a real process is not what these check."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli_inprocess as run_cli
from factories import queue_section, run_result


def _run(samples, streams=4, workload="hetero_kernels", size="small", work=1e9, ebpf=None):
    """A run whose iterations took `samples` ms (tests/factories.py: the layout a run writes)."""
    return run_result(
        workload=workload,
        streams=streams,
        iteration_times_ms=[float(x) for x in samples],
        size=size,
        work_per_iteration=work,
        ebpf_queue_metrics=ebpf,
    )


def _noisy(median, n, seed):
    return np.random.default_rng(seed).normal(median, median * 0.02, n)


def _repeated(medians, streams=4, workload="hetero_kernels", seed=0, **kw):
    """A `run --repeats` file: one run per median (iteration times around it), built with the
    same helper the CLI uses."""
    from aorta.hw_queue_eval.analysis.summaries import representative
    from aorta.hw_queue_eval.sweeps.childrun import PointOutcome
    from aorta.hw_queue_eval.sweeps.repeats import RepeatOutcome, repeats_block

    results = [
        _run(_noisy(m, 20, seed + i), streams=streams, workload=workload, **kw) for i, m in enumerate(medians)
    ]
    outcomes = [RepeatOutcome(i + 1, PointOutcome("ok", r, None, 1.0, 0)) for i, r in enumerate(results)]
    combined = dict(results[representative(results)])
    combined["repeats"] = repeats_block(results, outcomes, len(results))
    return combined


def _write(tmp_path: Path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _compare(*args):
    proc = run_cli("compare", *args, "--json")
    data = json.loads(proc.stdout) if proc.returncode in (0, 1) else None
    return proc, data


def _verdicts(data, test=0):
    return {m["metric"]: m["verdict"] for p in data["tests"][test]["pairs"] for m in p["metrics"]}


BASE5 = [10.0, 10.3, 9.8, 10.1, 9.9]  # iteration-time medians of five runs (ms)


def test_clear_regression_over_runs_exits_1(tmp_path):
    base = _write(tmp_path, "b.json", _repeated(BASE5, seed=1))
    test = _write(tmp_path, "t.json", _repeated([m * 1.3 for m in BASE5], seed=10))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 1
    assert _verdicts(data) == {"throughput": "regression", "iteration time P50": "regression"}
    pair = data["tests"][0]["pairs"][0]
    assert pair["runs"] == [5, 5]
    tput = pair["metrics"][0]
    assert tput["higher_is_better"] is True
    assert tput["base_n"] == 5
    assert tput["test_n"] == 5
    assert tput["p_value"] < 0.05
    low, high = tput["change_ci_pct"]
    assert low <= tput["change_pct"] <= high < 0  # the CI of the change excludes 0
    assert 0.9 < tput["change_ci_level"] <= 1.0


def test_clear_improvement_over_runs_exits_0(tmp_path):
    base = _write(tmp_path, "b.json", _repeated(BASE5, seed=1))
    test = _write(tmp_path, "t.json", _repeated([m * 0.75 for m in BASE5], seed=10))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0
    assert set(_verdicts(data).values()) == {"improvement"}


def test_one_run_per_side_is_inconclusive_whatever_the_change(tmp_path):
    """Iterations of one process are not independent: 30 % apart with tight iterations is still
    one run against one run."""
    base = _write(tmp_path, "b.json", _run(_noisy(10, 40, 1)))
    test = _write(tmp_path, "t.json", _run(_noisy(13, 40, 2)))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0
    assert set(_verdicts(data).values()) == {"inconclusive"}
    m = data["tests"][0]["pairs"][0]["metrics"][0]
    assert "one run per side" in m["reason"]
    assert "--repeats" in m["reason"]
    assert m["change_pct"] < -15  # the change is still reported
    proc = run_cli("compare", "-b", base, "-t", test)
    assert "RESULT: inconclusive" in proc.stdout
    assert "--repeats" in proc.stdout


def test_three_runs_unchanged_or_inconclusive_never_significant(tmp_path):
    base = _write(tmp_path, "b.json", _repeated([10.0, 10.2, 9.9], seed=1))
    same = _write(tmp_path, "s.json", _repeated([10.1, 9.95, 10.05], seed=5))
    far = _write(tmp_path, "f.json", _repeated([20.0, 20.1, 20.2], seed=9))
    proc, data = _compare("-b", base, "-t", same, "-t", far)
    assert proc.returncode == 0
    assert set(_verdicts(data, 0).values()) == {"unchanged"}
    assert set(_verdicts(data, 1).values()) == {"inconclusive"}
    assert "use ≥ 4 per side" in data["tests"][1]["pairs"][0]["metrics"][0]["reason"]


WIDE5 = [5.0, 7.5, 10.0, 12.5, 15.0]  # iteration-time medians spread ±50 %


def test_identical_wide_noise_pair_is_inconclusive_not_unchanged(tmp_path):
    """Ground truth: both sides are the same five ±50 % runs (the audit's case: CI about
    [−50, +100] %, p = 1). "Unchanged" needs the change's CI inside ±5 %: it is inconclusive,
    the RESULT line does not claim "no regression", and the hint asks for more than 5 runs."""
    base = _write(tmp_path, "b.json", _repeated(WIDE5, seed=1))
    test = _write(tmp_path, "t.json", _repeated(WIDE5[::-1], seed=20))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0  # no regression was found; the RESULT line says inconclusive
    assert _verdicts(data) == {"throughput": "inconclusive", "iteration time P50": "inconclusive"}
    tput = data["tests"][0]["pairs"][0]["metrics"][0]
    assert abs(tput["change_pct"]) < 1
    assert tput["change_ci_pct"][0] < -40 and tput["change_ci_pct"][1] > 80
    assert tput["runs_needed"] > 5
    out = run_cli("compare", "-b", base, "-t", test).stdout
    result = next(line for line in out.splitlines() if line.startswith("RESULT:"))
    assert result.startswith("RESULT: inconclusive")
    assert "no regression" not in result
    repeats = [int(n) for n in re.findall(r"--repeats (\d+)", result)]
    needed = max(m["runs_needed"] for m in data["tests"][0]["pairs"][0]["metrics"])
    assert repeats == [needed]  # the largest estimate, never the 5 both sides already have


def test_identical_tight_pair_is_unchanged(tmp_path):
    base = _write(tmp_path, "b.json", _repeated(BASE5, seed=1))
    test = _write(tmp_path, "t.json", _repeated(BASE5[::-1], seed=20))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0
    assert set(_verdicts(data).values()) == {"unchanged"}
    for m in data["tests"][0]["pairs"][0]["metrics"]:
        assert m["change_ci_pct"][0] > -5 and m["change_ci_pct"][1] < 5
    out = run_cli("compare", "-b", base, "-t", test).stdout
    assert "RESULT: no regression beyond 5%" in out


def test_rerun_hint_never_repeats_the_count_the_sides_have(tmp_path):
    """1 vs 1 and 3 vs 3: the fewest runs per side that can reach p < 0.05 (4, from the exact U
    distribution), not a literal; never the count the sides already have."""
    from aorta.hw_queue_eval.analysis.exact_u import MIN_RUNS_TO_DETECT

    one_b = _write(tmp_path, "1b.json", _run(_noisy(10, 40, 1)))
    one_t = _write(tmp_path, "1t.json", _run(_noisy(10, 40, 2)))
    three_b = _write(tmp_path, "3b.json", _repeated([10.0, 10.2, 9.9], seed=1))
    three_t = _write(tmp_path, "3t.json", _repeated([20.0, 20.1, 20.2], seed=9))
    for base, test, have in ((one_b, one_t, 1), (three_b, three_t, 3)):
        out = run_cli("compare", "-b", base, "-t", test).stdout
        result = next(line for line in out.splitlines() if line.startswith("RESULT:"))
        assert result.startswith("RESULT: inconclusive")
        assert re.findall(r"--repeats (\d+)", result) == [str(MIN_RUNS_TO_DETECT)]
        assert have < MIN_RUNS_TO_DETECT


def test_measured_noise_floor_decides_a_single_run(tmp_path):
    """A base with 5 runs carries its run-to-run spread; one test run beyond it is a verdict,
    one inside it is not."""
    base = _write(tmp_path, "b.json", _repeated(BASE5, seed=1))  # spread ≈ 5 %
    slow = _write(tmp_path, "slow.json", _run(_noisy(14, 20, 3)))
    near = _write(tmp_path, "near.json", _run(_noisy(10.2, 20, 4)))
    proc, data = _compare("-b", base, "-t", slow, "-t", near)
    assert proc.returncode == 1
    slow_tput = data["tests"][0]["pairs"][0]["metrics"][0]
    assert slow_tput["verdict"] == "regression"
    assert "noise floor" in slow_tput["reason"]
    assert 3 < slow_tput["noise_floor_pct"] < 10
    assert _verdicts(data, 1)["throughput"] in ("inconclusive", "unchanged")


def test_threshold_option_changes_the_verdict(tmp_path):
    base = _write(tmp_path, "b.json", _repeated(BASE5, seed=1))
    test = _write(tmp_path, "t.json", _repeated([m * 1.12 for m in BASE5], seed=10))
    assert _compare("-b", base, "-t", test, "--threshold", "5")[0].returncode == 1
    assert _compare("-b", base, "-t", test, "--threshold", "20")[0].returncode == 0


def _sweep(runs, repeats=False):
    return {
        "schema_version": 1,
        "kind": "sweep",
        "workload": "hetero_kernels",
        "points": [
            {
                "key": {
                    "workload": r["workload_name"],
                    "streams": r["stream_count"],
                    **({"repeat": i} if repeats else {}),
                },
                "status": "ok",
                "result": r,
            }
            for i, r in enumerate(runs)
        ],
    }


def test_sweeps_pair_by_stream_count_not_position_and_group_repeats(tmp_path):
    def runs(streams, medians, seed):
        return [_run(_noisy(m, 20, seed + i), streams=streams) for i, m in enumerate(medians)]

    base = _write(
        tmp_path, "b.json", _sweep(runs(1, BASE5, 1) + runs(2, [2 * m for m in BASE5], 20), repeats=True)
    )
    # reversed order; the 2-stream point regressed, the 1-stream point did not
    test = _write(
        tmp_path,
        "t.json",
        _sweep(runs(2, [3 * m for m in BASE5], 40) + runs(1, BASE5[::-1], 60), repeats=True),
    )
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 1
    pairs = data["tests"][0]["pairs"]
    assert [p["runs"] for p in pairs] == [[5, 5], [5, 5]]
    by_streams = {p["streams"]: p["metrics"][0]["verdict"] for p in pairs}
    assert by_streams == {1: "unchanged", 2: "regression"}


def test_upstream_sweep_with_old_latency_layout(tmp_path):
    old = []
    for streams, median in ((1, 10.0), (2, 20.0)):
        samples = list(_noisy(median, 30, streams))
        old.append(
            {
                "workload_name": "hetero_kernels",
                "stream_count": streams,
                "throughput": 1.0,
                "throughput_unit": "GFLOPS",
                "iteration_times_ms": samples,
                "latency": {"p50_ms": float(np.median(samples)), "p95_ms": 1.0, "p99_ms": 2.0},
                "ebpf_vs_cuda": {"measurement_accuracy": 0.8},
            }
        )
    base = _write(tmp_path, "upstream.json", {"results": old})
    test = _write(tmp_path, "t.json", _sweep([_run(_noisy(20, 30, 9), streams=2)]))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0, proc.stderr
    pair = data["tests"][0]["pairs"][0]
    assert pair["streams"] == 2
    assert pair["runs"] == [1, 1]
    p50 = next(m for m in pair["metrics"] if m["metric"] == "iteration time P50")
    assert p50["verdict"] == "inconclusive"
    assert p50["base_median"] == pytest.approx(float(np.median(old[1]["iteration_times_ms"])))
    p99 = next(m for m in pair["info"] if m["metric"] == "iteration time P99")
    assert p99["base_median"] == 2.0
    assert p99["verdict"] is None
    assert data["tests"][0]["only_in_base"] == ["hetero_kernels @ 1 streams"]


def _traced(p99_us, metrics=None):
    """An ebpf_queue_metrics section as the engine writes it (summary, families, bookkeeping):
    cpu_sched heads it; amdgpu attached nothing."""
    section = queue_section(
        "cpu_sched", p99_us=p99_us, metrics=metrics, other_families={"amdgpu": {"submits": 0, "jobs": 0}}
    )
    section.update(
        window={
            "start_monotonic_ns": 123456789 + p99_us,
            "stop_monotonic_ns": 223456789,
            "duration_ms": 100.0,
        },
        attach_s=0.4 + p99_us / 1000,
        probe_cost={"ns": p99_us},
    )
    return section


def test_ebpf_diff_shows_only_measured_comparable_values(tmp_path):
    fams = {"wakeups": 100, "runq_p99_us": 8.0}
    fams_t = {"wakeups": 120, "runq_p99_us": 9.0}
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1), ebpf=_traced(40, fams)))
    test = _write(tmp_path, "t.json", _run(_noisy(10, 30, 2), ebpf=_traced(50, fams_t)))
    untraced = _write(tmp_path, "u.json", _run(_noisy(10, 30, 3)))
    _, data = _compare("-b", base, "-t", test)
    rows = data["tests"][0]["pairs"][0]["ebpf"]["rows"]
    keys = [r["key"] for r in rows]
    assert keys[0] == "submit_to_dispatch_p99_us"  # summary figures first, the largest change first
    assert rows[0]["change_pct"] == 25.0
    assert set(keys) == {
        "total_submissions",
        "total_dispatches",
        "submit_to_dispatch_avg_us",
        "submit_to_dispatch_p99_us",
        "families.cpu_sched.metrics.wakeups",
        "families.cpu_sched.metrics.runq_p99_us",
    }  # no timestamps, no 0 → 0 (lost_events), the summary once (not again under the family),
    # nothing from the family that did not attach, no bookkeeping (attach_s, probe_cost, window)
    _, data = _compare("-b", untraced, "-t", test)
    note = data["tests"][0]["pairs"][0]["ebpf"]["note"]
    assert "tracing overhead" in note
    assert "NOT distinguishable" in note
    assert "bench/ebpf_overhead.py" in note
    # the interpreter aorta runs under (its venv has aorta and torch), not `PYTHONPATH=src python`
    assert f"sudo {shlex.quote(sys.executable)} bench/ebpf_overhead.py" in note
    assert "PYTHONPATH" not in note


def test_ebpf_lines_capped_unless_verbose(tmp_path):
    many = {f"m{i:02d}": float(i + 1) for i in range(25)}
    many_t = {f"m{i:02d}": float(i + 2) for i in range(25)}
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1), ebpf=queue_section(metrics=many)))
    test = _write(tmp_path, "t.json", _run(_noisy(10, 30, 2), ebpf=queue_section(metrics=many_t)))
    short = run_cli("compare", "-b", base, "-t", test).stdout
    full = run_cli("compare", "-b", base, "-t", test, "--verbose").stdout
    # 29 values: the 4 summary figures (first) and the family's 25
    assert sum("ebpf_queue_metrics." in line for line in short.splitlines()) == 10
    assert "19 more eBPF values (--verbose shows all)" in short
    assert sum("ebpf_queue_metrics." in line for line in full.splitlines()) == 29
    assert sum("cpu_sched.metrics.m" in line for line in full.splitlines()) == 25


@pytest.mark.parametrize(
    ("test_data", "message"),
    [
        (_run(_noisy(10, 30, 2), workload="moe", streams=4), "nothing to pair"),
        (_run(_noisy(10, 30, 2), size="large"), "not comparable"),
        ({"foo": 1}, "not an aorta result"),
        ({"schema_version": 1, "kind": "policy_weights"}, "unknown result kind"),
        ("not json", "not valid JSON"),
    ],
)
def test_bad_or_mismatched_files_exit_2(tmp_path, test_data, message):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    path = tmp_path / "t.json"
    path.write_text(test_data if isinstance(test_data, str) else json.dumps(test_data))
    proc = run_cli("compare", "-b", base, "-t", str(path))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_markdown_output(tmp_path):
    base = _write(tmp_path, "b.json", _repeated(BASE5, seed=1))
    test = _write(tmp_path, "t.json", _repeated([m * 1.3 for m in BASE5], seed=10))
    proc = run_cli("compare", "-b", base, "-t", test, "--markdown")
    assert proc.returncode == 1
    assert "| Point | Metric |" in proc.stdout
    assert "**regression**" in proc.stdout
    assert proc.stdout.rstrip().endswith("runs per point: 5)")


def test_policy_sweeps_pair_by_policy(tmp_path):
    def policy_file(values):
        return {
            "schema_version": 1,
            "kind": "policy_sweep",
            "points": [
                {
                    "key": {"workload": "moe", "streams": 16, "policy": name, "repeat": r + 1},
                    "status": "ok",
                    "result": _run(_noisy(med * f, 30, 10 * i + r), streams=16, workload="moe"),
                }
                for i, (name, med) in enumerate(values)
                for r, f in enumerate((1.0, 1.02, 0.99, 1.01, 0.98))
            ],
        }

    base = _write(tmp_path, "b.json", policy_file([("baseline", 10), ("high_queue", 20)]))
    test = _write(tmp_path, "t.json", policy_file([("high_queue", 20), ("baseline", 13)]))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 1
    verdicts = {p["policy"]: p["metrics"][0]["verdict"] for p in data["tests"][0]["pairs"]}
    assert verdicts == {"baseline": "regression", "high_queue": "unchanged"}


def test_same_point_twice_without_repeat_numbers_is_exit_2(tmp_path):
    twice = _write(
        tmp_path, "t.json", _sweep([_run(_noisy(10, 30, 1), streams=2), _run(_noisy(10, 30, 2), streams=2)])
    )
    proc = run_cli("compare", "-b", twice, "-t", twice)
    assert proc.returncode == 2
    assert "appears twice" in proc.stderr


def test_ebpf_diff_shows_coverage_once_not_its_legacy_alias():
    """accuracy_pct is coverage_pct under the guide's name: a compare diffs the figure once."""
    from aorta.hw_queue_eval.analysis.compare import EBPF_SKIP

    assert EBPF_SKIP.search("accuracy_pct")
    assert not EBPF_SKIP.search("coverage_pct")


FIXTURE_RUN = Path(__file__).parent / "fixtures" / "results" / "run.json"


def test_a_subnormal_base_throughput_gives_standard_json(tmp_path):
    """5e-324 as the base throughput: the change over it would be infinite; --json and -o must
    stay standard JSON (no Infinity) with the change shown as none."""
    doc = json.loads(FIXTURE_RUN.read_text())
    doc["throughput"] = 5e-324
    base = tmp_path / "base.json"
    base.write_text(json.dumps(doc))
    out = tmp_path / "c.json"
    proc = run_cli("compare", "-b", str(base), "-t", str(FIXTURE_RUN), "--json", "-o", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    assert "Infinity" not in proc.stdout
    json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    assert json.loads(out.read_text()) == json.loads(proc.stdout)


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1.5e400"])
def test_a_number_that_overflows_is_refused_like_infinity(tmp_path, number):
    text = FIXTURE_RUN.read_text().replace('"throughput": ', f'"throughput": {number}, "was": ', 1)
    base = tmp_path / "base.json"
    base.write_text(text)
    proc = run_cli(
        "compare", "-b", str(base), "-t", str(FIXTURE_RUN), "--json", "-o", str(tmp_path / "c.json")
    )
    assert proc.returncode == 2, proc.stderr
    assert "too large" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c.json").exists()
