"""Stream priority (issue 22 item 4): the CPU model serves higher-priority queues first, the GPU
path creates torch streams with priorities, policies hand the spec to the child, bad specs exit 2.

Ground truth for the CPU model: the ops run on a FIFO "device" (one op at a time, in the order
they reach it) for known durations, which logs the order they ran in. Under priority, once a
latency-critical op is queued no low-priority op may start until the burst of latency-critical
ops is done (only the ops already started, at most one per low queue, run before it)."""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.backends.cpu import CpuBackend
from aorta.hw_queue_eval.backends.priority import (
    PRIORITY_OPTION,
    parse_spec,
    torch_priorities,
)
from conftest import load_json, run_cli_inprocess

LOW_STREAMS = 3
LOW_OPS = 12
LOW_S = 0.002
LC_OPS = 4
LC_S = 0.001


class FifoDevice:
    """One execution unit: ops hold it in ticket order for their known duration."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next = 0
        self._serving = 0
        self.order: list[str] = []

    def op(self, name: str, seconds: float):
        def run() -> None:
            with self._cond:
                ticket = self._next
                self._next += 1
                while self._serving != ticket:
                    self._cond.wait()
            self.order.append(name)
            time.sleep(seconds)
            with self._cond:
                self._serving += 1
                self._cond.notify_all()

        return run


def _one_run(priorities):
    backend = CpuBackend(1 + LOW_STREAMS, pool_size=4, priorities=priorities)
    device = FifoDevice()
    try:
        backend.start_window()
        backend.begin_iteration(0)
        for stream in range(1, 1 + LOW_STREAMS):
            for _ in range(LOW_OPS):
                backend.streams[stream].launch(device.op("low", LOW_S), "bg")
        time.sleep(3 * LOW_S)  # the low queues are busy when the latency-critical burst comes
        for _ in range(LC_OPS):
            backend.streams[0].launch(device.op("lc", LC_S), "lc")
        backend.synchronize()
        backend.end_iteration()
        records = backend.stop_window()
    finally:
        backend.close()
    return records, device.order


def _lc_latency_ms(records) -> float:
    return statistics.mean((r.end_ns - r.ready_ns) / 1e6 for r in records if r.stream == 0)


def test_cpu_priority_serves_the_latency_critical_stream_first():
    baseline, prioritized = [], []
    for _ in range(3):  # interleaved rounds: the machine's noise hits both alike
        records, _order = _one_run(None)
        baseline.append(_lc_latency_ms(records))
        records, order = _one_run([1, -1, -1, -1])
        prioritized.append(_lc_latency_ms(records))
        # queue order: between the first and the last latency-critical op nothing else ran
        first = order.index("lc")
        last = len(order) - 1 - order[::-1].index("lc")
        assert order[first : last + 1] == ["lc"] * LC_OPS, order
        # and no low op started while a latency-critical op was queued or running
        for lc in (r for r in records if r.stream == 0):
            starts = [r.start_ns for r in records if r.stream != 0]
            assert not [s for s in starts if lc.ready_ns <= s <= lc.end_ns]
    assert statistics.median(prioritized) < statistics.median(baseline), (prioritized, baseline)


def test_cpu_priority_keeps_levels_in_separate_queues():
    backend = CpuBackend(4, pool_size=1, priorities=[1, -1, 0, -1])
    try:
        mapping = backend.queue_mapping()
    finally:
        backend.close()
    queues = mapping["stream_to_queue"]
    assert queues[1] == queues[3]  # same level: shares the level's one queue
    assert len({queues[0], queues[1], queues[2]}) == 3
    assert mapping["stream_priority"] == ["high", "low", "normal", "low"]


def test_a_wait_on_a_low_stream_does_not_deadlock():
    backend = CpuBackend(2, pool_size=2, priorities=[1, -1])
    done: list[str] = []
    try:
        backend.start_window()
        backend.begin_iteration(0)
        backend.streams[1].launch(lambda: done.append("low"), "low")
        backend.streams[0].wait(backend.streams[1])
        backend.streams[0].launch(lambda: done.append("high"), "high")
        backend.synchronize()
        backend.end_iteration()
        backend.stop_window()
    finally:
        backend.close()
    assert done == ["low", "high"]


def test_spec_parsing_and_torch_mapping():
    assert parse_spec("0=high,rest=low", 3) == [1, -1, -1]
    assert parse_spec("2=low", 3) == [0, 0, -1]
    # torch: priority_range() is (least, greatest), a lower number is a higher priority
    assert torch_priorities([1, 0, -1], (0, -1)) == [-1, 0, 0]
    assert torch_priorities([1, 0, -1], (1, -1)) == [-1, 0, 1]


@pytest.mark.parametrize(
    "spec, words",
    [
        ("0=urgent", "not one of high, normal, low"),
        ("5=high", "stream 5 does not exist"),
        ("0=high,0=low", "given twice"),
        ("high", "is not STREAM=LEVEL"),
        ("", "give STREAM=LEVEL"),
    ],
)
def test_bad_specs_name_the_problem(spec, words):
    with pytest.raises(UsageError, match=words):
        parse_spec(spec, 2)


class _FakeStream:
    def __init__(self, device, priority):
        self.device, self.priority = device, priority
        self.cuda_stream = id(self)


def test_gpu_backend_creates_streams_with_priorities(monkeypatch):
    torch = pytest.importorskip("torch")
    from aorta.hw_queue_eval.backends import gpu

    made: list[_FakeStream] = []

    def factory(device, priority):
        made.append(_FakeStream(device, priority))
        return made[-1]

    monkeypatch.setattr(torch.cuda, "set_device", lambda _d: None)
    # a CPU build of torch has no priority_range (it is a method of the CUDA stream base)
    monkeypatch.setattr(torch.cuda.Stream, "priority_range", staticmethod(lambda: (0, -1)), raising=False)
    monkeypatch.setattr(gpu, "_torch_stream", factory)  # also the timer stream
    backend = gpu.GpuBackend(3, device="cuda:0", priorities=[1, -1, -1], stream_factory=factory)
    assert [s.priority for s in made[:3]] == [-1, 0, 0]
    assert made[3].priority is None  # the timer stream: the default priority
    assert backend.queue_mapping()["stream_priority"] == ["high", "low", "low"]
    assert backend.queue_mapping()["torch_stream_priority"] == [-1, 0, 0]
    made.clear()
    gpu.GpuBackend(2, device="cuda:0", stream_factory=factory)
    assert [s.priority for s in made[:2]] == [None, None]


FAST = ("-d", "cpu", "-i", "4", "-w", "1", "--size", "small")


def _one_line_exit_2(proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(
    "spec, words",
    [
        ('"0=urgent"', ("stream_priority", "not one of high, normal, low")),
        ('"zero=high"', ("stream_priority", "is not STREAM=LEVEL")),
        ("3", ("stream_priority", "give STREAM=LEVEL")),
    ],
)
def test_bad_stream_priority_in_a_policy_file_exits_2(tmp_path, spec, words):
    from conftest import run_cli_inprocess

    path = tmp_path / "p.toml"
    path.write_text(f"[policies.mine]\nstream_priority = {spec}\n")
    proc = run_cli_inprocess(
        "policy-sweep", "hetero_kernels", "--streams", "2", "--policy-file", str(path), *FAST
    )
    _one_line_exit_2(proc, *words)


def test_stream_number_beyond_streams_exits_2_before_running(tmp_path):
    from conftest import run_cli_inprocess

    path = tmp_path / "p.toml"
    path.write_text('[policies.mine]\nstream_priority = "5=high,rest=low"\n')
    out = tmp_path / "o.json"
    proc = run_cli_inprocess(
        "policy-sweep", "hetero_kernels", "--streams", "2", "--policy-file", str(path), *FAST, "-o", str(out)
    )
    _one_line_exit_2(proc, "stream 5 does not exist with --streams 2")
    assert not out.exists()


def test_bad_stream_priority_on_run_exits_2(tmp_path):
    out = tmp_path / "r.json"
    args = ("run", "hetero_kernels", "--streams", "2", *FAST, "-o", str(out))
    proc = run_cli_inprocess(*args, PRIORITY_OPTION, "0=highest")
    _one_line_exit_2(proc, PRIORITY_OPTION, "not one of high, normal, low")
    assert not out.exists()


def test_the_environment_sets_no_priorities(tmp_path, monkeypatch):
    """Priorities come from the option (a policy passes it on), never from a variable."""
    monkeypatch.setenv("AORTA_STREAM_PRIORITY", "0=low")
    out = tmp_path / "r.json"
    proc = run_cli_inprocess("run", "hetero_kernels", "--streams", "2", *FAST, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = load_json(out)
    assert data["queue_mapping"]["stream_priority"] is None
    assert data["config"]["stream_priority"] is None
    proc = run_cli_inprocess(
        "run", "hetero_kernels", "--streams", "2", *FAST, "-o", str(out), PRIORITY_OPTION, "1=high"
    )
    assert proc.returncode == 0, proc.stderr
    data = load_json(out)
    assert data["queue_mapping"]["stream_priority"] == ["normal", "high"]
    assert data["config"]["stream_priority"] == "1=high"


@pytest.mark.slow
def test_policy_sweep_runs_and_ranks_stream_priority_policies(tmp_path):
    from conftest import load_json, run_cli

    out = tmp_path / "p.json"
    proc = run_cli(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policies",
        "baseline,stream_priority_lc,stream_priority_inverse",
        *FAST,
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    data = load_json(out)
    got = {p["key"]["policy"]: p for p in data["points"]}
    expect = {
        "baseline": None,
        "stream_priority_lc": ["high", "low", "low", "low"],
        "stream_priority_inverse": ["low", "high", "high", "high"],
    }
    for name, levels in expect.items():
        point = got[name]
        assert point["status"] == "ok", point.get("error")
        assert point["result"]["queue_mapping"]["stream_priority"] == levels
        assert point["in_effect"]["stream_priority"] == levels
        assert point["policy"]["stream_priority"] == BUILTIN[name]
    rows = {r["policy"]: r for r in data["summary"]["rows"]}
    assert set(rows) == set(expect)
    assert rows["stream_priority_lc"]["vs_baseline"] is not None  # compared like any policy
    assert "stream_priority_lc" in proc.stdout


BUILTIN = {
    "baseline": None,
    "stream_priority_lc": "0=high,rest=low",
    "stream_priority_inverse": "0=low,rest=high",
}
