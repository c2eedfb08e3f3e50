"""Every workload at its minimum and recommended stream counts on the CPU backend."""

from __future__ import annotations

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.config import RunConfig
from aorta.hw_queue_eval.harness import run_benchmark
from aorta.hw_queue_eval.results import validate_run_dict
from aorta.hw_queue_eval.workloads.registry import get_info, list_workloads, workload_names

CASES = [(info.name, n) for info in list_workloads()
         for n in sorted({info.min_streams, info.recommended_streams})]


@pytest.mark.parametrize(("name", "streams"), CASES)
def test_workload_runs_correctly_with_work_on_every_stream(name, streams):
    result = run_benchmark(RunConfig(workload=name, streams=streams, iterations=3, warmup=1,
                                     device="cpu"))
    data = result.to_dict()
    assert validate_run_dict(data) == []
    assert data["status"] == "ok", data["warnings"]
    assert data["verification"]["passed"]
    assert data["throughput"] > 0
    assert data["throughput_unit"] == get_info(name).throughput_unit
    counts = data["per_stream_op_counts"]
    assert len(counts) == streams and min(counts) > 0, f"idle streams: {counts}"
    assert all(t > 0 for t in data["per_stream_times_ms"])
    assert len(data["iteration_times_ms"]) == 3
    assert data["latency_ms"]["p99"] >= data["latency_ms"]["p50"] > 0


def test_catalogue_matches_compat_names_and_limits():
    assert workload_names() == ["hetero_kernels", "large_gemm_only", "moe", "tiny_kernel_stress"]
    hk = get_info("hetero_kernels")
    assert (hk.min_streams, hk.max_streams, hk.recommended_streams) == (1, 64, 8)
    assert (hk.category, hk.switch_sensitivity, hk.throughput_unit) == \
        ("latency_sensitive", "critical", "GFLOPS")
    moe = get_info("moe")
    assert (moe.min_streams, moe.max_streams, moe.recommended_streams) == (4, 32, 16)
    assert moe.throughput_unit == "tokens/sec"
    assert get_info("large_gemm_only").throughput_unit == "TFLOPS"
    assert [i.name for i in list_workloads(category="distributed")] == ["moe"]
    assert {i.name for i in list_workloads(sensitivity="critical")} == \
        {"hetero_kernels", "tiny_kernel_stress", "moe"}


def test_stream_range_enforced():
    with pytest.raises(UsageError, match=r"4\.\.32"):
        get_info("moe").check_streams(3)


def test_verification_detects_wrong_output():
    from aorta.hw_queue_eval.backends.cpu import CpuBackend
    from aorta.hw_queue_eval.workloads.registry import get_workload_class

    backend = CpuBackend(2, pool_size=4)
    try:
        workload = get_workload_class("hetero_kernels")(2, "small", backend.torch_device(), 1)
        workload.setup()
        workload.run_iteration(backend.streams)
        backend.synchronize()
        assert workload.verify().passed
        workload.c[0][1].add_(1.0)  # corrupt the last GEMM output of stream 0
        assert not workload.verify().passed
    finally:
        backend.close()


def test_end_only_mode_reports_null_latency_with_reason():
    data = run_benchmark(RunConfig(workload="tiny_kernel_stress", streams=2, iterations=3,
                                   warmup=1, device="cpu", sync_mode="end_only")).to_dict()
    assert data["latency_ms"] is None and data["iteration_times_ms"] is None
    assert "end_only" in data["latency_note"]
    assert data["throughput"] > 0


def test_same_seed_same_inputs():
    from aorta.hw_queue_eval.workloads.registry import get_workload_class

    cls = get_workload_class("moe")
    a, b = cls(4, "small", "cpu", 7), cls(4, "small", "cpu", 7)
    a.setup()
    b.setup()
    assert (a.x == b.x).all() and (a.w1[0] == b.w1[0]).all()
