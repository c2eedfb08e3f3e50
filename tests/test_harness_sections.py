"""The run result's sections, each built alone from plain inputs (run/harness.py's section
builders), without a backend or a measured window: which samples latency comes from, the notes
when something is not measured, the warnings in order, the resolved config."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aorta.hw_queue_eval.backends.base import HandoffTotals
from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.run import harness
from aorta.hw_queue_eval.workloads.base import VerifyResult, WorkloadInfo

PASSED = VerifyResult(passed=True, max_rel_error=1e-7, tolerance=1e-4, checked="every output")
FAILED = VerifyResult(passed=False, max_rel_error=0.25, tolerance=1e-4, checked="every output")


def test_latency_prefers_device_events_over_the_host_clock() -> None:
    device = [2.0, 2.0, 2.0, 2.0]
    got = harness.latency_section(True, host_times=[9.0, 9.0, 9.0, 9.0], device_times=device)
    assert got.iteration_times == device and got.latency is not None and got.latency["p50"] == 2.0
    assert got.latency_note == "per-iteration latency from device events joining every stream"
    assert got.iteration_note is None and got.warning is None


def test_latency_falls_back_to_the_host_clock_and_warns_when_unstable() -> None:
    host = [1.0, 1.0, 3.0, 3.0]  # IQR/median = 2/2 = 100 % > 10 %
    got = harness.latency_section(True, host_times=host, device_times=None)
    assert got.iteration_times == host and got.latency is not None and got.latency["median"] == 2.0
    assert got.latency_note.endswith("host clock around launch + one wait for all streams")
    assert got.warning is not None and got.warning.startswith("unstable: IQR/median = 100%")


def test_end_only_measures_no_latency_and_says_why() -> None:
    got = harness.latency_section(False, host_times=[], device_times=[1.0, 2.0])
    assert got.latency is None and got.iteration_times is None and got.warning is None
    assert got.latency_note == got.iteration_note
    assert got.latency_note is not None and "only the window time is measured" in got.latency_note


def test_warnings_come_in_order_latency_idle_streams_verification() -> None:
    assert harness.run_warnings(None, [3, 3], PASSED) == []
    assert harness.run_warnings(None, None, PASSED) == [], "no per-op counts: no idle-stream verdict"
    got = harness.run_warnings("unstable: x", [4, 0, 2, 0], FAILED)
    assert got == [
        "unstable: x",
        "streams without work in the window: [1, 3]",
        "verification FAILED: max relative error 0.25 > 0.0001",
    ]


def test_config_records_the_resolved_device_size_and_backend() -> None:
    config = RunConfig(workload="tiny_kernel_stress", streams=4, device="auto", size=None)
    got = harness.config_section(config, "cpu", "small", "cpu")
    assert (got["device"], got["size"], got["backend"]) == ("cpu", "small", "cpu")
    assert got["streams"] == 4 and got["workload"] == "tiny_kernel_stress"
    assert config.device == "auto", "the config itself is left as given"


def test_concurrency_is_busy_over_window_and_unmeasured_without_op_times() -> None:
    on_cpu: Any = {"on_cpu_queues": 1.5, "on_cpu_ms": 37.5, "on_cpu_reason": None}
    got = harness.concurrency_section([30.0, 20.0], 25.0, on_cpu)
    assert got["achieved"] == pytest.approx(2.0) and got["window_ms"] == 25.0 and got["on_cpu_queues"] == 1.5
    assert harness.concurrency_section(None, 25.0, on_cpu)["achieved"] is None
    assert harness.concurrency_section([1.0], 0.0, on_cpu)["achieved"] is None, "no window: None, not 0"


class _Window:
    """What ops_section reads from an OpWindow."""

    def __init__(self, rows: list[Any], total: int) -> None:
        self.rows, self.total = rows, total

    def per_label(self) -> dict[str, Any]:
        return {"gemm": None}

    def statistics_note(self) -> dict[str, Any]:
        return {"rows_kept": len(self.rows)}


def test_ops_say_why_ready_delays_are_missing() -> None:
    delays: Any = {"p50": 0.1}
    timed = harness.ops_section(_Window(["op"], 5), delays, True, None)
    assert (
        timed["count"] == 5 and timed["ready_to_start_ms"] == delays and timed["ready_to_start_note"] is None
    )
    assert timed["statistics"] == {"rows_kept": 1} and timed["per_label"] == {"gemm": None}
    assert timed["handoffs"]["count"] is None and "not visible" in timed["handoffs"]["reason"]
    off = harness.ops_section(_Window([], 0), None, False, None)
    assert off["ready_to_start_note"] == "per-op timing off (--no-op-timing)" and off["statistics"] is None
    blind = harness.ops_section(
        _Window(["op"], 1),
        None,
        True,
        HandoffTotals(count=3, per_queue={0: 3, 1: 0}, first_task_kinds={}, kept=3),
    )
    assert blind["ready_to_start_note"] == "the backend cannot observe when an op became ready"
    assert blind["handoffs"]["count"] == 3 and blind["handoffs"]["per_queue"] == {"0": 3}


@pytest.mark.parametrize(
    ("warmup", "checked"),
    [(2, "warm-up iteration 1 (before the window)"), (0, "measured iteration 7 (-w 0: after the window)")],
)
def test_verification_names_the_iteration_it_checked(warmup: int, checked: str) -> None:
    config = RunConfig(workload="tiny_kernel_stress", streams=2, iterations=7, warmup=warmup)
    got = harness.verification_section(FAILED, config)
    assert got == {
        "passed": False,
        "max_rel_error": 0.25,
        "tolerance": 1e-4,
        "checked": "every output",
        "outputs_of": checked,
    }


def test_metadata_describes_the_workload_and_its_queue_threads() -> None:
    info = WorkloadInfo("w", "compute", "d", 1, 8, 4, "high", "ops/s", "per_stream")
    workload: Any = SimpleNamespace(
        INFO=info, describe=lambda: {"name": "w"}, work_per_iteration=lambda: 12.0
    )
    workers = [SimpleNamespace(queue=0, tid=101), SimpleNamespace(queue=1, tid=102)]
    got = harness.metadata_section(workload, workers, 5_000)
    assert got == {
        "workload": {"name": "w"},
        "category": "compute",
        "switch_sensitivity": "high",
        "work_scaling": "per_stream",
        "work_per_iteration": 12.0,
        "workers": [{"queue": 0, "tid": 101}, {"queue": 1, "tid": 102}],
        "window_start_monotonic_ns": 5_000,
    }
