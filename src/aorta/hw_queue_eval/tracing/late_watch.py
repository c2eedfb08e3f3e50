"""`run`'s watch for GPU runtimes the measured process (or a child) maps after the tracer attached.

torch initialises CUDA/HIP lazily and a workload may load a runtime late: the main program's
uprobes cover only the files mapped when it was rendered. `LateWatch` runs `LateRuntimes` on a
thread that sleeps until the kernel reports a new executable mapping of a traced process (the
gpu_runtime family's notice, `probes/gpu_runtime_loads`): no periodic /proc reads in the measured
process. A runtime found then is probed by a late program from then on; its gate follows the main
window. After the window one last scan lists any runtime mapped since, as not probed, with the
reason. What was found and when goes into `families.gpu_runtime.metrics.late_runtimes`.
"""

from __future__ import annotations

import threading

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import engine
from aorta.ebpf.late_runtimes import LateRuntimes
from aorta.ebpf.program import Program
from aorta.ebpf.session import SessionOutput, TraceSession

#: why a runtime found only by the scan after the window was not probed
FOUND_AFTER = "found after the window (no notice of its mapping came in time): not probed"
#: how often the sleeping thread looks whether it should end (no /proc read, only a flag)
STOP_CHECK_S = 1.0


class LateWatch:
    """LateRuntimes on a thread woken by the kernel's notices (see the module doc)."""

    def __init__(self, pid: int, program: Program, ready: engine.Readiness, session: TraceSession) -> None:
        self.session = session
        self.late = LateRuntimes(pid, program, ready, session, rescan_s=None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="aorta-late-runtimes", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.session.printf_seen.wait(STOP_CHECK_S) or self._stop.is_set():
                continue
            try:
                self.late.poll()
            except Exception as exc:  # a watcher bug must not end the run: said in the result
                self.late.errors.append(f"late runtime watch failed: {type(exc).__name__}: {exc}")
                return

    def window_start(self) -> None:
        """The main window opened (late gates open with it)."""
        self.late.window_start()

    def window_stop(self) -> None:
        """Close the late gates (before the main one)."""
        self.late.window_stop()

    def finish(self) -> None:
        """List what was mapped since the last notice, stop the late programs, end the thread.

        The thread ends last: a bpftrace it started dies with it (PR_SET_PDEATHSIG follows the
        thread that started the process), so its programs are stopped, maps printed, first."""
        self.late.scan(FOUND_AFTER)
        self.late.stop()
        self._end_thread(90)

    def absorb(self, program: Program, out: SessionOutput) -> tuple[SessionOutput, JsonObject]:
        """The main output with the late maps added, and the report for the result."""
        report = self.late.report(out)
        return self.late.absorb(program, out), report

    def abort(self) -> None:
        """Kill every late program and end the thread (one starting a program now kills it
        once it is up: the watch is closed)."""
        self.late.abort()
        self._end_thread(1)

    def _end_thread(self, timeout_s: float) -> None:
        self._stop.set()
        self.session.printf_seen.set()  # wakes the thread
        self._thread.join(timeout=timeout_s)
