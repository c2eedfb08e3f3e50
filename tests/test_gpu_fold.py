"""GPU backend in bounded memory: op events read as they complete and folded like the CPU's.

No GPU: tests/fake_cuda.py models the device (per-stream clocks, events complete once the
device's `now` passes them). Ground truths: the fake device's own log of every op (start and end
on a 1/64 ms grid, so every ns figure is recomputed by hand), the exact metrics functions over
that whole log, the number of events alive (counted by the fake), and the host waits issued.
"""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from aorta.hw_queue_eval.backends import gpu
from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.ops.devicelane import DeviceLane
from aorta.hw_queue_eval.ops.loghist import RELATIVE_ERROR
from aorta.hw_queue_eval.ops.opfold import OpWindow
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.results.run_result import validate_run_dict
from aorta.hw_queue_eval.run import harness
from aorta.hw_queue_eval.tracing.gpu_runtime_comparison import compare_gpu_runtime
from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo
from fake_cuda import DEVICE, GRID_MS, FakeEvent, install

ALPHA = RELATIVE_ERROR
LABELS = ("gemm", "add", "copy")


class Truth:
    """What the fake device really ran in the window: (iteration, stream, label, start, end) ms."""

    def __init__(self) -> None:
        self.backend: gpu.GpuBackend | None = None
        self.window_ms: float | None = None
        self.window_host_ns: tuple[int, int] | None = None  # CLOCK_MONOTONIC around start_window
        self.ops: list[tuple[int, int, str, float, float]] = []

    def records(self) -> list[OpRecord]:
        """Every op of the window as today's unfolded GPU path returned them: ns from the
        window-start event, sorted by (start, stream) in launch order."""
        base = self.window_ms
        assert base is not None
        ops = [
            OpRecord(it, st, None, label, None, round((s - base) * 1e6), round((e - base) * 1e6))
            for it, st, label, s, e in self.ops
        ]
        return sorted(ops, key=lambda o: (o.start_ns, o.stream))


TRUTH = Truth()


class Synthetic(Workload):
    """Random op counts, durations (zero included), idle gaps and cross-stream waits per stream;
    in end_only mode the device lags the host by a random amount (never more than `LAG`)."""

    INFO = WorkloadInfo(
        name="synthetic_gpu",
        category="test",
        description="synthetic ops on the fake device",
        min_streams=1,
        max_streams=8,
        recommended_streams=4,
        switch_sensitivity="high",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {"small": {}, "medium": {}, "large": {}}
    MAX_OPS_PER_STREAM = 5
    LAG = 40 * GRID_MS

    def setup(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def run_iteration(self, streams: list) -> None:
        rng, device, backend = self.rng, DEVICE, TRUTH.backend
        assert backend is not None
        device.advance(device.latest() - float(rng.choice([0, 0.2, 1])) * self.LAG)  # host ahead
        order = [
            k for k in range(len(streams)) for _ in range(int(rng.integers(0, self.MAX_OPS_PER_STREAM + 1)))
        ]
        rng.shuffle(order)
        for k in order:
            stream = streams[k]
            if rng.random() < 0.1 and len(streams) > 1:
                stream.wait(streams[int(rng.integers(0, len(streams)))])
            device.idle(stream.cuda_stream, float(rng.choice([0, 0, 1, 2, 7])) * GRID_MS)
            duration = float(rng.choice([0, 1, 3, 8, 20])) * GRID_MS
            label = LABELS[int(rng.integers(0, len(LABELS)))]
            logged = len(device.log)
            stream.launch(lambda d=duration: device.run(d), label)
            if backend.recording and backend.op_timing:
                _, start, end = device.log[logged]
                TRUTH.ops.append((backend.iteration, k, label, start, end))

    def work_per_iteration(self) -> float:
        return 1.0

    def verify(self) -> VerifyResult:
        return VerifyResult(True, 0.0, 1e-6, "fake device")


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    """run_benchmark on the GPU backend over the fake device, with the Synthetic workload."""
    device = install(monkeypatch)
    TRUTH.__init__()

    def create_backend(name: str, streams: int, **_: object) -> gpu.GpuBackend:
        backend = gpu.GpuBackend(streams, "cuda:0")
        start_window = backend.start_window

        def recorded_start() -> None:
            before = time.monotonic_ns()
            start_window()
            TRUTH.window_host_ns = (before, time.monotonic_ns())
            TRUTH.window_ms = DEVICE.last_recorded  # the window-start event

        backend.start_window = recorded_start  # type: ignore[method-assign]
        TRUTH.backend = backend
        return backend

    monkeypatch.setattr(harness, "create_backend", create_backend)
    monkeypatch.setattr(harness, "resolve_device", lambda d: "cuda:0")
    monkeypatch.setattr(harness, "get_workload_class", lambda name: Synthetic)
    return device


def _watch(backend: gpu.GpuBackend, seen: dict) -> None:
    """Around each fold_pending: the most events and op records held (overall, and once the
    window has more ops than rows), how many events were read inside the window, and whether
    the ops left pending are never more than the rows (up to the cap), then a chunk or the ops
    the device has not finished."""
    seen.update(events=0, records=0, events_past_cap=0, folds=0, over=0, in_flight=0, unreleased=0)
    seen.update(reads_below_cap=0)
    others = FakeEvent.alive - backend.live_events()  # events of earlier tests not collected yet
    fold_pending = backend.fold_pending
    cap = harness.MAX_STORED_OPS

    def watched() -> None:
        past_cap = len(TRUTH.ops) > cap
        seen["events"] = max(seen["events"], backend.live_events())
        if seen.get("read"):  # since the first read past the cap
            seen["events_past_cap"] = max(seen["events_past_cap"], backend.live_events())
        seen["read"] = past_cap
        seen["records"] = max(seen["records"], backend.held_op_records())
        fold_pending()
        seen["folds"] += 1
        if not past_cap:
            seen["reads_below_cap"] = DEVICE.elapsed_calls
        in_flight = DEVICE.in_flight()
        seen["in_flight"] = max(seen["in_flight"], in_flight)
        allowed = max(gpu.CHUNK_OPS - 1, in_flight) if past_cap else cap
        seen["over"] = max(seen["over"], backend.pending_ops - allowed)
        # the fake counts every event object alive: the backend keeps no hidden reference
        seen["unreleased"] = max(seen["unreleased"], FakeEvent.alive - others - backend.live_events())

    backend.fold_pending = watched  # type: ignore[method-assign]


def _run(sync_mode: str, iterations: int, streams: int = 4, watch: dict | None = None) -> dict:
    config = RunConfig(
        workload="synthetic_gpu",
        streams=streams,
        iterations=iterations,
        warmup=2,
        device="cuda",
        seed=11,
        sync_mode=sync_mode,
    )
    if watch is not None:
        create = harness.create_backend

        def create_watched(*args: object, **kwargs: object) -> gpu.GpuBackend:
            backend = create(*args, **kwargs)
            _watch(backend, watch)
            watch["backend"] = backend
            return backend

        harness.create_backend = create_watched  # restored by monkeypatch (fake_gpu)
    return harness.run_benchmark(config).to_dict()


def _op_figures(result: dict) -> dict:
    """The result's figures computed from ops (everything but wall-clock timings)."""
    return {
        "op_intervals": result["op_intervals"],
        "ops": result["ops"],
        "per_stream_times_ms": result["per_stream_times_ms"],
        "per_stream_op_counts": result["per_stream_op_counts"],
        "switch_latency": result["switch_latency"],
        "iteration_times_ms": result["iteration_times_ms"],
    }


@pytest.mark.parametrize("sync_mode", ["per_iteration", "end_only"])
def test_below_the_cap_every_op_is_a_row_as_before(
    fake_gpu, monkeypatch: pytest.MonkeyPatch, sync_mode: str
) -> None:
    """A window with fewer ops than the row cap is read after it ends, as before: no event is
    read inside it even with a chunk of 40 ops, and its rows and figures are those of a
    recomputation from the device's own log."""
    figures = {}
    for chunk in (40, 10**9):
        monkeypatch.setattr(gpu, "CHUNK_OPS", chunk)
        fake_gpu.reset()
        TRUTH.__init__()
        watch: dict = {}
        result = _run(sync_mode, iterations=60, watch=watch)
        figures[chunk] = _op_figures(result)
        ops = TRUTH.records()
        assert 40 * 3 < len(ops) < harness.MAX_STORED_OPS
        assert watch["folds"] == 60 and watch["reads_below_cap"] == 0 and watch["over"] <= 0
        assert result["ops"]["count"] == len(ops)
        assert result["op_intervals"] == harness.compact_ops(
            ops, TRUTH.backend.window_waits(), len(ops), TRUTH.backend.window_wait_count()
        )
        assert result["ops"]["statistics"]["percentile_relative_error"] == 0.0
        assert result["per_stream_op_counts"] == metrics.per_stream_op_counts(ops, 4)
        assert result["per_stream_times_ms"] == metrics.per_stream_busy_ms(ops, 4)
        assert result["ops"]["per_label"] == metrics.per_label_summary(ops)
        assert result["ops"]["ready_to_start_ms"] is None
        assert result["switch_latency"] == metrics.switch_analysis(
            ops, result["total_time_ms"], TRUTH.backend.window_wait_count()
        )
        assert result["switch_latency"]["switch_count"] > 0
        # host waits: warm-up, (per iteration,) the window's end, stop_window, the plain window
        per_iteration = 60 if sync_mode == "per_iteration" else 0
        assert fake_gpu.syncs == 2 + per_iteration + 3
    assert figures[40] == figures[10**9]


def test_the_window_start_is_on_the_clock_ebpf_records_use(fake_gpu) -> None:
    """metadata.window_start_monotonic_ns of a GPU run: CLOCK_MONOTONIC (bpftrace's nsecs) taken
    in start_window, the origin --trace-out puts eBPF records at (null before: no GPU runtime
    calls, no kernel timeline in a GPU run's trace)."""
    result = _run("per_iteration", iterations=3)
    assert TRUTH.window_host_ns is not None
    before, after = TRUTH.window_host_ns
    assert before <= result["metadata"]["window_start_monotonic_ns"] <= after


@pytest.mark.parametrize("sync_mode", ["per_iteration", "end_only"])
def test_past_the_cap_memory_is_bounded_and_the_figures_exact(
    fake_gpu, monkeypatch: pytest.MonkeyPatch, sync_mode: str
) -> None:
    """~6,000 ops, rows capped at 500, ops read in chunks of 64: the events held are the cap's
    ops' until the window passes the cap, then at most one chunk + an iteration's ops + those the
    device has not finished, whatever the length of the run; the figures are exact."""
    chunk, cap, streams = 64, 500, 6
    monkeypatch.setattr(gpu, "CHUNK_OPS", chunk)
    monkeypatch.setattr(gpu, "CHUNK_ITERATIONS", 16)
    monkeypatch.setattr(harness, "MAX_STORED_OPS", cap)
    watch: dict = {}
    result = _run(sync_mode, iterations=400, streams=streams, watch=watch)
    assert validate_run_dict(result) == []
    ops = TRUTH.records()
    total = len(ops)
    assert total > 10 * cap
    assert watch["folds"] == 400
    assert watch["over"] <= 0  # past the cap, after a read only what is still running stays
    assert watch["unreleased"] <= 0
    if sync_mode == "per_iteration":  # every op before the host wait is read, none queried
        assert watch["in_flight"] == 0
        assert DEVICE.queries == 0  # nor an iteration event: all complete after the host wait
    per_iteration_max = streams * Synthetic.MAX_OPS_PER_STREAM
    bound = chunk + per_iteration_max + watch["in_flight"]
    iteration_events = 2 * (16 + 2) if sync_mode == "per_iteration" else 0
    assert watch["events_past_cap"] <= 2 * bound + iteration_events + 2 <= watch["events"] < total / 5
    assert watch["events"] <= 2 * (cap + per_iteration_max) + iteration_events + 2  # the cap's ops
    assert watch["records"] <= 2 * cap + bound + streams + 1 < total / 3
    # exact over every op
    assert result["ops"]["count"] == result["op_intervals"]["total_ops"] == total
    assert result["op_intervals"]["truncated"] and len(result["op_intervals"]["rows"]) <= cap
    assert result["per_stream_op_counts"] == metrics.per_stream_op_counts(ops, streams)
    assert result["per_stream_times_ms"] == pytest.approx(metrics.per_stream_busy_ms(ops, streams), rel=1e-12)
    want_labels = metrics.per_label_summary(ops)
    for label, got in result["ops"]["per_label"].items():
        want = want_labels[label]
        assert got["count"] == want["count"]
        for key in ("mean", "std", "min", "max"):
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (label, key)
        for key in ("p50", "p95", "p99"):
            assert abs(got[key] - want[key]) <= ALPHA * want[key] + 1e-12, (label, key)
    assert result["ops"]["ready_to_start_ms"] is None
    assert result["instrumentation"]["op_fold_ms"] > 0  # measured on GPU now (was null)
    stats = result["ops"]["statistics"]
    assert stats["ops"] == total and stats["percentile_relative_error"] == ALPHA
    assert "ready" not in stats["exact"]
    # the device-wide lane: the same gaps found, counted and matched as over every op
    got, want = result["switch_latency"], metrics.switch_analysis(ops)
    for key in ("switch_count", "no_switch_count", "matched_switch_count", "matched_on_both_kinds"):
        assert got[key] == want[key], key
    assert got["switch_count"] > 100 and got["no_switch_count"] > 100
    assert got["per_lane"].keys() == want["per_lane"].keys() == {"None"}
    # no ready time on GPU: no gap is known to be ready, so the ready-gap figures are null with
    # the reason, and the every-gap figure is the one compared
    assert got["switch_overhead_ms"] is None and got["reason"].startswith("readiness unknown")
    assert got["gap_readiness"]["unknown"] == got["switch_count"] + got["no_switch_count"]
    assert got["launch_starvation"]["gaps"] is None
    assert got["launch_starvation"]["reason"].startswith("readiness unknown")
    assert got["pairs"] == want["pairs"] == []  # pairs list ready-gap groups only
    got_all, want_all = got["all_gaps"], want["all_gaps"]
    assert got_all["matched_switch_count"] == want_all["matched_switch_count"] > 0
    # every-gap figure: the same groups as over every op, medians within α
    groups, _ = metrics.match_gaps(metrics.lane_gaps(ops))
    assert sum(len(g.switch) for g in groups) == got_all["matched_switch_count"]
    scale = max(float(np.median(g.switch) + np.median(g.baseline)) for g in groups)
    assert abs(got_all["switch_overhead_ms"] - want_all["switch_overhead_ms"]) <= ALPHA * scale + 1e-12
    # the eBPF GPU comparison's harness figures: over every op, not over the rows
    backend = watch["backend"]
    section = {"families": {"gpu_runtime": {"metrics": {"streams": []}}}}
    folded = backend.folded_ops()
    assert compare_gpu_runtime(section, ops[:cap], streams, folded) == compare_gpu_runtime(
        section, ops, streams
    )
    if sync_mode == "per_iteration":
        assert len(result["iteration_times_ms"]) == 400


def test_the_bound_does_not_grow_with_iterations(fake_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """N and 4N iterations: the most events held is the same bound, not 4 × more."""
    monkeypatch.setattr(gpu, "CHUNK_OPS", 64)
    monkeypatch.setattr(harness, "MAX_STORED_OPS", 300)
    held = {}
    for iterations in (100, 400):
        fake_gpu.reset()
        TRUTH.__init__()
        watch: dict = {}
        _run("end_only", iterations=iterations, watch=watch)
        held[iterations] = (watch["events"], watch["records"], len(TRUTH.ops))
    assert held[400][2] > 3.5 * held[100][2]
    assert held[400][0] <= held[100][0] * 1.5 and held[400][1] <= held[100][1] * 1.5


def test_incomplete_ops_are_not_read_until_they_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    device = install(monkeypatch)
    monkeypatch.setattr(gpu, "CHUNK_OPS", 2)
    gc.collect()
    others = FakeEvent.alive  # events of earlier tests (none should survive a collection)
    backend = gpu.GpuBackend(2, "cuda:0")
    backend.row_cap = 2  # fold from the start: the device lane is exercised too
    backend.set_instrumentation(op_timing=True, iteration_joins=False)
    backend.start_window()
    window = device.last_recorded
    backend.begin_iteration(0)
    fast, slow = backend.streams
    for _ in range(3):  # 0-1, 1-2, 2-3 (grid steps of 1/64 ms)
        fast.launch(lambda: device.run(1 * GRID_MS), "fast")
    for _ in range(3):  # 0-10, 10-20, 20-30
        slow.launch(lambda: device.run(10 * GRID_MS), "slow")
    backend.end_iteration()
    assert backend.live_events() == 2 * 6 + 1 == FakeEvent.alive - others
    device.advance(window + 5 * GRID_MS)  # fast's ops are done; slow's first is not
    queries = device.queries
    backend.fold_pending()  # elapsed_time on an incomplete event would raise
    assert device.queries - queries == 3 + 1  # fast's three, slow's first: its later ops not asked
    assert backend.pending_ops == 3
    assert backend.live_events() == 2 * 3 + 1 == FakeEvent.alive - others  # fast's events released
    device.advance(window + 19 * GRID_MS)  # slow's first op done, its second not
    backend.fold_pending()
    assert backend.pending_ops == 2 and backend.live_events() == 2 * 2 + 1 == FakeEvent.alive - others
    rows = backend.stop_window()  # its host wait completes the rest
    assert backend.live_events() == 1 == FakeEvent.alive - others  # the window event
    step = round(GRID_MS * 1e6)  # 15,625 ns
    every = [
        OpRecord(0, 0, None, "fast", None, 0 * step, 1 * step),
        OpRecord(0, 1, None, "slow", None, 0 * step, 10 * step),
        OpRecord(0, 0, None, "fast", None, 1 * step, 2 * step),
        OpRecord(0, 0, None, "fast", None, 2 * step, 3 * step),
        OpRecord(0, 1, None, "slow", None, 10 * step, 20 * step),
        OpRecord(0, 1, None, "slow", None, 20 * step, 30 * step),
    ]
    assert rows == every[:2]  # the first ops by start, at most row_cap
    folded = backend.folded_ops()
    assert folded is not None and folded.total == 6
    assert folded.per_stream_op_counts() == [3, 3]
    assert folded.per_stream_busy_ms() == [3 * step / 1e6, 30 * step / 1e6]
    assert folded.stream_gaps_ns() == (0, 4)  # each stream's ops back to back
    got = OpWindow(rows, folded).switch_analysis()
    # by hand: fast 1-2 after fast 0-1, fast 2-3 after 1-2, slow 10-20 after slow 0-10 and
    # slow 20-30 after 10-20, all 0 ns; the first op of each stream ends nothing before it
    assert (got["switch_count"], got["no_switch_count"]) == (0, 4)
    want = metrics.switch_analysis(every)
    assert (want["switch_count"], want["no_switch_count"]) == (0, 4)


@pytest.mark.parametrize("seed", range(12))
def test_device_lane_gaps_equal_the_exact_ones_under_any_completion_order(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random streams, zero-length ops and ties, idle streams, overlapping iterations, a device
    that lags the host by a random amount, reads between every iteration: the lane gaps of the
    fold are exactly those of metrics.lane_gaps over every op."""
    device = install(monkeypatch)
    monkeypatch.setattr(gpu, "CHUNK_OPS", 1)
    rng = np.random.default_rng(seed)
    streams = int(rng.integers(2, 6))
    backend = gpu.GpuBackend(streams, "cuda:0")
    backend.row_cap = 50
    backend.set_instrumentation(op_timing=True, iteration_joins=bool(seed % 2))
    backend.start_window()
    base = device.last_recorded
    truth = []
    for iteration in range(60):
        backend.begin_iteration(iteration)
        for _ in range(int(rng.integers(0, 3 * streams))):
            k = int(rng.integers(0, streams))
            if rng.random() < 0.3:  # idle for a while, then launched after others completed
                device.idle(backend.streams[k].cuda_stream, float(rng.integers(0, 4)) * GRID_MS)
            d = float(rng.choice([0, 0, 1, 2, 5])) * GRID_MS
            backend.streams[k].launch(lambda d=d: device.run(d), LABELS[k % 3])
            _, s, e = device.log[-1]
            truth.append(
                OpRecord(
                    iteration, k, None, LABELS[k % 3], None, round((s - base) * 1e6), round((e - base) * 1e6)
                )
            )
            if rng.random() < 0.2:
                device.advance(device.now + float(rng.integers(0, 4)) * GRID_MS)
        backend.end_iteration()
        device.advance(device.latest() - float(rng.integers(0, 12)) * GRID_MS)
        backend.fold_pending()
    ops = backend.stop_window()
    truth.sort(key=lambda o: (o.start_ns, o.stream))
    assert 0 < len(ops) <= 50 and ops == truth[: len(ops)]
    folded = backend.folded_ops()
    assert folded is not None and folded.total == len(truth)
    want: dict = {}
    for g in metrics.lane_gaps(truth):
        key = (g.lane, g.after, g.before, g.switch, g.ready)
        want.setdefault(key, []).append(g.gap_ms)
    got = folded.lane_gap_histograms()
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}
    for key, hist in got.items():
        values = np.asarray(want[key]) * 1e6
        reps, counts = hist.items()
        assert np.allclose(np.sort(np.repeat(reps, counts)), np.sort(values), rtol=ALPHA, atol=1e-9), key


def test_device_lane_by_hand() -> None:
    """Three streams, columns (iteration, stream, label, -, start, end). The previous op of each
    op is the one that ended last at or before its start, over every stream."""
    lane = DeviceLane(6, 1, 4, 5)
    a = (0, 0, 0, 0, 0, 10)
    b = (0, 1, 0, 0, 2, 4)
    c = (0, 2, 0, 0, 5, 12)  # after b (4)
    d = (0, 1, 0, 0, 11, 13)  # after a (10): c still runs
    e = (0, 0, 0, 0, 12, 12)  # zero length: after c (12, its own end too: e starts at 12 and
    #                           ends at 12, later in the tie order than c by start)
    lane.push(np.array([a, b, c], dtype=np.int64))
    previous, ops = lane.settle(6)  # a, b, c start before 6; b's and c's previous are known
    assert [tuple(p) for p in previous] == [b] and [tuple(o) for o in ops] == [c]
    assert lane.held() == 3  # a and c end after 6; b is the last to end before it
    lane.push(np.array([d, e], dtype=np.int64))
    previous, ops = lane.settle(None)
    assert [tuple(o) for o in ops] == [d, e]
    assert [tuple(p) for p in previous] == [a, e]
    assert lane.held() == 0
    # the same as the exact definition over every op
    recs = [OpRecord(r[0], r[1], None, "k", None, r[4], r[5]) for r in (a, b, c, d, e)]
    recs.sort(key=lambda o: (o.start_ns, o.stream))
    gaps = metrics.lane_gaps(recs)
    assert sorted(g.gap_ms * 1e6 for g in gaps) == [0, 1, 1]


def test_a_rarely_used_stream_does_not_hold_back_the_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream 1 runs one op every 50 iterations (a collective, say) while the device lags the
    host: an idle stream holds nothing back (its next op starts after every op read so far), and
    while its op runs only the ops read meanwhile wait for their lane gap (a few iterations'
    worth), not every op since its previous op 50 iterations ago."""
    device = install(monkeypatch)
    monkeypatch.setattr(gpu, "CHUNK_OPS", 8)
    backend = gpu.GpuBackend(2, "cuda:0")
    backend.row_cap = 20
    backend.set_instrumentation(op_timing=True, iteration_joins=False)
    backend.start_window()
    busy, rare = backend.streams
    held = []
    for iteration in range(300):
        backend.begin_iteration(iteration)
        for _ in range(10):
            busy.launch(lambda: device.run(1 * GRID_MS), "busy")
        if iteration % 50 == 25:
            rare.launch(lambda: device.run(30 * GRID_MS), "rare")  # 3 iterations long
        backend.end_iteration()
        device.advance(device.latest() - 5 * GRID_MS)  # the last half iteration still runs
        if iteration % 50 == 25:
            device.now = min(device.now, device.log[-1][1] + GRID_MS)  # the rare op just started
        backend.fold_pending()
        held.append(backend.held_op_records())
    backend.stop_window()
    assert backend.folded_ops().total == 300 * 10 + 6
    assert max(held) <= backend.row_cap + 4 * 10 + 8 + 2  # rows + ~3 iterations + a chunk


def test_iteration_events_are_read_in_bounded_memory_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-op-timing, per_iteration: no op events, but two per iteration on the timer stream;
    they are read once CHUNK_ITERATIONS pairs are held, and the times are those of the device."""
    device = install(monkeypatch)
    monkeypatch.setattr(gpu, "CHUNK_ITERATIONS", 16)
    backend = gpu.GpuBackend(2, "cuda:0")
    backend.set_instrumentation(op_timing=False, iteration_joins=True)
    backend.start_window()
    most = 0
    for iteration in range(200):
        backend.begin_iteration(iteration)
        with device.stream(backend.streams[iteration % 2].cuda_stream):
            device.run((iteration % 5 + 1) * GRID_MS)  # an op of 1..5 grid steps
        backend.end_iteration()
        backend.synchronize()
        most = max(most, backend.live_events())
        backend.fold_pending()
    assert most <= 2 * 16 + 1
    times = backend.iteration_times_ms()
    assert times == [(i % 5 + 1) * GRID_MS for i in range(200)]
