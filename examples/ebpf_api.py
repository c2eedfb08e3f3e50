"""Use aorta's eBPF engine from Python: count the doorbell hand-offs of this process's workers.

Four worker threads each block on a doorbell (an eventfd), as the CPU backend's queues do. The
main thread rings each doorbell a known number of times, waiting for the worker to take each ring.
The example registers the doorbells in a TraceTarget, assembles one bpftrace program from the
CPU-scheduling family, opens the measurement window around the rings, and reads the same
`ebpf_queue_metrics` section a benchmark result carries: eBPF must count exactly the rings made.
Run as root (or with sudo -n working):  sudo .venv/bin/python examples/ebpf_api.py
Exit status: 0 traced, 1 tracing unavailable here (the reason is printed), 2 tracing failed.
See docs/ebpf-integration.md.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import aorta.ebpf as ebpf

WORKERS, RINGS = 4, 50
STOP = 2  # a doorbell value that tells the worker to exit (rung after the window: not counted)


class Worker(threading.Thread):
    """One "queue": block on the doorbell, do a little work per ring, report it done."""

    def __init__(self, index: int) -> None:
        super().__init__(name=f"worker{index}")
        self.doorbell = os.eventfd(0, os.EFD_CLOEXEC)
        self.done = threading.Semaphore(0)
        self.taken = 0

    def run(self) -> None:
        while os.eventfd_read(self.doorbell) != STOP:  # one 8-byte read per ring
            sum(i * i for i in range(2_000))
            self.taken += 1
            self.done.release()


def main() -> int:
    """Ring four workers' doorbells RINGS times each inside the window; print the summary."""
    ready = ebpf.check_readiness()  # bpftrace, privileges, tracefs; never raises
    if not ready.ok:
        print(f"eBPF tracing unavailable: {ready.reason}")
        return 1
    workers = [Worker(i) for i in range(WORKERS)]
    for w in workers:  # started first: the program needs their thread ids
        w.start()
    try:
        return trace(ready, workers)
    finally:
        for w in workers:
            os.eventfd_write(w.doorbell, STOP)
            w.join()
            os.close(w.doorbell)


def trace(ready: ebpf.Readiness, workers: list[Worker]) -> int:
    """Trace the rings of the workers' doorbells; print what eBPF counted next to what was rung."""
    pid = os.getpid()
    target = ebpf.TraceTarget(
        pids=(pid,),
        follow_children=False,
        thread_labels={w.native_id: f"q{i}" for i, w in enumerate(workers)},
        doorbells=tuple((pid, w.doorbell, w.native_id, i) for i, w in enumerate(workers)),
    )
    rung = 0
    try:
        # bpftrace starts and attaches before the block; the window is the block itself
        with ebpf.trace_window(
            target, probe_families=ebpf.families(names=("cpu_sched",)), ready=ready
        ) as traced:
            for _ in range(RINGS):
                for w in workers:  # ring only an idle queue: one ring, one hand-off
                    os.eventfd_write(w.doorbell, 1)
                    rung += 1
                for w in workers:
                    w.done.acquire()
    except (ebpf.ProgramError, ebpf.SessionError) as exc:
        print(f"could not trace: {exc}")
        return 2
    queue = traced.queue or {}
    summary = queue["families"]["cpu_sched"]["metrics"]["summary"] or {}
    print(
        json.dumps(
            {
                "status": queue["status"],
                "lost_events": queue["lost_events"],
                "window_ms": queue["window"]["duration_ms"],
                "probes_attached": queue["probes_attached"],
                "doorbell_writes": rung,
                "rings_taken": sum(w.taken for w in workers),
                "ebpf_submissions": summary.get("total_submissions"),
                "ebpf_submissions_per_queue": summary.get("submissions_per_queue"),
                "ebpf_dispatches": summary.get("total_dispatches"),
                "unconsumed_doorbells": summary.get("unconsumed_doorbells"),
                "submit_to_dispatch_avg_us": summary.get("submit_to_dispatch_avg_us"),
            },
            indent=2,
        )
    )
    return 0 if queue["status"] == "ok" else 2


if __name__ == "__main__":
    sys.exit(main())
