"""Switch overhead vs host launch starvation on the CPU backend, against a known launch delay.

tests/launch_delay_workload.py runs two streams on one queue; per iteration one switch is queued
ahead (a ready gap) and, with a delay, two switches wait a known time for the host to launch
their op. Ground truth: the wait of every starved gap is the injected delay, their number is
2 per iteration, and a switch that was queued ahead costs microseconds, far below the delay.
"""

from __future__ import annotations

import pytest

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.ops.loghist import RELATIVE_ERROR
from aorta.hw_queue_eval.run import harness
from aorta.hw_queue_eval.workloads import registry
from launch_delay_workload import DELAY_NS, OPS_PER_PHASE, LaunchDelay

pytestmark = pytest.mark.serial  # a timing ground truth (the injected delay): the machine to itself

ITERATIONS = 30
DELAY_MS = DELAY_NS / 1e6


def _run(monkeypatch: pytest.MonkeyPatch, delay_ns: int, row_cap: int | None) -> dict:
    monkeypatch.setitem(registry._WORKLOADS, "launch_delay", LaunchDelay)
    monkeypatch.setattr(LaunchDelay, "delay_ns", delay_ns)
    monkeypatch.setenv("GPU_MAX_HW_QUEUES", "1")  # both streams on one queue: every gap shared
    if row_cap is not None:  # past the cap the figures come from the fold (ops/opfold.py)
        monkeypatch.setattr(harness, "MAX_STORED_OPS", row_cap)
    result = harness.run_benchmark(
        RunConfig("launch_delay", 2, iterations=ITERATIONS, warmup=2, device="cpu")
    ).to_dict()
    assert result["queue_mapping"]["stream_to_queue"] == [0, 0]
    folded = result["op_intervals"]["truncated"]
    assert folded is (row_cap is not None)
    return result


@pytest.mark.parametrize("row_cap", [None, 50], ids=["rows", "folded"])
def test_starved_switches_carry_the_launch_delay_and_the_switch_overhead_does_not(
    monkeypatch: pytest.MonkeyPatch, row_cap: int | None
) -> None:
    sw = _run(monkeypatch, DELAY_NS, row_cap)["switch_latency"]
    # the switch overhead compares only the switch queued ahead: microseconds, not the delay
    # (before the split it read about 2/3 of the delay: two of three switches waited for it)
    assert sw["switch_overhead_ms"] is not None, sw["reason"]
    assert abs(sw["switch_overhead_ms"]) < 0.05 * DELAY_MS, sw
    assert sw["matched_switch_count"] == ITERATIONS  # the one ready switch per iteration
    assert sw["switch_count"] == 3 * ITERATIONS
    assert sw["no_switch_count"] == (4 * OPS_PER_PHASE - 1) * ITERATIONS
    readiness = sw["gap_readiness"]
    assert (readiness["waited"], readiness["ready_switches"], readiness["unknown"]) == (
        2 * ITERATIONS,
        ITERATIONS,
        0,
    )
    starved = sw["launch_starvation"]
    assert (starved["gaps"], starved["switch_gaps"]) == (2 * ITERATIONS, 2 * ITERATIONS)
    assert starved["gaps_with_known_readiness"] == sw["switch_count"] + sw["no_switch_count"]
    assert starved["cross_stream_waits"] == 0 and starved["cause"].startswith("host launch (")
    # each wait is the injected delay: less the µs between the last op's signal and its end,
    # more when the host was late to launch (the median is robust to a few such iterations)
    assert abs(starved["wait_p50_ms"] - DELAY_MS) <= 0.1 * DELAY_MS + RELATIVE_ERROR * DELAY_MS, starved
    assert starved["wait_max_ms"] >= 0.95 * DELAY_MS
    assert starved["wait_total_ms"] == pytest.approx(starved["wait_mean_ms"] * starved["gaps"])
    assert starved["wait_total_ms"] >= 2 * ITERATIONS * 0.95 * DELAY_MS
    # the every-gap figure still holds the delay: it is what switch_overhead_ms read before
    assert sw["all_gaps"]["switch_overhead_ms"] > 0.4 * DELAY_MS
    assert sw["all_gaps"]["matched_switch_count"] == 3 * ITERATIONS


@pytest.mark.parametrize("row_cap", [None, 50], ids=["rows", "folded"])
def test_ops_queued_ahead_have_no_launch_starvation(
    monkeypatch: pytest.MonkeyPatch, row_cap: int | None
) -> None:
    result = _run(monkeypatch, 0, row_cap)
    sw = result["switch_latency"]
    assert abs(sw["switch_overhead_ms"]) < 0.05 * DELAY_MS, sw
    assert sw["matched_switch_count"] == sw["switch_count"] == 3 * ITERATIONS
    starved = sw["launch_starvation"]
    assert starved["gaps"] == 0 and starved["wait_total_ms"] == 0.0
    assert starved["share_of_lane_time"] == 0.0
    assert starved["wait_p50_ms"] is None and starved["reason"].startswith("no gap waited")
    assert sw["gap_readiness"]["waited"] == 0


def test_console_shows_both_figures_and_claims_no_cost_from_starved_gaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aorta.hw_queue_eval.report.console import interpret, switch_rows

    result = _run(monkeypatch, DELAY_NS, None)
    rows = dict(switch_rows(result["switch_latency"]))
    assert "Switch overhead (like for like, ready gaps)" in rows
    assert rows["Host launch starvation"].startswith(f"{2 * ITERATIONS} of ")
    lines = interpret(result)
    sw = result["switch_latency"]
    ready_us, all_us = (
        abs(v) * 1000 for v in (sw["switch_overhead_ms"], sw["all_gaps"]["switch_overhead_ms"])
    )
    assert not any(f"{all_us:.2f} µs" in line for line in lines), lines
    assert all(f"costs {ready_us:.2f} µs" in line for line in lines if "costs" in line), lines
    assert any(line.startswith("Lanes sat idle") and "host to launch" in line for line in lines)
