"""policy-sweep: env policies act on the CPU backend's queue pool in the child, recorded as read back;
clock/power policies are not applicable there (with the reason); a simulated GPU gets them applied
and restored; checkpoints resume; repeats are shuffled and aggregated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import load_json, run_cli, run_cli_inprocess
from fake_smi import FakeGpus, initial_state

FAST = ("-d", "cpu", "-i", "4", "-w", "1", "--size", "small")


@pytest.fixture
def fake(tmp_path: Path) -> FakeGpus:
    return FakeGpus(tmp_path)


def _points(data: dict) -> dict[str, list[dict]]:
    by_policy: dict[str, list[dict]] = {}
    for point in data["points"]:
        by_policy.setdefault(point["key"]["policy"], []).append(point)
    return by_policy


@pytest.mark.slow
def test_env_policies_change_the_cpu_queue_pool(tmp_path: Path, fake: FakeGpus) -> None:
    out = tmp_path / "p.json"
    proc = run_cli(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "8",
        "--policies",
        "baseline,multi_tenant_fair,high_queue,priority_be,xnack_off",
        *FAST,
        "-o",
        str(out),
        env=fake.env(),
    )
    assert proc.returncode == 0, proc.stderr
    data = load_json(out)
    assert data["kind"] == "policy-sweep"
    assert data["backend"] == "cpu"
    points = _points(data)
    expected_pool = {"baseline": 4, "multi_tenant_fair": 2, "high_queue": 8}
    for name, pool in expected_pool.items():
        (point,) = points[name]
        assert point["key"] == {"workload": "hetero_kernels", "streams": 8, "policy": name, "repeat": 1}
        assert point["status"] == "ok"
        result = point["result"]
        # read back from the child: the pool its backend built and the env it saw
        assert result["queue_mapping"]["pool_size"] == pool
        assert result["queue_mapping"]["queues_created"] == min(pool, 8)
        assert point["in_effect"]["queue_pool_size"] == pool
        seen = result["environment"]["env_knobs"]["GPU_MAX_HW_QUEUES"]
        assert seen == (None if name == "baseline" else str(pool))
        assert point["in_effect"]["env"]["GPU_MAX_HW_QUEUES"] == seen
        assert point["in_effect"]["env_as_requested"] is True
    pids = {points[n][0]["result"]["environment"]["pid"] for n in expected_pool}
    assert len(pids) == 3, "each policy ran in a fresh child process"
    (be,) = points["priority_be"]
    assert be["status"] == "not_applicable"
    assert be["result"] is None
    assert "not applicable on the CPU backend" in be["error"]
    assert fake.calls() == [], "nothing touched a GPU tool"
    summary = data["summary"]
    assert summary["queue_pool_changed"] is True
    assert summary["queue_pools"] == expected_pool
    rows = {r["policy"]: r for r in summary["rows"]}
    assert rows["priority_be"]["status"] == "not_applicable"
    assert rows["baseline"]["vs_baseline"] is None
    lat = rows["multi_tenant_fair"]["vs_baseline"]["latency"]
    assert lat["verdict"] == "inconclusive"  # one run per policy: noise unknown
    assert lat["base_n"] == 1
    assert lat["test_n"] == 1
    tput = rows["high_queue"]["vs_baseline"]["throughput"]
    assert tput["change_pct"] == pytest.approx(  # Δ from the same statistic as the Tput column
        (rows["high_queue"]["throughput"] / rows["baseline"]["throughput"] - 1) * 100
    )
    # HSA_XNACK does nothing on the CPU backend: not run, not ranked
    (xnack,) = points["xnack_off"]
    assert xnack["status"] == "not_applicable"
    assert xnack["result"] is None
    assert "HSA_XNACK" in xnack["error"]
    assert "CPU backend" in xnack["error"]
    assert rows["xnack_off"]["status"] == "not_applicable"
    assert summary["not_applicable"] == ["priority_be", "xnack_off"]
    assert summary["best_throughput"]["policy"] is None
    assert "not ranked: 1 run(s) per policy" in summary["best_throughput"]["text"]
    assert "Queue pool differs between policies" in proc.stdout
    assert "Best throughput: not ranked" in proc.stdout
    assert "Best P99:" in proc.stdout
    assert "Not ranked (not applicable here): priority_be, xnack_off" in proc.stdout
    assert "priority_be: not applicable on the CPU backend" in proc.stdout


@pytest.mark.slow
def test_gpu_policy_applied_around_the_child_and_restored(tmp_path: Path, fake: FakeGpus) -> None:
    out = tmp_path / "p.json"
    proc = run_cli(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policies",
        "baseline,priority_be",
        *FAST,
        "-o",
        str(out),
        *fake.state_args(),
        env=fake.env(),
        fakes=fake.gpu("amd", 1),
    )
    assert proc.returncode == 0, proc.stderr
    points = _points(load_json(out))
    (be,) = points["priority_be"]
    assert be["status"] == "ok"
    effect = be["in_effect"]
    assert effect["clock_level"] == 2
    assert effect["clock_mhz"] == 1200  # level 2/7 → step 1 of 3
    assert effect["power_limit_w"] == 150
    assert effect["gpu_verified"] is True
    assert effect["gpu_status_after"] == "restored"
    assert points["baseline"][0]["in_effect"]["clock_level"] is None
    assert fake.devices() == initial_state()
    assert fake.state_files() == []
    assert {argv[:2] == ["-d", "1"] for _tool, argv in fake.calls()} == {True}


@pytest.mark.slow
def test_repeats_shuffle_and_resume(tmp_path: Path, fake: FakeGpus) -> None:
    out = tmp_path / "p.json"
    args = (
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policies",
        "baseline,multi_tenant_fair",
        "--repeats",
        "2",
        *FAST,
        "-o",
        str(out),
    )
    first = run_cli(*args, env=fake.env())
    assert first.returncode == 0, first.stderr
    data = load_json(out)
    assert len(data["schedule"]) == 2
    assert all(sorted(r) == ["baseline", "multi_tenant_fair"] for r in data["schedule"])
    assert sorted((p["key"]["policy"], p["key"]["repeat"]) for p in data["points"]) == [
        ("baseline", 1),
        ("baseline", 2),
        ("multi_tenant_fair", 1),
        ("multi_tenant_fair", 2),
    ]
    row = {r["policy"]: r for r in data["summary"]["rows"]}["multi_tenant_fair"]
    assert row["ok"] == 2
    assert len(row["throughput_per_repeat"]) == 2
    assert row["latency_ms"]["p50"] == pytest.approx(  # median over repeats of each P50
        float(np.median([r["latency_p50_ms"] for r in row["runs"]]))
    )
    cmp = run_cli_inprocess("compare", "-b", str(out), "-t", str(out), "--json")
    assert cmp.returncode == 0, cmp.stderr
    pairs = json.loads(cmp.stdout)["tests"][0]["pairs"]
    assert sorted(p["policy"] for p in pairs) == ["baseline", "multi_tenant_fair"]
    assert {m["base_n"] for p in pairs for m in p["metrics"]} == {2}, "runs are the samples"
    again = run_cli_inprocess(*args, "--resume", env=fake.env())  # every point kept: no child
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("kept from") == 4
    fresh = run_cli_inprocess(*args, env=fake.env())
    assert fresh.returncode == 2
    assert "already holds 4 finished policy-sweep points" in fresh.stderr
    other = run_cli_inprocess(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policies",
        "baseline",
        *FAST,
        "-o",
        str(out),
        "--resume",
        env=fake.env(),
    )
    assert other.returncode == 2
    assert "made with other settings" in other.stderr


@pytest.mark.slow
def test_file_policy_env_read_back_from_the_child(tmp_path: Path, fake: FakeGpus) -> None:
    out = tmp_path / "p.json"
    example = Path(__file__).resolve().parents[1] / "examples" / "policies.toml"
    proc = run_cli(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policy-file",
        str(example),
        "--policies",
        "single_queue,wide_queues_no_sdma",
        *FAST,
        "-o",
        str(out),
        env=fake.env(),
    )
    assert proc.returncode == 0, proc.stderr
    data = load_json(out)
    points = _points(data)
    wide = points["wide_queues_no_sdma"][0]
    assert wide["result"]["environment"]["runtime_env"]["HSA_ENABLE_SDMA"] == "0"
    assert wide["in_effect"]["env"] == {"GPU_MAX_HW_QUEUES": "16", "HSA_ENABLE_SDMA": "0"}
    assert wide["in_effect"]["queue_pool_size"] == 16
    assert points["single_queue"][0]["in_effect"]["queue_pool_size"] == 1
    assert wide["policy"]["source"] == str(example)
    rows = {r["policy"]: r for r in data["summary"]["rows"]}
    assert rows["wide_queues_no_sdma"]["ignored_env"] == ["HSA_ENABLE_SDMA"]
    assert data["summary"]["reference"]["policy"] == "single_queue"  # --policies has no baseline
    assert rows["single_queue"]["vs_baseline"] is None
    assert rows["wide_queues_no_sdma"]["vs_baseline"]["throughput"] is not None


def _synthetic_point(name: str, repeat: int, tput: float, status: str = "ok") -> dict:
    """A policy-sweep point of policy `name` whose run had throughput `tput`."""
    from factories import run_result

    result = run_result(workload="w", streams=8, throughput=tput, iteration_times_ms=[100 / tput] * 5)
    return {
        "key": {"workload": "w", "streams": 8, "policy": name, "repeat": repeat},
        "status": status,
        "result": result if status == "ok" else None,
        "error": None if status == "ok" else "not applicable on the CPU backend",
        "in_effect": {"queue_pool_size": 4},
    }


def test_best_policy_only_among_applicable_ones_beyond_noise() -> None:
    """summarize on synthetic repeats: a not-applicable policy is never best; a policy within
    noise is not named; a real gain is, with its CI."""
    from aorta.hw_queue_eval.gpu.policies import BUILTIN_POLICIES
    from aorta.hw_queue_eval.sweeps.policy_sweep import summarize

    point = _synthetic_point

    names = ["baseline", "high_queue", "multi_tenant_fair", "xnack_off"]
    policies = [BUILTIN_POLICIES[n] for n in names]
    noise = (1.0, 1.02, 0.98, 1.01, 0.99)
    points = [point("baseline", r, 100 * f) for r, f in enumerate(noise, 1)]
    points += [point("multi_tenant_fair", r, 101 * f) for r, f in enumerate(noise, 1)]
    points += [point("xnack_off", r, 1, "not_applicable") for r in range(1, 6)]
    within = summarize(points + [point("high_queue", r, 99 * f) for r, f in enumerate(noise, 1)], policies)
    assert within["best_throughput"] == {
        "policy": None,
        "text": "no policy differs beyond noise from baseline",
    }
    better = summarize(points + [point("high_queue", r, 150 * f) for r, f in enumerate(noise, 1)], policies)
    best = better["best_throughput"]
    assert best["policy"] == "high_queue"
    assert best["change_pct"] == pytest.approx(50.0)
    assert best["change_ci_pct"][0] > 0
    assert "p=" in best["text"]
    assert better["not_applicable"] == ["xnack_off"]


def test_without_baseline_the_first_listed_policy_is_the_reference() -> None:
    """`--policies high_queue,multi_tenant_fair`: multi_tenant_fair is compared with high_queue
    (+50 % by construction), and the summary and the console say which policy is the reference."""
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.gpu.policies import BUILTIN_POLICIES
    from aorta.hw_queue_eval.report.policy_table import render_policy_table
    from aorta.hw_queue_eval.sweeps.policy_sweep import summarize

    noise = (1.0, 1.02, 0.98, 1.01, 0.99)
    points = [_synthetic_point("high_queue", r, 100 * f) for r, f in enumerate(noise, 1)]
    points += [_synthetic_point("multi_tenant_fair", r, 150 * f) for r, f in enumerate(noise, 1)]
    policies = [BUILTIN_POLICIES[n] for n in ("high_queue", "multi_tenant_fair")]
    summary = summarize(points, policies)
    assert summary["reference"] == {
        "policy": "high_queue",
        "why": "first listed; the sweep has no baseline policy",
    }
    rows = {r["policy"]: r for r in summary["rows"]}
    assert rows["high_queue"]["vs_baseline"] is None
    assert rows["multi_tenant_fair"]["vs_baseline"]["throughput"]["change_pct"] == pytest.approx(50.0)
    best = summary["best_throughput"]
    assert best["policy"] == "multi_tenant_fair"
    assert "vs high_queue" in best["text"]
    out = io.StringIO()
    data = {"workload": "w", "streams": 8, "backend": "cpu", "repeats": 5, "summary": summary}
    render_policy_table(data, Console(file=out, width=250))
    text = out.getvalue()
    assert "Compared against: high_queue (first listed; the sweep has no baseline policy)" in text
    assert "no baseline policy ran ok" not in text
    assert "vs high_queue" in text
    # with baseline listed (anywhere), baseline stays the reference
    listed = [BUILTIN_POLICIES[n] for n in ("high_queue", "baseline")]
    assert summarize(points, listed)["reference"]["policy"] == "baseline"


def _spec(tmp_path: Path, names: tuple[str, ...], repeats: int) -> Any:
    from aorta.hw_queue_eval.config.run_config import RunConfig
    from aorta.hw_queue_eval.gpu.control import GpuRequest
    from aorta.hw_queue_eval.gpu.policies import BUILTIN_POLICIES
    from aorta.hw_queue_eval.sweeps.policy_sweep import PolicySweepSpec

    return PolicySweepSpec(
        policies=[BUILTIN_POLICIES[n] for n in names],
        config=RunConfig(workload="w", streams=8, device="cpu", seed=7),
        base=GpuRequest(),
        target=None,
        repeats=repeats,
        output=str(tmp_path / "ps.json"),
        flags=["--state-dir", str(tmp_path)],
    )


class _FakePoints:
    """run_policy_point stand-in: a synthetic point per call (throughput by call order), the
    calls recorded; `stop_at` raises KeyboardInterrupt on that call, as Ctrl+C in a child would."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.calls: list[tuple[str, int, dict[str, Any]]] = []
        self.stop_at = stop_at

    def __call__(self, policy: Any, repeat: int, *args: Any, **kw: Any) -> dict:
        config, base, target, timeout_s, flags = args  # run_policy_point's positional arguments
        given = {
            "config": config,
            "base": base,
            "target": target,
            "timeout_s": timeout_s,
            "flags": list(flags),
        }
        self.calls.append((policy.name, repeat, {**given, **kw}))
        if len(self.calls) == self.stop_at:
            raise KeyboardInterrupt
        return _synthetic_point(policy.name, repeat, 100.0 + len(self.calls))


@pytest.fixture
def fake_points(monkeypatch: pytest.MonkeyPatch) -> Any:
    import aorta.hw_queue_eval.sweeps.policy_sweep as policy_sweep

    monkeypatch.setattr(policy_sweep, "commit", lambda: None)  # the test process keeps its signals

    def install(points: _FakePoints) -> _FakePoints:
        monkeypatch.setattr(policy_sweep, "run_policy_point", points)
        return points

    return install


def test_run_policy_sweep_walks_the_schedule_and_completes_the_file(tmp_path: Path, fake_points: Any) -> None:
    """Every (round, policy) of the spec's schedule runs once in order, each recorded as it ends
    (start reported before, point after); the summary returned is the one saved."""
    from aorta.hw_queue_eval.sweeps.policy_sweep import open_checkpoint, run_policy_sweep, summarize

    spec = _spec(tmp_path, ("baseline", "high_queue"), repeats=3)
    points = fake_points(_FakePoints())
    events: list[tuple] = []
    file = open_checkpoint(spec, resume=False)
    summary = run_policy_sweep(
        spec,
        file,
        lambda name, repeat, point, done, total: events.append(
            ("point", name, repeat, point is None, done, total)
        ),
        lambda name, repeat, done, total: events.append(("start", name, repeat, done, total)),
    )
    plan = [(name, r) for r, names in enumerate(spec.schedule(), start=1) for name in names]
    assert len(plan) == 6 and [(n, r) for n, r, _ in points.calls] == plan
    assert {tuple(names) for names in spec.schedule()} <= {
        ("baseline", "high_queue"),
        ("high_queue", "baseline"),
    }
    expected = []
    for done, (name, r) in enumerate(plan, start=1):
        expected += [("start", name, r, done, 6), ("point", name, r, False, done, 6)]
    assert events == expected
    assert points.calls[0][2] == {
        "config": spec.config,
        "base": spec.base,
        "target": None,
        "timeout_s": None,
        "flags": ["--state-dir", str(tmp_path)],
        "nproc_per_node": None,
        "open_driver": None,
        "state_dir": None,
    }
    data = load_json(spec.output)
    assert data["kind"] == "policy-sweep" and data["state"] == "complete"
    assert data["schedule"] == spec.schedule() and data["fingerprint"] == spec.header()["fingerprint"]
    assert len(data["points"]) == 6 and data["summary"] == json.loads(json.dumps(summary))
    assert summary == summarize(file.points, spec.policies)


def test_run_policy_sweep_keeps_resumed_points_and_saves_before_an_interrupt(
    tmp_path: Path, fake_points: Any
) -> None:
    """Ctrl+C on the third point: the two before it are on disk (state running) and the
    interrupt propagates; the resumed sweep reports those two as kept and runs only the rest."""
    from aorta.hw_queue_eval.sweeps.policy_sweep import open_checkpoint, run_policy_sweep

    spec = _spec(tmp_path, ("baseline", "high_queue"), repeats=2)
    first = fake_points(_FakePoints(stop_at=3))
    with pytest.raises(KeyboardInterrupt):
        run_policy_sweep(spec, open_checkpoint(spec, resume=False))
    on_disk = load_json(spec.output)
    assert on_disk["state"] == "running" and len(on_disk["points"]) == 2
    done_first = [(n, r) for n, r, _ in first.calls[:2]]

    second = fake_points(_FakePoints())
    kept: list[tuple[str, int, int]] = []
    file = open_checkpoint(spec, resume=True)
    run_policy_sweep(
        spec,
        file,
        lambda name, repeat, point, done, total: kept.append((name, repeat, done)) if point is None else None,
    )
    assert [(n, r) for n, r, _ in kept] == done_first and [d for *_, d in kept] == [1, 2]
    plan = [(name, r) for r, names in enumerate(spec.schedule(), start=1) for name in names]
    assert [(n, r) for n, r, _ in second.calls] == plan[2:]
    assert load_json(spec.output)["state"] == "complete" and len(file.points) == 4
