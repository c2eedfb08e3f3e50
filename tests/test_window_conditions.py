"""What the harness does around the window to keep runs comparable: the cyclic GC is off from
the last warm-up iteration until the window is over (and back on after, also on errors), and
verification runs on the first warm-up iteration so the remaining warm-up follows it."""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.results.models import TracerSections
from aorta.hw_queue_eval.run.gcwindow import QuietGc
from aorta.hw_queue_eval.run.harness import run_benchmark
from aorta.hw_queue_eval.workloads import registry
from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo

CYCLES_PER_ITERATION = 1000  # above gen0's threshold (700): an enabled collector would run


def _make_cycles(count: int) -> None:
    for _ in range(count):
        cycle: list[Any] = []
        cycle.append(cycle)  # unreachable once this frame moves on: only the cyclic GC frees it


class Probe(Workload):
    """Test only: records, per iteration, whether the collector was on, and when verify ran."""

    INFO = WorkloadInfo(
        name="gc_probe",
        category="latency_sensitive",
        description="test only: records GC state and call order",
        min_streams=1,
        max_streams=1,
        recommended_streams=1,
        switch_sensitivity="low",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES: dict[str, dict[str, int]] = {"small": {}, "medium": {}, "large": {}}
    events: list[tuple[str, bool]] = []
    fail_at: int | None = None

    def setup(self) -> None:
        type(self).events = []

    def run_iteration(self, streams: list[Any]) -> None:
        iterations = sum(1 for kind, _ in self.events if kind == "iteration")
        if self.fail_at is not None and iterations == self.fail_at:
            raise RuntimeError("probe failure")
        self.events.append(("iteration", gc.isenabled()))
        _make_cycles(CYCLES_PER_ITERATION)
        streams[0].launch(lambda: None, "noop")

    def work_per_iteration(self) -> float:
        return 1.0

    def verify(self) -> VerifyResult:
        self.events.append(("verify", gc.isenabled()))
        return VerifyResult(True, 0.0, 0.0, "nothing to verify")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> type[Probe]:
    monkeypatch.setitem(registry._WORKLOADS, "gc_probe", Probe)
    monkeypatch.setattr(Probe, "fail_at", None)
    assert gc.isenabled()
    return Probe


def test_gc_off_from_last_warm_up_iteration_to_window_end_deferred_cycles_counted(probe: type[Probe]) -> None:
    warmup, iterations = 3, 5
    result = run_benchmark(RunConfig("gc_probe", 1, iterations=iterations, warmup=warmup, device="cpu"))
    assert gc.isenabled()  # restored after the run
    assert probe.events == [("iteration", True), ("verify", True), ("iteration", True)] + [
        ("iteration", False)
    ] * (1 + iterations)
    info = result.instrumentation["gc"]
    assert info["disabled_in_window"] is True
    # every cycle made after the collection waited for the collection after the window
    made = (1 + iterations) * CYCLES_PER_ITERATION
    assert made <= info["cyclic_garbage_after_window"] < made + CYCLES_PER_ITERATION
    assert info["collect_before_window_ms"] >= 0


def test_one_warm_up_iteration_collects_verifies_then_measures(probe: type[Probe]) -> None:
    run_benchmark(RunConfig("gc_probe", 1, iterations=2, warmup=1, device="cpu"))
    assert probe.events == [
        ("iteration", False),
        ("verify", False),
        ("iteration", False),
        ("iteration", False),
    ]


def test_gc_back_on_when_the_window_fails(probe: type[Probe], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Probe, "fail_at", 4)  # the second measured iteration (warm-up 3)
    with pytest.raises(RuntimeError, match="probe failure"):
        run_benchmark(RunConfig("gc_probe", 1, iterations=5, warmup=3, device="cpu"))
    assert gc.isenabled()


def test_quiet_gc_keeps_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        quiet = QuietGc()
        quiet.start()
        assert not gc.isenabled()
        assert quiet.stop()["disabled_in_window"] is True
        assert not gc.isenabled()  # the caller had it off: it stays off
    finally:
        gc.enable()
    unstarted = QuietGc().stop()
    assert unstarted["disabled_in_window"] is False and unstarted["reason"]


class _SectionsTracer:
    """A tracer that returns fixed sections: the harness must place them by name."""

    def __init__(self, sections: dict) -> None:
        self.sections = sections

    def prepare(self, backend, workload) -> None: ...

    def window_start(self) -> None: ...

    def window_stop(self) -> None: ...

    def abort(self) -> None: ...

    def finish(self, context: dict) -> TracerSections:
        return TracerSections.of(self.sections)


def test_tracer_sections_land_on_their_fields_and_unknown_ones_are_refused() -> None:
    from aorta.hw_queue_eval.config.run_config import RunConfig
    from aorta.hw_queue_eval.run.harness import run_benchmark

    config = RunConfig("tiny_kernel_stress", 2, iterations=2, warmup=1, device="cpu")
    queue = {"status": "ok", "total_submissions": 7}
    result = run_benchmark(config, _SectionsTracer({"ebpf_queue_metrics": queue}))
    assert result.ebpf_queue_metrics == queue
    assert result.ebpf_memory_metrics is None
    with pytest.raises(RuntimeError, match="ebpf_queue_metric"):
        run_benchmark(config, _SectionsTracer({"ebpf_queue_metric": queue}))  # a typo, not a field


class _GateClock:
    """A tracer that notes when the harness opens and closes its gate (CLOCK_MONOTONIC)."""

    def __init__(self) -> None:
        self.opened = self.closed = 0

    def prepare(self, backend, workload) -> None: ...

    def window_start(self) -> None:
        self.opened = time.monotonic_ns()

    def window_stop(self) -> None:
        self.closed = time.monotonic_ns()

    def abort(self) -> None: ...

    def finish(self, context: dict) -> TracerSections:
        return TracerSections.of({})


def test_the_hosts_proc_snapshot_is_outside_the_traced_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The on-CPU snapshot (a /proc read of every thread, 1–3 ms) made 300 ms slow: the gate the
    tracer sees must not contain it, at either edge (it was inside before the window's stop)."""
    from aorta.hw_queue_eval.run import oncpu

    delay_s = 0.3
    real = oncpu.snapshot

    def slow_snapshot(tids: list[int]) -> dict[int, int] | None:
        time.sleep(delay_s)
        return real(tids)

    monkeypatch.setattr(oncpu, "snapshot", slow_snapshot)
    gate = _GateClock()
    config = RunConfig("tiny_kernel_stress", 2, iterations=3, warmup=1, device="cpu")
    result = run_benchmark(config, gate)
    assert result.concurrency.get("on_cpu_queues") is not None  # the snapshots were taken
    gate_ms = (gate.closed - gate.opened) / 1e6
    assert gate_ms >= result.total_time_ms
    assert gate_ms - result.total_time_ms < delay_s * 1e3 / 2, (gate_ms, result.total_time_ms)
