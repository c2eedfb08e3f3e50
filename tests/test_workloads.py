"""Every workload at its minimum, recommended and maximum stream counts on the CPU backend."""

from __future__ import annotations

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.results.run_result import validate_run_dict
from aorta.hw_queue_eval.run.harness import run_benchmark
from aorta.hw_queue_eval.workloads.registry import get_info, list_workloads, workload_names

CASES = [
    (info.name, n)
    for info in list_workloads()
    for n in sorted({info.min_streams, info.recommended_streams, info.max_streams})
]

# upstream AORTA 0.3.0's catalogue (../shared/reference/compat.md, "Workload catalogue", outside
# this repository): name → (category, min, max, recommended, sensitivity, unit)
CATALOGUE = {
    "hetero_kernels": ("latency_sensitive", 1, 64, 8, "critical", "GFLOPS"),
    "tiny_kernel_stress": ("latency_sensitive", 1, 64, 16, "critical", "GFLOPS"),
    "large_gemm_only": ("latency_sensitive", 1, 16, 4, "low", "TFLOPS"),
    "graph_subgraphs": ("latency_sensitive", 4, 32, 8, "high", "samples/sec"),
    "comms_compute_overlap": ("distributed", 1, 32, 4, "high", "TFLOPS"),
    "fsdp_tp": ("distributed", 4, 16, 10, "high", "samples/sec"),
    "moe": ("distributed", 4, 32, 16, "critical", "tokens/sec"),
    "activation_ckpt": ("distributed", 4, 12, 6, "high", "samples/sec"),
    "grad_accum": ("distributed", 2, 16, 6, "medium", "samples/sec"),
    "speculative_decode": ("inference", 4, 12, 6, "high", "tokens/sec"),
    "continuous_batch": ("inference", 4, 16, 8, "high", "tokens/sec"),
    "rag_pipeline": ("inference", 4, 12, 8, "high", "queries/sec"),
    "async_dataload": ("pipeline", 4, 12, 6, "medium", "images/sec"),
    "zero_offload": ("pipeline", 4, 12, 6, "medium", "samples/sec"),
    "torch_compile": ("pipeline", 4, 12, 8, "medium", "samples/sec"),
}

# The buffer holding each workload's final output, to corrupt in the verification test.
OUTPUTS = {
    "hetero_kernels": lambda w: w.c[0][1],
    "tiny_kernel_stress": lambda w: w.buf[0][1],
    "large_gemm_only": lambda w: w.c[0],
    "graph_subgraphs": lambda w: w.y,
    "comms_compute_overlap": lambda w: w.reduced[-1],
    "fsdp_tp": lambda w: w.grad_shard[-1],
    "moe": lambda w: w.y,
    "activation_ckpt": lambda w: w.gw_reduced[0],
    "grad_accum": lambda w: w.grad[-1],
    "speculative_decode": lambda w: w.accepted,
    "continuous_batch": lambda w: w.tokens[-1],
    "rag_pipeline": lambda w: w.answer[-1],
    "async_dataload": lambda w: w.logits[-1],
    "zero_offload": lambda w: w.w_new[-1],
    "torch_compile": lambda w: w.y,
}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "streams"), CASES)
def test_workload_runs_correctly_with_work_on_every_stream(name, streams):
    result = run_benchmark(RunConfig(workload=name, streams=streams, iterations=3, warmup=1, device="cpu"))
    data = result.to_dict()
    assert validate_run_dict(data) == []
    assert data["status"] == "ok", data["warnings"]
    assert data["verification"]["passed"]
    assert data["throughput"] > 0
    assert data["throughput_unit"] == get_info(name).throughput_unit
    counts = data["per_stream_op_counts"]
    assert len(counts) == streams, f"idle streams: {counts}"
    assert min(counts) > 0, f"idle streams: {counts}"
    assert all(t > 0 for t in data["per_stream_times_ms"])
    assert len(data["iteration_times_ms"]) == 3
    assert data["latency_ms"]["p99"] >= data["latency_ms"]["p50"] > 0
    waits_are_honoured(data)
    roles = data["metadata"]["workload"]["stream_roles"]
    assert sorted(i for idx in roles.values() for i in idx) == list(range(streams))


def waits_are_honoured(data):
    """Every recorded cross-stream wait: the waiting op started after the op it waited for ended."""
    table = data["op_intervals"]
    col = {c: i for i, c in enumerate(table["columns"])}
    per_stream = {}
    for row in table["rows"]:
        per_stream.setdefault(row[col["stream"]], []).append(row)
    for rows in per_stream.values():
        rows.sort(key=lambda r: r[col["start_us"]])
    checked = 0
    for waiter, waiter_op, target, target_op in table["waits"]["rows"]:
        if waiter_op >= len(per_stream.get(waiter, [])):
            continue  # nothing launched on the waiter after this wait
        after, before = per_stream[waiter][waiter_op], per_stream[target][target_op]
        assert after[col["start_us"]] >= before[col["end_us"]], (waiter, waiter_op, target)
        checked += 1
    return checked


def test_catalogue_matches_compat_names_and_limits():
    assert workload_names() == sorted(CATALOGUE)
    for name, expected in CATALOGUE.items():
        info = get_info(name)
        assert (
            info.category,
            info.min_streams,
            info.max_streams,
            info.recommended_streams,
            info.switch_sensitivity,
            info.throughput_unit,
        ) == expected, name
    assert [i.name for i in list_workloads(category="distributed")] == [
        "activation_ckpt",
        "comms_compute_overlap",
        "fsdp_tp",
        "grad_accum",
        "moe",
    ]
    assert {i.name for i in list_workloads(sensitivity="critical")} == {
        "hetero_kernels",
        "tiny_kernel_stress",
        "moe",
    }


def test_dependent_workloads_record_real_waits():
    data = run_benchmark(RunConfig(workload="moe", streams=5, iterations=2, warmup=1, device="cpu")).to_dict()
    # per iteration: 4 experts wait for the gate, the gate waits for 4 experts
    assert len(data["op_intervals"]["waits"]["rows"]) == 2 * 8
    assert waits_are_honoured(data) == 2 * 8


def test_stream_range_enforced():
    with pytest.raises(UsageError, match=r"4\.\.32"):
        get_info("moe").check_streams(3)


@pytest.mark.parametrize(
    "name",
    [  # torch_compile builds C++ kernels first: tens of seconds
        pytest.param(n, marks=pytest.mark.slow) if n == "torch_compile" else n for n in sorted(CATALOGUE)
    ],
)
def test_verification_detects_wrong_output(name):
    from aorta.hw_queue_eval.backends.cpu import CpuBackend
    from aorta.hw_queue_eval.workloads.registry import get_workload_class

    streams = get_info(name).min_streams
    backend = CpuBackend(streams, pool_size=4)
    try:
        workload = get_workload_class(name)(streams, "small", backend.torch_device(), 1)
        workload.setup()
        workload.run_iteration(backend.streams)
        backend.synchronize()
        assert workload.verify().passed
        out = OUTPUTS[name](workload)
        out.add_(out.abs().max().clamp(min=1) if out.is_floating_point() else 1)
        assert not workload.verify().passed
    finally:
        backend.close()


def test_end_only_mode_reports_null_latency_with_reason():
    data = run_benchmark(
        RunConfig(
            workload="tiny_kernel_stress",
            streams=2,
            iterations=3,
            warmup=1,
            device="cpu",
            sync_mode="end_only",
        )
    ).to_dict()
    assert data["latency_ms"] is None
    assert data["iteration_times_ms"] is None
    assert "end_only" in data["latency_note"]
    assert data["throughput"] > 0


def test_same_seed_same_inputs():
    from aorta.hw_queue_eval.workloads.registry import get_workload_class

    cls = get_workload_class("moe")
    a, b = cls(4, "small", "cpu", 7), cls(4, "small", "cpu", 7)
    a.setup()
    b.setup()
    assert (a.x == b.x).all()
    assert (a.w1[0] == b.w1[0]).all()


def test_memory_heavy_workload_refuses_before_allocating(monkeypatch):
    from aorta.hw_queue_eval.workloads import memory
    from aorta.hw_queue_eval.workloads.registry import get_workload_class

    monkeypatch.setattr(memory, "available_bytes", lambda device: 1024)
    for name in ("zero_offload", "async_dataload", "fsdp_tp", "activation_ckpt", "rag_pipeline"):
        workload = get_workload_class(name)(4, "large", "cpu", 1)
        with pytest.raises(UsageError, match=r"--size large needs [0-9.]+ GiB on cpu.*smaller"):
            workload.setup()
        assert not hasattr(workload, "x"), name
        assert not hasattr(workload, "host"), name


def test_memory_check_names_the_size_needed():
    from aorta.hw_queue_eval.workloads.memory import check_fits

    check_fits("w", "small", "cpu", 10, available=11)
    with pytest.raises(UsageError, match=r"w --size large needs 2\.00 GiB on cpu, only 1\.00 GiB"):
        check_fits("w", "large", "cpu", 2 * 1024**3, available=1024**3)


def test_torch_compile_failure_is_one_line(monkeypatch):
    from aorta.hw_queue_eval.workloads import torch_compile

    def broken():
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nlong details")

    monkeypatch.setattr(torch_compile, "compiled_regions", broken)
    workload = torch_compile.TorchCompile(4, "small", "cpu", 1)
    with pytest.raises(UsageError) as err:
        workload.setup()
    assert "\n" not in str(err.value)
    assert "inductor could not compile for cpu" in str(err.value)
    assert "No working C++ compiler" in str(err.value)


@pytest.mark.slow  # builds C++ kernels first
def test_torch_compile_reports_compile_time_outside_the_window():
    data = run_benchmark(
        RunConfig(workload="torch_compile", streams=4, iterations=2, warmup=1, device="cpu")
    ).to_dict()
    described = data["metadata"]["workload"]
    assert described["compile_seconds"] >= 0
    assert "compiled_earlier_in_process" in described
    if not described["compiled_earlier_in_process"]:  # a real compile takes longer than 2 tiny
        assert described["compile_seconds"] * 1e3 > data["total_time_ms"]  # iterations
    assert data["verification"]["passed"]


def test_single_process_collectives_say_so():
    data = run_benchmark(
        RunConfig(workload="comms_compute_overlap", streams=1, iterations=2, warmup=1, device="cpu")
    ).to_dict()
    collectives = data["metadata"]["workload"]["collectives"]
    assert collectives["mode"] == "single_process"
    assert collectives["world_size"] == 1
    labels = data["ops"]["per_label"]
    assert "all_reduce" in labels
    assert "gemm" in labels  # both on the one stream
    assert data["per_stream_op_counts"] == [2 * (2 + 1)]  # 2 iterations × (2 GEMMs + 1 all-reduce)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "streams"),
    [
        (name, n)
        for name in sorted(CATALOGUE)
        for n in sorted({get_info(name).min_streams, min(get_info(name).max_streams, 16)})
    ],
)
def test_every_iteration_verifies_with_many_queues(name, streams):
    """Data races between streams (a reader overtaking a writer) show as wrong outputs.

    A guard, not a proof: a rare race (the activation_ckpt boundary buffer shared by two
    recompute streams, seen about once in six loaded runs) can pass 10 iterations.
    """
    from aorta.hw_queue_eval.backends.cpu import CpuBackend
    from aorta.hw_queue_eval.workloads.registry import get_workload_class

    backend = CpuBackend(streams, pool_size=16)
    try:
        workload = get_workload_class(name)(streams, "small", backend.torch_device(), 3)
        workload.setup()
        for _ in range(10):
            workload.run_iteration(backend.streams)
            backend.synchronize()
            result = workload.verify()
            assert result.passed, result
    finally:
        backend.close()
