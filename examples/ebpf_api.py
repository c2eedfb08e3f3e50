"""Use aorta's eBPF engine from Python: trace this process's threads while they work.

Assembles one bpftrace program from probe families (here the CPU-scheduling family and the host
memory family), starts a session, opens the measurement window around the work, and reads the
same `ebpf_queue_metrics` / `ebpf_memory_metrics` sections a benchmark result carries.
Run as root (or with sudo -n working):  sudo .venv/bin/python examples/ebpf_api.py
Exit status: 0 traced, 1 tracing unavailable here (the reason is printed), 2 tracing failed.
See docs/ebpf-integration.md.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time

from aorta.ebpf import engine
from aorta.ebpf.probes.base import TraceTarget
from aorta.ebpf.probes.registry import families_for
from aorta.ebpf.program import ProgramError
from aorta.ebpf.session import SessionError


def busy(seconds: float) -> None:
    """Spin and sleep in turns, so the scheduler has wakeups and switches to show."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(i * i for i in range(20_000))
        time.sleep(0.001)


def main() -> int:
    """Trace four worker threads of this process for about half a second; print the summary."""
    ready = engine.check_readiness()  # bpftrace, privileges, tracefs; never raises
    if not ready.ok or ready.tracefs is None:
        print(f"eBPF tracing unavailable: {ready.reason}")
        return 1
    families = [f for f in families_for(queue=True, memory=True) if f.name in ("cpu_sched", "hostmem")]
    target = TraceTarget(pids=(threading.get_native_id(),), follow_children=False)
    try:
        program = engine.make_program(True, True, target, ready.tracefs, ready.version, families=families)
        session = engine.start_session(program, ready)  # returns once every probe is attached
    except (ProgramError, SessionError) as exc:
        print(f"could not start tracing: {exc}")
        return 2
    go, release, done = threading.Event(), threading.Event(), threading.Barrier(5)

    def worker() -> None:
        go.wait()
        busy(0.5)
        with contextlib.suppress(threading.BrokenBarrierError):
            done.wait()  # stay alive until the window has closed: counters are read at its edges
        release.wait()

    workers = [threading.Thread(target=worker, name=f"worker{i}") for i in range(4)]
    for w in workers:  # started (and so known to the kernel) before the window opens
        w.start()
    try:
        session.window_start()  # events count from here …
        go.set()
        done.wait()
        session.window_stop()  # … to here
        output = session.stop()  # bpftrace prints its maps and exits
    except BaseException:
        session.abort()  # never leave a bpftrace behind
        raise
    finally:
        go.set()
        done.abort()  # frees workers still waiting if the window never closed
        release.set()
        for w in workers:
            w.join()
    # which thread is which "queue": lets the CPU-scheduling family summarise per worker
    registry = [{"tid": w.native_id, "queue": i, "streams": [i]} for i, w in enumerate(workers)]
    context = {"workers": registry, "window": engine.window_info(output), "pids": list(target.pids),
               "streams": None}
    results = engine.collect_results(program, output, context)
    sections = engine.build_sections(program, output, results, ready, queue=True, memory=True)
    queue, memory = sections["ebpf_queue_metrics"], sections["ebpf_memory_metrics"]
    threads = queue["families"]["cpu_sched"]["metrics"]["threads"]
    summary = {
        "status": queue["status"], "lost_events": queue["lost_events"],
        "window_ms": queue["window"]["duration_ms"], "probes_attached": queue["probes_attached"],
        "worker_threads_seen": sum(1 for t in threads if t["queue"] is not None),
        "runq_wait_total_ms": queue.get("runq_wait_total_ms"),
        "kernel_run_delay_total_ms": queue.get("kernel_run_delay_total_ms"),
        "host_page_faults": memory.get("host_page_faults"),
    }
    print(json.dumps(summary, indent=2))
    return 0 if queue["status"] == "ok" else 2


if __name__ == "__main__":
    sys.exit(main())
