"""Known samples → known statistics; hand-built op intervals → known gaps and concurrency."""

from __future__ import annotations

import pytest

from aorta.hw_queue_eval import metrics
from aorta.hw_queue_eval.backends.base import OpRecord


def op(stream: int, start_us: float, end_us: float, queue: int | None = 0, iteration: int = 0,
       ready_us: float | None = None, label: str = "k") -> OpRecord:
    """An OpRecord with times given in µs for readability."""
    return OpRecord(iteration, stream, queue, label,
                    None if ready_us is None else int(ready_us * 1000),
                    int(start_us * 1000), int(end_us * 1000))


def test_summarize_known_samples():
    stats = metrics.summarize([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert stats["count"] == 10
    assert stats["mean"] == pytest.approx(5.5)
    assert stats["min"] == 1 and stats["max"] == 10
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
    assert single["std"] == 0.0 and single["p99"] == 4.0


def test_stability_warning_threshold():
    steady = metrics.summarize([10.0, 10.1, 10.2, 9.9, 10.0])
    assert metrics.stability_warning(steady) is None
    noisy = metrics.summarize([5.0, 10.0, 15.0, 20.0, 10.0])
    warning = metrics.stability_warning(noisy)
    assert warning is not None and "IQR/median" in warning


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


def test_gaps_on_a_shared_queue():
    # One queue serving streams 0 and 1 alternately: s0 [0,10] s1 [13,20] s0 [22,30] s0 [31,40]
    ops = [op(0, 0, 10), op(1, 13, 20), op(0, 22, 30), op(0, 31, 40)]
    intra, inter = metrics.stream_gaps(ops)
    assert sorted(intra) == pytest.approx([0.001, 0.012])  # 22-10, 31-30 (µs → ms)
    assert sorted(inter) == pytest.approx([0.002, 0.003])  # 13-10, 22-20
    result = metrics.switch_analysis(ops)
    assert result["switch_overhead_ms"] == pytest.approx(0.0025 - 0.0065)
    assert result["reason"] is None


def test_gaps_do_not_cross_iterations_or_lanes():
    ops = [op(0, 0, 10, queue=0, iteration=0), op(1, 12, 20, queue=0, iteration=1),
           op(2, 11, 20, queue=1, iteration=0)]
    intra, inter = metrics.stream_gaps(ops)
    assert intra == [] and inter == []


def test_switch_analysis_reports_why_it_is_null():
    assert metrics.switch_analysis([])["reason"] == "no ops recorded"
    one_stream = [op(0, 0, 10), op(0, 12, 20)]
    result = metrics.switch_analysis(one_stream)
    assert result["switch_overhead_ms"] is None
    assert "no stream switches" in result["reason"]
    no_intra = [op(0, 0, 10), op(1, 12, 20)]
    assert "no intra-stream baseline" in metrics.switch_analysis(no_intra)["reason"]


def test_ready_to_start_delays_only_where_known():
    ops = [op(0, 10, 20, ready_us=4), op(1, 10, 20)]
    assert metrics.ready_to_start_delays_ms(ops) == pytest.approx([0.006])


def test_per_label_summary():
    summary = metrics.per_label_summary([op(0, 0, 10, label="a"), op(0, 10, 30, label="a"),
                                         op(1, 0, 5, label="b")])
    assert summary["a"]["count"] == 2 and summary["a"]["mean"] == pytest.approx(0.015)
    assert summary["b"]["max"] == pytest.approx(0.005)
