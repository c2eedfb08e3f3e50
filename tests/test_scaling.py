"""Scaling analysis on synthetic sweep points with a known knee."""

from __future__ import annotations

import pytest

from aorta.hw_queue_eval.scaling import analyze


def _result(streams, throughput, p99, work, pool=4, backend="cpu", cores=64, dispatch=None):
    result = {"stream_count": streams, "throughput": throughput, "latency_ms": {"p99": p99},
              "metadata": {"work_per_iteration": work},
              "queue_mapping": {"pool_size": pool},
              "environment": {"backend": backend, "cpu_count": cores, "env_knobs": {}}}
    if dispatch is not None:
        result["ebpf_queue_metrics"] = {"submit_to_dispatch": {"p99_us": dispatch}}
    return result


def _per_stream_sweep(**kw):
    # work grows with the streams; time per iteration constant up to 4 streams, then grows
    return [_result(1, 10, 1.0, 100, **kw), _result(2, 20, 1.0, 200, **kw),
            _result(4, 40, 1.0, 400, **kw), _result(8, 41, 2.0, 800, **kw),
            _result(16, 42, 4.0, 1600, **kw)]


def test_knee_at_pool_size_per_stream_work():
    a = analyze(_per_stream_sweep(), "per_stream")
    assert a.knee_streams == 4
    assert a.peak_streams == 16
    assert a.efficiency[:3] == pytest.approx([1.0, 1.0, 1.0])
    assert a.efficiency[3] == pytest.approx(41 / 10 / 8)
    assert a.latency_jump_streams == 8
    assert a.verdict.startswith("throughput stops scaling at 4 streams = the hardware-queue pool")


def test_knee_at_core_count_is_named_as_such():
    a = analyze(_per_stream_sweep(pool=8, cores=4), "per_stream")
    assert "= the CPU core count (4)" in a.verdict
    assert "before the queue pool (8) is full" in a.verdict


def test_knee_explained_by_neither():
    a = analyze(_per_stream_sweep(pool=16, cores=64), "per_stream")
    assert a.verdict.startswith("throughput stops scaling at 4 streams (pool 16, 64 cores)")


def test_fixed_work_uses_stream_ratio():
    results = [_result(1, 10, 10.0, 100), _result(2, 19, 5.2, 100), _result(4, 20, 5.0, 100)]
    a = analyze(results, "fixed")
    assert a.efficiency == pytest.approx([1.0, 0.95, 0.5])
    assert a.knee_streams == 2
    assert a.latency_jump_streams is None  # latency fell as ideal: no jump


def test_still_scaling_and_unknown_pool():
    results = [_result(1, 10, 1.0, 100, pool=None, backend="cuda"),
               _result(2, 20, 1.0, 200, pool=None, backend="cuda")]
    a = analyze(results, "per_stream")
    assert a.knee_streams is None
    assert a.pool_size is None
    assert a.verdict.startswith("throughput still scales up to 2 streams (the largest measured)")
    assert a.confidence == "unknown" and "--repeats" in a.verdict


def test_dispatch_jump_from_ebpf_section():
    results = [_result(n, 10 * n, 1.0, 100 * n, dispatch=d) for n, d in ((1, 10), (2, 11), (4, 40))]
    a = analyze(results, "per_stream")
    assert a.dispatch_jump_streams == 4
    assert "dispatch P99 jumps at 4 streams" in a.verdict


def test_needs_two_points():
    assert analyze([_result(1, 10, 1.0, 100)], "per_stream") is None


def test_flat_step_followed_by_scaling_is_not_the_knee():
    # 2→4 captures little, 4→8 scales again, 8→16 is flat: scaling stopped at 8, not 2
    results = [_result(2, 100, 1.0, 200), _result(4, 110, 1.0, 400), _result(8, 200, 1.0, 800),
               _result(16, 205, 2.0, 1600)]
    a = analyze(results, "per_stream")
    assert a.knee_streams == 8
