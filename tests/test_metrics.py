"""Known samples → known statistics; hand-built op intervals → known gaps and concurrency."""

from __future__ import annotations

import pytest

from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.ops.records import OpRecord


def op(
    stream: int,
    start_us: float,
    end_us: float,
    queue: int | None = 0,
    iteration: int = 0,
    ready_us: float | None = 0.0,
    label: str = "k",
) -> OpRecord:
    """An OpRecord with times given in µs for readability; ready at 0 (queued ahead) unless given."""
    return OpRecord(
        iteration,
        stream,
        queue,
        label,
        None if ready_us is None else int(ready_us * 1000),
        int(start_us * 1000),
        int(end_us * 1000),
    )


def test_summarize_known_samples():
    stats = metrics.summarize([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert stats["count"] == 10
    assert stats["mean"] == pytest.approx(5.5)
    assert stats["min"] == 1
    assert stats["max"] == 10
    assert stats["p50"] == pytest.approx(5.5)
    assert stats["median"] == stats["p50"]
    # linear interpolation: rank 0.95 * 9 = 8.55 → 9 + 0.55 * (10 - 9)
    assert stats["p95"] == pytest.approx(9.55)
    assert stats["p99"] == pytest.approx(9.91)
    assert stats["iqr"] == pytest.approx(7.75 - 3.25)
    assert stats["std"] == pytest.approx(3.0276503540974917)


def test_summarize_empty_is_none_and_single_sample_has_zero_std():
    assert metrics.summarize([]) is None
    single = metrics.summarize([4.0])
    assert single["std"] == 0.0
    assert single["p99"] == 4.0


def test_stability_warning_threshold():
    steady = metrics.summarize([10.0, 10.1, 10.2, 9.9, 10.0])
    assert metrics.stability_warning(steady) is None
    noisy = metrics.summarize([5.0, 10.0, 15.0, 20.0, 10.0])
    warning = metrics.stability_warning(noisy)
    assert warning is not None
    assert "IQR/median" in warning


def test_throughput_units_and_zero_time():
    assert metrics.throughput(2e9, 2.0, 1e9) == pytest.approx(1.0)
    assert metrics.throughput(1.0, 0.0, 1.0) is None


def test_merged_busy_counts_overlap_once():
    assert metrics.merged_busy_ns([(0, 10), (5, 15), (20, 30)]) == 25
    assert metrics.merged_busy_ns([]) == 0


def test_per_stream_busy_counts_and_concurrency():
    ops = [op(0, 0, 100), op(0, 100, 200), op(1, 50, 150, queue=1)]
    busy = metrics.per_stream_busy_ms(ops, 3)
    assert busy == pytest.approx([0.2, 0.1, 0.0])
    assert metrics.per_stream_op_counts(ops, 3) == [2, 1, 0]
    assert metrics.achieved_concurrency(busy, 0.2) == pytest.approx(1.5)
    assert metrics.achieved_concurrency(busy, 0.0) is None


def test_lane_gaps_on_a_shared_queue():
    # One queue serving streams 0 and 1 alternately: s0 [0,10] s1 [13,20] s0 [22,30] s0 [31,40]
    ops = [op(0, 0, 10), op(1, 13, 20), op(0, 22, 30), op(0, 31, 40)]
    gaps = metrics.lane_gaps(ops)
    assert sorted((g.switch, round(g.gap_ms * 1000, 3)) for g in gaps) == [
        (False, 1.0),
        (True, 2.0),
        (True, 3.0),
    ]  # 31-30 same stream; 22-20, 13-10 switches


def test_lane_gaps_do_not_cross_iterations_or_lanes():
    ops = [
        op(0, 0, 10, queue=0, iteration=0),
        op(1, 12, 20, queue=0, iteration=1),
        op(2, 11, 20, queue=1, iteration=0),
    ]
    assert metrics.lane_gaps(ops) == []


def synthetic_lane(switch_cost_us: float, rounds: int = 40, queue: int = 0) -> list[OpRecord]:
    """Two streams on one lane, each running a long GEMM then a tiny op; the gap after a GEMM is
    10 µs, after a tiny op 1 µs, plus `switch_cost_us` when the lane changes stream. Ops of one
    stream run back to back (no switch) on even rounds; the streams alternate on odd rounds."""
    ops: list[OpRecord] = []
    t = 0.0
    prev_label, prev_stream = None, None
    base_gap = {"gemm": 10.0, "tiny": 1.0}
    for r in range(rounds):
        order = (
            [(0, "gemm"), (0, "tiny"), (1, "gemm"), (1, "tiny")]
            if r % 2 == 0
            else [(0, "gemm"), (1, "gemm"), (0, "tiny"), (1, "tiny")]
        )
        for stream, label in order:
            if prev_label is not None:
                t += base_gap[prev_label] + (switch_cost_us if stream != prev_stream else 0.0)
            length = 100.0 if label == "gemm" else 2.0
            ops.append(op(stream, t, t + length, queue=queue, label=label))
            t += length
            prev_label, prev_stream = label, stream
    return ops


@pytest.mark.parametrize("cost_us", [0.0, 3.0])
def test_like_for_like_switch_cost_recovers_the_injected_cost(cost_us):
    result = metrics.switch_analysis(synthetic_lane(cost_us))
    assert result["switch_overhead_ms"] == pytest.approx(cost_us / 1000, abs=1e-6)
    # switches: 1 inside each even round, 4 in each odd round, 1 entering even rounds 2..38;
    # gemm→tiny occurs with and without a switch (20 switches, odd rounds); gemm→gemm switches
    # (20) face the no-switch gaps after a gemm; switches after a tiny op have no baseline
    assert result["switch_count"] == 20 + 80 + 19
    assert result["matched_on_both_kinds"] == 20
    assert result["matched_on_previous_kind"] == 20
    assert result["matched_switch_count"] == 40
    assert result["reason"] is None
    assert result["outside_spread"] is (cost_us > 0)
    assert result["per_lane"]["0"]["switch_overhead_ms"] == pytest.approx(cost_us / 1000, abs=1e-6)


@pytest.mark.parametrize("cost_us", [0.0, 2.0])
def test_one_kind_per_stream_falls_back_to_the_previous_kind(cost_us):
    # hetero-like: stream 0 runs only A (gap after A: 5 µs), stream 1 only B (gap after B:
    # 1 µs), AABB AABB … on one lane: A→B and B→A never occur without a switch
    ops, t, prev = [], 0.0, None
    for i in range(60):
        stream, label = (0, "A") if (i // 2) % 2 == 0 else (1, "B")
        if prev is not None:
            t += (5.0 if prev[1] == "A" else 1.0) + (cost_us if prev[0] != stream else 0.0)
        ops.append(op(stream, t, t + 20, label=label))
        t += 20
        prev = (stream, label)
    result = metrics.switch_analysis(ops)
    assert result["switch_overhead_ms"] == pytest.approx(cost_us / 1000, abs=1e-6)
    assert result["matched_on_both_kinds"] == 0
    assert result["matched_on_previous_kind"] == result["switch_count"] == 29
    assert result["pairs"][0]["matched_on"] == "previous op kind"


def test_unmatched_formula_is_fooled_but_like_for_like_is_not():
    # true cost 0, but same-stream gaps mostly follow GEMMs (10 µs gaps) and switch gaps mostly
    # tiny ops (1 µs): the old unmatched median difference reports −9 µs
    ops = synthetic_lane(0.0)
    gaps = metrics.lane_gaps(ops)
    import numpy as np

    naive = np.median([g.gap_ms for g in gaps if g.switch]) - np.median(
        [g.gap_ms for g in gaps if not g.switch]
    )
    assert naive == pytest.approx(-0.009)
    assert metrics.switch_analysis(ops)["switch_overhead_ms"] == pytest.approx(0.0, abs=1e-9)


def test_switch_weighting_across_lanes():
    lane0 = synthetic_lane(2.0, queue=0)
    lane1 = [o for o in synthetic_lane(6.0, rounds=20, queue=1)]
    lane1 = [
        OpRecord(o.iteration, o.stream + 2, o.queue, o.label, o.ready_ns, o.start_ns, o.end_ns) for o in lane1
    ]
    result = metrics.switch_analysis(lane0 + lane1)
    n0 = result["per_lane"]["0"]["matched_switches"]
    n1 = result["per_lane"]["1"]["matched_switches"]
    assert n0 > n1 > 0
    assert result["switch_overhead_ms"] == pytest.approx((2.0 * n0 + 6.0 * n1) / (n0 + n1) / 1000)


def test_switch_analysis_reports_why_it_is_null():
    assert metrics.switch_analysis([])["reason"] == "no ops recorded"
    one_stream = [op(0, 0, 10), op(0, 12, 20)]
    result = metrics.switch_analysis(one_stream)
    assert result["switch_overhead_ms"] is None
    assert result["switch_count"] == 0
    assert "no stream switches" in result["reason"]
    assert result["outside_spread"] is None
    # a switch exists but never between the same op kinds as a same-stream gap
    unmatched = [op(0, 0, 10, label="a"), op(1, 12, 20, label="b"), op(1, 21, 30, label="b")]
    result = metrics.switch_analysis(unmatched)
    assert result["switch_count"] == 1
    assert result["matched_switch_count"] == 0
    assert result["switch_overhead_ms"] is None
    assert "no like-for-like pairs" in result["reason"]
    assert "no like-for-like" in result["per_lane"]["0"]["reason"]


def test_ready_to_start_delays_only_where_known():
    ops = [op(0, 10, 20, ready_us=4), op(1, 10, 20, ready_us=None)]
    assert metrics.ready_to_start_delays_ms(ops) == pytest.approx([0.006])


def test_per_label_summary():
    summary = metrics.per_label_summary(
        [op(0, 0, 10, label="a"), op(0, 10, 30, label="a"), op(1, 0, 5, label="b")]
    )
    assert summary["a"]["count"] == 2
    assert summary["a"]["mean"] == pytest.approx(0.015)
    assert summary["b"]["max"] == pytest.approx(0.005)


def test_console_prints_no_switch_overhead_without_switches():
    from aorta.hw_queue_eval.report.console import SWITCH_LABEL, switch_line, switch_rows

    none = metrics.switch_analysis([op(0, 0, 10), op(0, 12, 20)], waits=0)
    rows = switch_rows(none)
    assert rows == [
        ("Stream switches", "0 (no stream switches on a shared lane were observed)"),
        ("Host launch starvation", "none: every next op was ready when the lane freed (1 lane gaps)"),
    ]
    assert switch_line(none) is None
    zero = metrics.switch_analysis(synthetic_lane(0.0))
    assert switch_line(zero).startswith("No switch cost measurable")
    costly = metrics.switch_analysis(synthetic_lane(3.0))
    assert "costs 3.00 µs more" in switch_line(costly)
    assert rows[0][0] != SWITCH_LABEL
    assert switch_rows(costly)[0] == (SWITCH_LABEL, "+3.00 µs (gap spread 0.00 µs)")


def hand_lane() -> list[OpRecord]:
    """One lane, two streams; (stream, start, end, ready) in µs. Gaps by hand:
    s1 12 after s0 10: switch 2, ready (0 ≤ 10); s0 21 after 20: switch 1, ready; s0 31 after
    30: same stream 1, ready; s1 140 after 40: switch 100, waited 139 − 40 = 99; s1 151 after
    150: same stream 1, ready; s0 362 after 160: switch 202, waited 360 − 160 = 200; s0 371 after
    370: same stream 1, ready at 370 = the previous end (ready: at or before it)."""
    rows = [
        (0, 0, 10, 0),
        (1, 12, 20, 0),
        (0, 21, 30, 0),
        (0, 31, 40, 5),
        (1, 140, 150, 139),
        (1, 151, 160, 141),
        (0, 362, 370, 360),
        (0, 371, 380, 370),
    ]
    return [op(s, a, b, ready_us=r) for s, a, b, r in rows]


def test_ready_and_waited_gaps_recomputed_by_hand():
    result = metrics.switch_analysis(hand_lane(), window_ms=0.4, waits=0)
    # ready gaps only: switches 2, 1 (median 1.5) against same-stream 1, 1, 1 (median 1)
    assert result["switch_overhead_ms"] == pytest.approx(0.0005)
    assert result["matched_switch_count"] == 2 and result["matched_on_both_kinds"] == 2
    assert (result["switch_count"], result["no_switch_count"]) == (4, 3)
    assert result["pairs"][0]["switch_gaps"] == 2 and result["pairs"][0]["no_switch_gaps"] == 3
    assert result["gap_readiness"] | {"definition": None} == {
        "definition": None,
        "ready": 5,
        "waited": 2,
        "unknown": 0,
        "ready_switches": 2,
    }
    starved = result["launch_starvation"]
    assert (starved["gaps"], starved["switch_gaps"], starved["gaps_with_known_readiness"]) == (2, 2, 7)
    assert starved["wait_total_ms"] == pytest.approx(0.299)
    assert starved["wait_mean_ms"] == pytest.approx(0.1495)
    assert starved["wait_p50_ms"] == pytest.approx(0.1495)
    assert starved["wait_max_ms"] == pytest.approx(0.200)
    assert starved["share_of_lane_time"] == pytest.approx(0.299 / 0.4)  # one lane
    assert starved["cause"].startswith("host launch (") and starved["reason"] is None
    lane = result["per_lane"]["0"]
    assert (lane["launch_wait_gaps"], lane["launch_wait_total_ms"]) == (2, pytest.approx(0.299))
    # every gap, as before the split: switches 2, 1, 100, 202 (median 51) against 1 → 50 µs
    assert result["all_gaps"]["switch_overhead_ms"] == pytest.approx(0.050)
    assert result["all_gaps"]["matched_switch_count"] == 4


def test_only_waited_switches_or_no_ready_time_give_null_with_the_reason():
    waited = [op(0, 0, 10), op(1, 50, 60, ready_us=40), op(1, 61, 70)]
    result = metrics.switch_analysis(waited)
    assert result["switch_overhead_ms"] is None
    assert (
        result["reason"].startswith("no switch gap had its next op ready") and "1 waited" in result["reason"]
    )
    assert result["launch_starvation"]["gaps"] == 1
    assert result["launch_starvation"]["share_of_lane_time"] is None  # no window given
    assert "window length" in result["launch_starvation"]["reason"]
    # no ready time at all (GPU): nothing is known to be ready or to have waited
    unknown = [op(s, a, b, queue=None, ready_us=None) for s, a, b in ((0, 0, 10), (1, 12, 20), (1, 21, 30))]
    result = metrics.switch_analysis(unknown, window_ms=1.0)
    assert result["switch_overhead_ms"] is None and result["reason"].startswith("readiness unknown")
    assert result["gap_readiness"]["unknown"] == 2
    starved = result["launch_starvation"]
    assert (
        starved["gaps"] is None and starved["wait_total_ms"] is None and starved["share_of_lane_time"] is None
    )
    assert starved["reason"].startswith("readiness unknown")
    assert result["per_lane"]["None"]["launch_wait_gaps"] is None
    assert result["all_gaps"]["switch_overhead_ms"] == pytest.approx(0.001)  # 2 µs − 1 µs


def test_console_never_claims_a_cost_from_waited_gaps():
    from aorta.hw_queue_eval.report.console import interpret, switch_rows

    sw = metrics.switch_analysis(hand_lane(), window_ms=0.4, waits=0)
    result = {"stream_count": 2, "switch_latency": sw}
    lines = interpret(result)
    assert not any("50.00 µs" in line for line in lines), lines  # the every-gap figure
    assert any(line.startswith("Lanes sat idle 74.8% of their time waiting for the host") for line in lines)
    rows = dict(switch_rows(sw))
    assert rows["Host launch starvation"].startswith(
        "2 of 7 lane gaps waited for their op (2 of them switches)"
    )
    # with cross-stream waits in the window the wait may be one: the label says both
    waits = metrics.switch_analysis(hand_lane(), window_ms=0.4, waits=3)
    assert "Lane waiting for its next op (launch or wait)" in dict(switch_rows(waits))


def test_stability_warning_never_reads_as_equal_to_its_limit():
    # IQR/median = 0.104: it rounded to "10% (> 10%)"; the figure shown must read above the limit
    stats = metrics.summarize([1.0, 1.0, 1.0, 1.0])
    stats.update(median=1.0, iqr=0.104)
    assert "IQR/median = 10.4% (> 10%)" in metrics.stability_warning(stats)
    stats.update(iqr=0.1000004)
    assert "IQR/median = 10.001% (> 10%)" in metrics.stability_warning(stats)
    stats.update(iqr=0.15)
    assert "IQR/median = 15% (> 10%)" in metrics.stability_warning(stats)


def test_percent_above_uses_the_fewest_digits_that_exceed_the_limit():
    from aorta.common.percent import percent_above

    assert percent_above(0.15, 0.10) == "15%"
    assert percent_above(0.104, 0.10) == "10.4%"
    assert percent_above(0.1004, 0.10) == "10.04%"
    assert percent_above(0.10004, 0.10) == "10.004%"
    assert percent_above(0.1000004, 0.10) == "10.001%"
