"""The CPU backend's queue pool mapping, per-op timing, ordering and error propagation."""

from __future__ import annotations

import threading
import time

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.backends.cpu import CpuBackend, assign_queues
from aorta.hw_queue_eval.config.run_config import hw_queue_pool_size


@pytest.mark.parametrize(
    ("streams", "pool", "expected"),
    [
        (1, 4, [0]),
        (3, 4, [0, 1, 2]),
        (4, 4, [0, 1, 2, 3]),
        (8, 4, [0, 1, 2, 3, 0, 1, 2, 3]),
        (6, 4, [0, 1, 2, 3, 0, 1]),
        (5, 2, [0, 1, 0, 1, 0]),
        (3, 1, [0, 0, 0]),
    ],
)
def test_hip_like_queue_assignment(streams, pool, expected):
    assert assign_queues(streams, pool) == expected


def test_pool_size_from_env():
    assert hw_queue_pool_size({}) == 4
    assert hw_queue_pool_size({"GPU_MAX_HW_QUEUES": "8"}) == 8
    for bad in ("zero", "0", "65"):
        with pytest.raises(UsageError):
            hw_queue_pool_size({"GPU_MAX_HW_QUEUES": bad})


@pytest.fixture
def backend_factory():
    made = []

    def make(streams: int, pool: int) -> CpuBackend:
        backend = CpuBackend(streams, pool_size=pool)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def sleeper(seconds: float):
    return lambda: time.sleep(seconds)


def run_one_iteration(backend: CpuBackend, body) -> list:
    backend.start_window()
    backend.begin_iteration(0)
    body(backend.streams)
    backend.end_iteration()
    backend.synchronize()
    return backend.stop_window()


def test_workers_register_distinct_thread_ids(backend_factory):
    backend = backend_factory(6, 4)
    workers = backend.workers()
    assert [w.queue for w in workers] == [0, 1, 2, 3]
    assert len({w.tid for w in workers}) == 4
    assert all(w.tid > 0 for w in workers)
    assert threading.get_native_id() not in {w.tid for w in workers}
    assert workers[0].streams == (0, 4)
    assert workers[3].streams == (3,)
    assert backend.queue_mapping()["stream_to_queue"] == [0, 1, 2, 3, 0, 1]


def rendezvous(barrier: threading.Barrier, seconds: float, timeout: float = 30):
    """An op that returns only once every party's op runs at the same time, then sleeps."""

    def op() -> None:
        barrier.wait(timeout)  # serialised ops never meet: BrokenBarrierError fails the op
        time.sleep(seconds)

    return op


def test_streams_on_separate_queues_overlap(backend_factory):
    # overlap proved by a rendezvous both ops must reach, not by wall-clock luck on a busy machine
    backend = backend_factory(2, 4)
    meet = threading.Barrier(2)
    ops = run_one_iteration(
        backend,
        lambda s: [s[0].launch(rendezvous(meet, 0.05), "a"), s[1].launch(rendezvous(meet, 0.05), "b")],
    )
    a, b = sorted(ops, key=lambda o: o.stream)
    assert a.queue != b.queue
    assert a.end_ns - a.start_ns >= 45_000_000
    assert max(a.start_ns, b.start_ns) < min(a.end_ns, b.end_ns), "ops should overlap"


@pytest.mark.slow
def test_rendezvous_fails_when_ops_share_a_queue(backend_factory):
    """The overlap check above can fail: on one queue the two ops cannot meet."""
    backend = backend_factory(2, 1)
    meet = threading.Barrier(2)
    with pytest.raises(threading.BrokenBarrierError):
        run_one_iteration(
            backend,
            lambda s: [
                s[0].launch(rendezvous(meet, 0.0, 0.5), "a"),
                s[1].launch(rendezvous(meet, 0.0, 0.5), "b"),
            ],
        )


def test_streams_sharing_a_queue_serialise(backend_factory):
    backend = backend_factory(2, 1)
    ops = run_one_iteration(
        backend, lambda s: [s[0].launch(sleeper(0.03), "a"), s[1].launch(sleeper(0.03), "b")]
    )
    a, b = sorted(ops, key=lambda o: o.start_ns)
    assert a.queue == b.queue == 0
    assert b.start_ns >= a.end_ns
    # b was ready at enqueue time but waited behind a: head-of-line blocking is visible
    assert b.start_ns - b.ready_ns >= 25_000_000


def test_wait_orders_work_across_queues(backend_factory):
    backend = backend_factory(2, 4)

    def body(streams):
        streams[0].launch(sleeper(0.04), "producer")
        streams[1].wait(streams[0])
        streams[1].launch(lambda: None, "consumer")

    ops = run_one_iteration(backend, body)
    producer = next(o for o in ops if o.label == "producer")
    consumer = next(o for o in ops if o.label == "consumer")
    assert consumer.start_ns >= producer.end_ns
    assert consumer.ready_ns >= producer.end_ns  # ready only once its dependency finished


def test_ops_recorded_only_inside_window_and_tagged(backend_factory):
    backend = backend_factory(1, 4)
    backend.streams[0].launch(lambda: None, "warmup")
    backend.synchronize()
    ops = run_one_iteration(backend, lambda s: [s[0].launch(lambda: None, "x") for _ in range(3)])
    assert [o.label for o in ops] == ["x", "x", "x"]
    assert all(o.iteration == 0 and o.start_ns >= 0 for o in ops)
    starts = [o.start_ns for o in ops]
    assert starts == sorted(starts)


def test_op_error_surfaces_on_synchronize(backend_factory):
    backend = backend_factory(2, 4)

    def boom():
        raise ValueError("kernel failed")

    backend.streams[0].launch(boom, "bad")
    backend.streams[1].launch(lambda: None, "good")
    with pytest.raises(ValueError, match="kernel failed"):
        backend.synchronize()
    backend.synchronize()  # error reported once; the backend keeps working


def test_close_stops_worker_threads():
    backend = CpuBackend(3, pool_size=2)
    names = {t.name for t in threading.enumerate()}
    assert {"aorta-hwq0", "aorta-hwq1"} <= names
    backend.close()
    backend.close()
    assert not {t.name for t in threading.enumerate()} & {"aorta-hwq0", "aorta-hwq1"}


def test_close_ends_a_worker_whose_ring_a_ctrl_c_cut_off(monkeypatch):
    """Ctrl+C can land between a launch's "queue no longer idle" and its doorbell write: the
    worker then sleeps with a task nobody rang for. close() must still end it at once (it used
    to wait 30 s per such queue for a join)."""
    import os

    backend = CpuBackend(2, pool_size=2)
    queue = backend.streams[0].queue
    deadline = time.monotonic() + 30
    while not queue._idle:  # the worker is asleep on its doorbell
        assert time.monotonic() < deadline
        time.sleep(0.001)
    real_write = os.eventfd_write
    launcher = threading.get_ident()

    def interrupted(fd: int, value: int) -> None:
        if threading.get_ident() != launcher:  # the patch is process-wide: workers write as ever
            real_write(fd, value)
            return
        monkeypatch.setattr(os, "eventfd_write", real_write)
        raise KeyboardInterrupt  # as the SIGINT handler raises it, just before the write

    monkeypatch.setattr(os, "eventfd_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        backend.streams[0].launch(lambda: None, "cut")
    began = time.monotonic()
    backend.close()
    assert time.monotonic() - began < 10
    assert not {t.name for t in threading.enumerate()} & {"aorta-hwq0", "aorta-hwq1"}


def test_each_queue_is_one_thread_no_hidden_intra_op_teams(backend_factory):
    import os

    import torch

    backend = backend_factory(3, 4)
    x = torch.randn(384, 384)
    for stream in backend.streams:
        stream.launch(lambda: [torch.mm(x, x) for _ in range(5)], "mm")
    backend.synchronize()
    task_dir = f"/proc/{os.getpid()}/task"
    comms = []
    for tid in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{tid}/comm") as fh:
                comms.append(fh.read().strip())
        except OSError:
            continue
    # OpenMP helpers inherit the worker's name; one thread per queue means intra-op threads = 1
    assert sorted(c for c in comms if c.startswith("aorta-hwq")) == ["aorta-hwq0", "aorta-hwq1", "aorta-hwq2"]


@pytest.mark.parametrize("threads", [1, 2])
def test_environment_records_the_thread_settings_each_worker_runs_with(threads):
    """What decides how the queue threads share the CPUs is in the result, as read inside each
    worker (torch's intra-op count is per thread), not as asked for."""
    import sys

    import torch

    before = torch.get_num_threads()
    backend = CpuBackend(3, pool_size=2, threads_per_queue=threads)
    try:
        env = backend.environment()
    finally:
        backend.close()
        torch.set_num_threads(before)  # the backend set it on this (the host) thread
    assert env["threads_per_queue"] == threads
    assert env["torch_intra_op_threads"] == {"host": threads, "queues": [threads, threads]}
    assert env["torch_interop_threads"] >= 1
    assert env["gil_switch_interval_s"] == sys.getswitchinterval()
    assert 1 <= env["cpus_allowed"] <= env["cpu_count"]


def test_handoffs_ring_the_doorbell_once_per_idle_queue(backend_factory):
    """Work handed to a busy queue rides with its batch; only hand-offs to an idle queue ring."""
    import os

    backend = backend_factory(2, 2)
    gate = threading.Event()

    started = threading.Event()

    def blocker() -> None:
        started.set()
        gate.wait()

    def body(streams):
        streams[0].launch(blocker, "blocker")  # queue 0 idle → rings; then it stays busy
        assert started.wait(30), "queue 0 never ran its first op"
        for _ in range(5):
            streams[0].launch(lambda: None, "rides")  # queue 0 busy → no ring
        streams[1].launch(lambda: None, "other")  # queue 1 idle → rings
        gate.set()

    run_one_iteration(backend, body)
    subs = backend.submissions()
    # per queue: its first op rang; later, the synchronize marker rings only if the queue had
    # already gone idle again (timing), never one of the five ops handed to the busy queue
    by_queue = {q: [(s.seq, s.first_kind) for s in subs if s.queue == q] for q in (0, 1)}
    for q in (0, 1):
        assert by_queue[q][0] == (0, "op")
        assert by_queue[q][1:] in ([], [(1, "marker")])
    for s in subs:  # the worker may start before the host's post-write clock read: no order there
        assert s.ring_ns <= s.rung_ns
        assert s.ring_ns <= s.start_ns
    assert all(w.doorbell_fd is not None and os.fstat(w.doorbell_fd) for w in backend.workers())


@pytest.mark.slow
def test_many_waiters_on_one_task_are_all_woken(monkeypatch):
    """Every expert stream waits for the gate's task: no waiter may miss its wake-up."""
    import threading
    import time

    from aorta.hw_queue_eval.backends import cpu

    real_event = threading.Event

    class SlowEvent(real_event):  # widens the window between "no Event yet" and publishing one
        def __init__(self) -> None:
            time.sleep(0.05)
            super().__init__()

    monkeypatch.setattr(cpu.threading, "Event", SlowEvent)
    task = cpu._Task(cpu._MARK, -1)
    waiters = [threading.Thread(target=cpu._wait_for, args=(task,), daemon=True) for _ in range(4)]
    for thread in waiters:
        thread.start()
    time.sleep(0.3)
    task.finish(time.monotonic_ns())
    for thread in waiters:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in waiters)
