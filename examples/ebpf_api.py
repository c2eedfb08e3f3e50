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

from aorta.ebpf import engine
from aorta.ebpf.probes.base import TraceTarget
from aorta.ebpf.probes.registry import families_for
from aorta.ebpf.program import ProgramError
from aorta.ebpf.session import SessionError

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
    ready = engine.check_readiness()  # bpftrace, privileges, tracefs; never raises
    if not ready.ok or ready.tracefs is None:
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


def trace(ready: engine.Readiness, workers: list[Worker]) -> int:
    """Trace the rings of the workers' doorbells; print what eBPF counted next to what was rung."""
    pid = os.getpid()
    target = TraceTarget(
        pids=(pid,),
        follow_children=False,
        thread_labels={w.native_id: f"q{i}" for i, w in enumerate(workers)},
        doorbells=tuple((pid, w.doorbell, w.native_id, i) for i, w in enumerate(workers)),
    )
    families = [f for f in families_for(queue=True, memory=False) if f.name == "cpu_sched"]
    try:
        program = engine.make_program(True, False, target, ready.tracefs, ready.version, families=families)
        session = engine.start_session(program, ready)  # returns once every probe is attached
    except (ProgramError, SessionError) as exc:
        print(f"could not start tracing: {exc}")
        return 2
    rung = 0
    try:
        session.window_start()  # events count from here …
        for _ in range(RINGS):
            for w in workers:  # ring only an idle queue: one ring, one hand-off
                os.eventfd_write(w.doorbell, 1)
                rung += 1
            for w in workers:
                w.done.acquire()
        session.window_stop()  # … to here
        output = session.stop()  # bpftrace prints its maps and exits
    except BaseException:
        session.abort()  # never leave a bpftrace behind
        raise
    # which thread is which queue: lets the family summarise per worker
    registry = [{"tid": w.native_id, "queue": i, "streams": [i]} for i, w in enumerate(workers)]
    context = {
        "workers": registry,
        "window": engine.window_info(output),
        "pids": [pid],
        "streams": None,
        "submitter_tids": [threading.get_native_id()],
    }
    results = engine.collect_results(program, output, context)
    queue = engine.build_sections(program, output, results, ready, queue=True, memory=False)[
        "ebpf_queue_metrics"
    ]
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
