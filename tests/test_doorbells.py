"""Finding a live CPU-backend process's doorbells from /proc (ebpf-attach --pid), checked against
the backend's own registry in this very process; no bpftrace needed."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator

import pytest

from aorta.ebpf.doorbells import Doorbells, find_doorbells


def _named_sleeper(name: str, stop: threading.Event) -> threading.Thread:
    """A thread named like a queue worker that never waits on a doorbell (a helper it started)."""

    named = threading.Event()

    def body() -> None:
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
        named.set()
        stop.wait()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert named.wait(10)
    return thread


@pytest.fixture
def backend() -> Iterator[object]:
    from aorta.hw_queue_eval.backends.cpu import CpuBackend

    b = CpuBackend(3, pool_size=2)
    b.synchronize()  # the workers are idle: blocked reading their doorbells
    yield b
    b.close()


def test_workers_and_their_doorbells_are_found_helpers_are_not(backend: object) -> None:
    stop = threading.Event()
    helper = _named_sleeper("aorta-hwq1", stop)  # same name as queue 1's worker, no doorbell
    try:
        found = find_doorbells([os.getpid()], timeout_s=5.0)
    finally:
        stop.set()
        helper.join()
    registry = {(w.tid, w.queue, w.doorbell_fd) for w in backend.workers()}  # type: ignore[attr-defined]
    assert {(w.tid, w.queue, w.doorbell_fd) for w in found.workers} == registry
    assert {(tid, q, fd) for _pid, fd, tid, q in found.doorbells} == registry
    assert all(pid == os.getpid() for pid, *_ in found.doorbells)
    assert found.unresolved == {}
    assert found.report()["complete"] is True


def test_a_queue_whose_worker_never_waits_is_unresolved_and_totals_are_null(backend: object) -> None:
    from aorta.hw_queue_eval.commands.ebpf import partial_queues

    stop = threading.Event()
    busy = _named_sleeper("aorta-hwq7", stop)  # a "queue 7" that never waits on a doorbell
    try:
        found = find_doorbells([os.getpid()], timeout_s=0.05)
    finally:
        stop.set()
        busy.join()
    assert set(found.unresolved) == {7}
    assert "never seen waiting on its doorbell" in found.unresolved[7]
    assert {w.queue for w in found.workers} == {0, 1}
    section = {"source": "cpu_sched", "total_submissions": 10, "total_dispatches": 10}
    partial_queues(section, found)
    assert section["total_submissions"] is None and section["total_dispatches"] is None
    assert "q7" in section["summary_reason"]
    complete = {"source": "cpu_sched", "total_submissions": 10}
    partial_queues(complete, Doorbells())
    assert complete["total_submissions"] == 10


def test_a_process_without_queues_has_no_doorbells() -> None:
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = find_doorbells([other.pid], timeout_s=0.01)
    finally:
        other.kill()
        other.wait()
    assert found.doorbells == () and found.unresolved == {} and found.workers == []
