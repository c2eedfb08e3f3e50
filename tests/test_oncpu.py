"""Queues running on a CPU: known on-CPU times in, known concurrency out; real threads agree
with their own CPU clocks; the interpretation line says which figure it uses."""

from __future__ import annotations

import threading
import time

import pytest

from aorta.hw_queue_eval.backends.cpu import _set_thread_name
from aorta.hw_queue_eval.report.console import concurrency_line
from aorta.hw_queue_eval.run import oncpu


def test_on_cpu_concurrency_from_known_counters():
    start = {10: 1_000_000, 11: 5_000_000}
    stop = {10: 51_000_000, 11: 30_000_000, 12: 25_000_000}  # 12 was born in the window
    out = oncpu.on_cpu_concurrency(start, stop, window_ms=100.0)
    assert out["on_cpu_ms"] == pytest.approx(50 + 25 + 25)
    assert out["on_cpu_queues"] == pytest.approx(1.0)
    assert out["on_cpu_reason"] is None


def test_on_cpu_concurrency_is_null_with_reason_without_counters():
    out = oncpu.on_cpu_concurrency(None, None, 10.0)
    assert out["on_cpu_queues"] is None
    assert "no per-thread on-CPU counters" in out["on_cpu_reason"]
    assert oncpu.snapshot([]) is None


def _spinner(
    seconds_cpu: float,
    measured: list[float],
    started: threading.Event,
    go: threading.Event,
    done: threading.Event,
    name: str,
) -> None:
    _set_thread_name(name)
    measured.append(threading.get_native_id())
    started.set()
    go.wait()
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds_cpu:
        pass
    measured.append(time.thread_time() - t0)
    done.wait()  # stay alive until the stop snapshot: an exited thread leaves /proc


def test_snapshot_matches_each_threads_own_cpu_clock():
    # a busy queue thread (known CPU time by its own CLOCK_THREAD_CPUTIME_ID) and a sleeping one
    busy, started, go, done = [], threading.Event(), threading.Event(), threading.Event()
    spinner = threading.Thread(target=_spinner, args=(0.05, busy, started, go, done, "aorta-hwq90"))
    spinner.start()
    started.wait()
    sleeper_tid: list[int] = []
    sleeper_ready, release = threading.Event(), threading.Event()

    def sleeper() -> None:
        _set_thread_name("aorta-hwq91")
        sleeper_tid.append(threading.get_native_id())
        sleeper_ready.set()
        release.wait()

    helper = threading.Thread(target=sleeper)
    helper.start()
    sleeper_ready.wait()
    tids = [busy[0], sleeper_tid[0]]
    before = oncpu.snapshot(tids)
    go.set()
    while len(busy) < 2:  # spun its CPU time, still alive
        time.sleep(0.005)
    after = oncpu.snapshot(tids)
    done.set()
    release.set()
    spinner.join()
    helper.join()
    assert before is not None
    assert after is not None
    spun_ns = after[busy[0]] - before[busy[0]]
    assert spun_ns == pytest.approx(busy[1] * 1e9, rel=0.05, abs=2e6)
    assert after[sleeper_tid[0]] - before[sleeper_tid[0]] < 1e6


def test_interpretation_uses_on_cpu_where_measured_and_says_so():
    line = concurrency_line({"achieved": 2.62, "on_cpu_queues": 1.1}, 8)
    assert "1.10 CPUs" in line
    assert "kernel on-CPU time" in line
    assert "2.62 of 8 streams had an op in flight (wall clock)" in line
    assert "waited for a CPU" in line
    gpu = concurrency_line({"achieved": 3.0, "on_cpu_queues": None}, 4)
    assert gpu.startswith("On average 3.00 of 4 streams had an op in flight (wall clock")


def test_cpu_wait_from_known_counters():
    """Host and queue threads' on-CPU and run-queue wait (schedstat's first two fields)."""
    start = {1: (True, 10_000_000, 0), 10: (False, 0, 5_000_000)}
    stop = {
        1: (True, 90_000_000, 10_000_000),
        10: (False, 60_000_000, 35_000_000),
        11: (False, 20_000_000, 10_000_000),
    }
    out = oncpu.cpu_wait(start, stop, window_ms=100.0)
    assert out["host_on_cpu"] == pytest.approx(0.8)
    assert out["host_run_queue_wait"] == pytest.approx(0.1)
    assert out["queue_run_queue_wait_ms"] == pytest.approx(30 + 10)  # 11 was born in the window
    assert out["queue_run_queue_wait_share"] == pytest.approx(40 / (60 + 20 + 40))
    assert out["cpu_wait_reason"] is None
    empty = oncpu.cpu_wait(None, None, 100.0)
    assert empty["host_on_cpu"] is None and "no per-thread schedstat" in empty["cpu_wait_reason"]
    assert oncpu.wait_snapshot([], 1) is None


def test_wait_snapshot_sees_the_host_and_a_named_queue_thread():
    go, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        _set_thread_name("aorta-hwq7")
        tids.append(threading.get_native_id())
        go.set()
        done.wait(5)

    thread = threading.Thread(target=worker)
    thread.start()
    go.wait(5)
    try:
        snap = oncpu.wait_snapshot(tids, threading.get_native_id())
    finally:
        done.set()
        thread.join()
    assert snap is not None
    assert snap[threading.get_native_id()][0] is True and snap[tids[0]][0] is False
