"""GPU instrumentation: end_only joins nothing, --no-op-timing records no events (checked on a
fake of the torch.cuda event/stream API), and the instrumentation cost is the measured ratio of
the run's window to an uninstrumented window of the same iterations (checked on the CPU backend)."""

from __future__ import annotations

import pytest

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.run.harness import run_benchmark
from fake_cuda import FakeEvent, FakeStream, install


@pytest.fixture
def fake_cuda(monkeypatch):
    install(monkeypatch)
    from aorta.hw_queue_eval.backends.gpu import GpuBackend

    return GpuBackend(4, "cuda:0")


def _iterate(backend, iterations: int, ops_per_stream: int) -> None:
    backend.start_window()
    for i in range(iterations):
        backend.begin_iteration(i)
        for stream in backend.streams:
            for _ in range(ops_per_stream):
                stream.launch(lambda: None, "k")
        backend.end_iteration()


def test_per_iteration_joins_every_stream_and_times_every_op(fake_cuda):
    backend = fake_cuda
    backend.set_instrumentation(op_timing=True, iteration_joins=True)
    waits0 = FakeStream.waits
    _iterate(backend, 3, 2)
    # window start: 4 joins; per iteration: 4 waits on the start event + 4 on the end
    assert FakeStream.waits - waits0 == 4 + 3 * 8
    assert backend.held_op_records() == 3 * 4 * 2  # below a chunk: nothing read yet
    assert len(backend.iteration_times_ms()) == 3


def test_end_only_without_op_timing_adds_nothing_per_iteration(fake_cuda):
    backend = fake_cuda
    backend.set_instrumentation(op_timing=False, iteration_joins=False)
    waits0, events0 = FakeStream.waits, FakeEvent.created
    _iterate(backend, 3, 2)
    assert FakeStream.waits - waits0 == 4  # only the window start
    assert FakeEvent.created - events0 == 1  # only the window event
    assert backend.held_op_records() == 0
    assert backend.iteration_times_ms() is None
    assert backend.stop_window() == []


def test_end_only_with_op_timing_keeps_op_events_but_no_joins(fake_cuda):
    backend = fake_cuda
    backend.set_instrumentation(op_timing=True, iteration_joins=False)
    waits0 = FakeStream.waits
    _iterate(backend, 2, 1)
    assert FakeStream.waits - waits0 == 4
    assert len(backend.stop_window()) == 2 * 4


def test_cpu_run_reports_the_measured_instrumentation_cost():
    config = RunConfig(
        workload="moe", streams=4, iterations=3, warmup=1, device="cpu", instrumentation_cost=True
    )
    inst = run_benchmark(config).to_dict()["instrumentation"]
    assert inst["op_timing"] is True
    assert inst["per_iteration_sync"] is True
    assert inst["plain_window_ms"] > 0
    # the ratio is exactly what the two measured windows give (hand recomputation)
    assert inst["cost_ratio"] == pytest.approx(inst["instrumented_window_ms"] / inst["plain_window_ms"] - 1)
    assert inst["plain_throughput"] > 0
    assert inst["reason"] is None


def test_cpu_default_does_not_measure_it_and_says_why():
    result = run_benchmark(
        RunConfig(workload="moe", streams=4, iterations=2, warmup=1, device="cpu")
    ).to_dict()
    inst = result["instrumentation"]
    assert inst["cost_ratio"] is None
    assert "CPU backend" in inst["reason"]


def test_no_op_timing_drops_op_rows_and_says_why_switches_are_null():
    result = run_benchmark(
        RunConfig(workload="moe", streams=4, iterations=2, warmup=1, device="cpu", op_timing=False)
    ).to_dict()
    assert result["op_intervals"] is None
    assert result["ops"]["count"] == 0
    assert result["switch_latency"]["switch_overhead_ms"] is None
    assert "--no-op-timing" in result["switch_latency"]["reason"]
    assert result["throughput"] > 0


@pytest.mark.slow
def test_cli_no_op_timing_runs_and_refuses_a_trace_it_cannot_write(cli, tmp_path):
    out = tmp_path / "r.json"
    proc = cli(
        "run", "moe", "--streams", "4", "-i", "2", "-w", "1", "-d", "cpu", "--no-op-timing", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(out.read_text())
    assert data["config"]["op_timing"] is False
    assert data["op_intervals"] is None
    bad = cli(
        "run", "moe", "--streams", "4", "-d", "cpu", "--no-op-timing", "--trace-out", str(tmp_path / "t.json")
    )
    assert bad.returncode == 2
    assert "--trace-out needs per-op timing" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "t.json").exists()
