"""Figures an audit broke one line at a time while every other test still passed.

Each test pins one figure to a value worked out by hand (or to the kernel's own counter), so
the one-line change named in its docstring fails it.
"""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest

from aorta.common.flatten import flatten_numbers
from aorta.ebpf import hist
from aorta.hw_queue_eval.analysis.scaling import ScalingPoint, unstable_points
from aorta.hw_queue_eval.analysis.stats import median_ci
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.run import oncpu
from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness


def test_harness_mean_is_over_the_matched_submissions_only():
    """Broken by: the harness mean taken over every ring instead of the matched ones."""
    section = {"status": "ok", "source": "cpu_sched", "total_submissions": 3, "lost_events": 0}
    # (queue, seq, ring, rung, start, kind): harness delays 3000, 5000 and (unmatched) 900000 ns
    subs = [
        SimpleNamespace(queue=0, seq=0, ring_ns=1000, rung_ns=1100, start_ns=4000, first_kind="op"),
        SimpleNamespace(queue=0, seq=1, ring_ns=2000, rung_ns=2100, start_ns=7000, first_kind="op"),
        SimpleNamespace(queue=1, seq=0, ring_ns=1500, rung_ns=1600, start_ns=901500, first_kind="op"),
    ]
    kernel = [[0, 0, 1050, 1000], [0, 1, 2050, 3000], [1, 0, 9999, 2000]]  # the last: outside bracket
    c = compare_with_harness(section, subs, kernel)
    assert c["matched_submissions"] == c["compared"] == 2
    assert c["harness_submit_to_start_ms"] == (3000 + 5000) / 2 / 1e6
    assert c["kernel_submit_to_dispatch_ms"] == (1000 + 3000) / 2 / 1e6
    assert c["kernel_visible_share_pct"] == 100 * 4000 / 8000


def test_run_to_run_cv_is_the_sample_cv():
    """Broken by: CV with ddof = 0 (population std)."""
    # mean 2, sample std 1 (ddof 1) → 50 %; ddof 0 would give 40.8 %
    assert median_ci([1.0, 2.0, 3.0]).cv_pct == pytest.approx(50.0)
    assert median_ci([10.0, 10.0, 13.0, 7.0]).cv_pct == pytest.approx(100 * (6**0.5) / 10)


def _stats(iqr_ratio: float) -> dict[str, float]:
    return {"median": 100.0, "iqr": 100.0 * iqr_ratio}


@pytest.mark.parametrize(("ratio", "unstable"), [(0.09, False), (0.11, True)])
def test_instability_level_is_ten_percent_per_run_and_per_sweep_point(ratio, unstable):
    """Broken by: the 0.10 instability level moved to 0.20 or 0.30 in either place."""
    assert (metrics.stability_warning(_stats(ratio)) is not None) is unstable
    point = ScalingPoint(streams=4, throughput=1.0, work_per_iteration=None, latency_p99_ms=None,
                         dispatch_p99_us=None, iqr_over_median=ratio)  # fmt: skip
    assert bool(unstable_points([point])) is unstable


def test_flatten_keeps_numbers_and_drops_booleans():
    """Broken by: `flatten` letting booleans through (True would diff as 1.0)."""
    flat = flatten_numbers({"a": {"b": 2, "ok": True, "c": {"d": 1.5, "no": False}}, "s": "x", "n": None})
    assert flat == {"a.b": 2.0, "a.c.d": 1.5}


def test_log_linear_estimate_interpolates_inside_its_bucket():
    """Broken by: the histogram estimate set to the bucket's low edge."""
    h = [(0, 9, 10), (10, 19, 10)]  # bucket [low, high] inclusive, 10 samples each
    p = hist.percentile(h, 0.75)  # rank 15: half-way through the second bucket [10, 20)
    assert p == {"estimate": 15.0, "bucket_min": 10.0, "bucket_max": 20.0}
    assert hist.percentile(h, 0.5)["estimate"] == 10.0  # rank 10: the first bucket's top
    assert hist.percentile([(100, 199, 4)], 0.25)["estimate"] == 125.0


def _eventfd_count(fd: int) -> int:
    """The eventfd counter, read from /proc without consuming it."""
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            if line.startswith("eventfd-count:"):
                return int(line.split()[1], 16)
    raise AssertionError("no eventfd-count in fdinfo")


def test_work_handed_to_a_busy_queue_never_writes_its_doorbell():
    """Broken by: a doorbell rung on every put (the kernel would count extra submissions)."""
    from aorta.hw_queue_eval.backends.cpu import CpuBackend

    backend = CpuBackend(1, pool_size=1)
    try:
        started, gate = threading.Event(), threading.Event()

        def blocker() -> None:
            started.set()
            gate.wait()

        backend.start_window()
        backend.begin_iteration(0)
        stream = backend.streams[0]
        stream.launch(blocker, "blocker")  # idle queue: one ring, consumed by the worker's read
        assert started.wait(30), "the queue never ran its first op"
        for _ in range(5):
            stream.launch(lambda: None, "rides")  # busy queue: no write at all
        (worker,) = backend.workers()
        assert _eventfd_count(worker.doorbell_fd) == 0
        gate.set()
        backend.end_iteration()
        backend.synchronize()
        backend.stop_window()
        assert [s.first_kind for s in backend.submissions()][:1] == ["op"]
    finally:
        gate.set()
        backend.close()


def test_on_cpu_time_counts_the_queue_threads_not_the_host():
    """Broken by: the host thread's own CPU time counted as a queue running."""
    ready, release, tids = threading.Event(), threading.Event(), []

    def idle_queue() -> None:
        from aorta.hw_queue_eval.backends.cpu import _set_thread_name

        _set_thread_name("aorta-hwq95")
        tids.append(threading.get_native_id())
        ready.set()
        release.wait()

    worker = threading.Thread(target=idle_queue)
    worker.start()
    try:
        ready.wait()
        before = oncpu.snapshot(tids)
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.05:  # the host spins 50 ms of CPU
            pass
        after = oncpu.snapshot(tids)
    finally:
        release.set()
        worker.join()
    assert before is not None and after is not None
    assert threading.get_native_id() not in after
    assert os.getpid() not in after
    spent_ms = sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e6
    assert spent_ms < 5, spent_ms  # the sleeping queue used ~nothing; the host's 50 ms is not in
