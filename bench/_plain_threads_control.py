"""The control of bench/cpu_run_cv.py: a workload's own ops on plain Python threads, no backend.

Same op mix (the workload class builds the tensors and the op closures), the same stream → thread
mapping as the CPU backend's queues (`assign_queues`, GPU_MAX_HW_QUEUES), the same torch settings
(one intra-op thread in every thread, as `threads_per_queue = 1`), the same warm-up (verification
after the first iteration, one collection before the last, automatic GC off through the window)
and the same per-iteration join (`sync_mode per_iteration`). Each op is handed to its thread as
it is launched (one SimpleQueue put), so the threads run while the host launches, as the
backend's do. What it lacks is the backend's own machinery: task objects, locks, doorbells,
per-op clock reads and records. Its run-to-run CV is what any Python-threaded run of these ops
shows on this machine: the floor the backend is judged against.

Usage (the bench runs it): python -I bench/_plain_threads_control.py WORKLOAD STREAMS ITERATIONS WARMUP [CPUS]
(CPUS: its host and threads pinned as `run --cpus CPUS` pins the host and the queue workers.)
Prints one JSON line: throughput, throughput_unit, total_time_ms, iteration_times_ms,
verification_passed, threads, torch_threads, on_cpu_threads (Σ on-CPU time of its threads / window,
as the backend's `concurrency.on_cpu_queues`), cpus_pinned (as the backend's environment.cpus_pinned).
"""

from __future__ import annotations

import gc
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import torch

from aorta.hw_queue_eval.backends.cpu import assign_queues
from aorta.hw_queue_eval.config.run_config import hw_queue_pool_size
from aorta.hw_queue_eval.run import oncpu
from aorta.hw_queue_eval.run.cpupin import Pinning, parse_cpu_list
from aorta.hw_queue_eval.workloads.base import UNIT_SCALE
from aorta.hw_queue_eval.workloads.registry import get_workload_class

_END = object()  # end of an iteration on one thread


class _PlainStream:
    """A stream whose launch hands the op to its thread; nothing recorded."""

    def __init__(self, inbox: queue.SimpleQueue[Any]) -> None:
        self.inbox = inbox

    def launch(self, fn: Callable[[], Any], label: str) -> None:
        self.inbox.put(fn)

    def wait(self, other: Any) -> None:
        raise SystemExit("the plain-threads control supports workloads without cross-stream waits")


def _worker(inbox: queue.SimpleQueue[Any], done: queue.SimpleQueue[None], tids: list[int]) -> None:
    torch.set_num_threads(1)
    tids.append(threading.get_native_id())
    done.put(None)
    while True:
        item = inbox.get()
        if item is None:
            return
        if item is _END:
            done.put(None)
        else:
            item()


def main(argv: list[str]) -> int:
    workload_name, streams, iterations, warmup = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    torch.set_num_threads(1)
    cls = get_workload_class(workload_name)
    workload = cls(streams, "small", torch.device("cpu"), 0)
    workload.setup()
    mapping = assign_queues(streams, hw_queue_pool_size())
    inboxes: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(max(mapping) + 1)]
    done: queue.SimpleQueue[None] = queue.SimpleQueue()
    tids: list[int] = []
    threads = [threading.Thread(target=_worker, args=(box, done, tids), daemon=True) for box in inboxes]
    for thread in threads:
        thread.start()
    for _ in threads:
        done.get()  # every thread started and registered before warm-up
    plain = [_PlainStream(inboxes[q]) for q in mapping]
    # after the threads started, as the harness pins the backend's workers
    pinning = Pinning(parse_cpu_list(argv[4]) or (), tids) if len(argv) > 4 else None

    def iteration() -> None:
        workload.run_iteration(plain)
        for box in inboxes:
            box.put(_END)
        for _ in inboxes:
            done.get()

    passed = None
    was_enabled = gc.isenabled()
    for w in range(warmup):
        if w == warmup - 1:
            gc.collect()
            gc.disable()
        iteration()
        if passed is None:
            passed = workload.verify().passed
    times: list[float] = []
    cpu_start = oncpu.snapshot(tids)
    start = time.perf_counter_ns()
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        iteration()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    window_ns = time.perf_counter_ns() - start
    on_cpu = oncpu.on_cpu_concurrency(cpu_start, oncpu.snapshot(tids), window_ns / 1e6)
    pinned = pinning.report() if pinning is not None else None
    if was_enabled:
        gc.enable()
    for box in inboxes:
        box.put(None)
    for thread in threads:
        thread.join()
    unit = cls.INFO.throughput_unit
    work = workload.work_per_iteration() * iterations
    print(
        json.dumps(
            {
                "throughput": work / (window_ns / 1e9) / UNIT_SCALE[unit],
                "throughput_unit": unit,
                "total_time_ms": window_ns / 1e6,
                "iteration_times_ms": times,
                "verification_passed": passed,
                "threads": len(threads),
                "torch_threads": torch.get_num_threads(),
                "on_cpu_threads": on_cpu["on_cpu_queues"],
                "cpus_pinned": pinned,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
