"""Test-only workload whose op time and hand-off delay are known in advance (ground truth).

One stream, one queue. Its worker is pinned to one CPU at real-time priority 1 (nothing ordinary
preempts it there), and each op busy-waits BUSY_NS of wall time. Before each op is handed over, a
spinner process on the same CPU at real-time priority 2 starts spinning; right after the hand-off
the host tells it to stop SPIN_NS later. The worker cannot get onto its CPU before that end, so
the hand-off waits a known time: end − the moment right before the hand-off, per iteration.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from typing import Any

from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo

BUSY_NS = 2_000_000
SPIN_NS = 4_000_000

# Spins from "s" until the host publishes a time T in the shared page, then until T + spin_ns:
# however late the host gets to run, the queue's CPU stays busy until a time the host knows.
_SPINNER = """
import mmap, os, sys, time
cpu, spin_ns, cmd, ack = (int(a) for a in sys.argv[1:5])
page = mmap.mmap(os.open(sys.argv[5], os.O_RDWR), 8)
os.sched_setaffinity(0, {cpu})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(2))
while os.read(cmd, 1) == b"s":
    os.write(ack, b"k")
    released = 0
    while not released or released != int.from_bytes(page[:8], "little"):
        released = int.from_bytes(page[:8], "little")
    end = released + spin_ns
    while time.monotonic_ns() < end:
        pass
"""


class Spinner:
    """A real-time busy loop on `cpu`: `hold` occupies the CPU, `release(t)` ends it at t + spin_ns."""

    def __init__(self, cpu: int, page_path: str, spin_ns: int = SPIN_NS) -> None:
        self.spin_ns = spin_ns
        with open(page_path, "wb") as fh:
            fh.write(bytes(8))
        self._fd = os.open(page_path, os.O_RDWR)
        self._page = mmap.mmap(self._fd, 8)
        cmd_r, self._cmd = os.pipe()
        self._ack, ack_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _SPINNER, str(cpu), str(spin_ns), str(cmd_r), str(ack_w), page_path],
            pass_fds=(cmd_r, ack_w),
        )
        os.close(cmd_r)
        os.close(ack_w)

    def hold(self) -> None:
        """Start spinning; returns once the spinner runs on its CPU."""
        self._page[:8] = bytes(8)
        os.write(self._cmd, b"s")
        if os.read(self._ack, 1) != b"k":
            raise RuntimeError("spinner died (real-time priority refused?)")

    def release(self, at_ns: int) -> int:
        """Let the spin end at `at_ns` + spin_ns; returns that end time."""
        self._page[:8] = at_ns.to_bytes(8, "little")
        return at_ns + self.spin_ns

    def close(self) -> None:
        os.write(self._cmd, b"q")
        self.proc.wait(timeout=10)
        self._page.close()
        os.close(self._fd)
        os.close(self._cmd)
        os.close(self._ack)


def _busy() -> None:
    end = time.monotonic_ns() + BUSY_NS
    while time.monotonic_ns() < end:
        pass


class KnownDelay(Workload):
    """The workload; the test sets `spinner` and `cpu` before the run."""

    INFO = WorkloadInfo(
        name="known_delay",
        category="latency_sensitive",
        description="test only: busy ops of known length, hand-offs forced to wait a known time",
        min_streams=1,
        max_streams=1,
        recommended_streams=1,
        switch_sensitivity="low",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES: dict[str, dict[str, int]] = {"small": {}, "medium": {}, "large": {}}
    spinner: Spinner | None = None
    cpu = 1
    forced_waits_ns: list[int] = []  # per iteration, warm-up included, in order

    def setup(self) -> None:
        self._pinned = False
        type(self).forced_waits_ns = []

    def run_iteration(self, streams: list[Any]) -> None:
        stream = streams[0]
        if not self._pinned:  # the worker: this CPU only, real-time priority below the spinner
            os.sched_setaffinity(stream.queue.tid, {self.cpu})
            os.sched_setscheduler(stream.queue.tid, os.SCHED_FIFO, os.sched_param(1))
            self._pinned = True
        assert self.spinner is not None
        self.spinner.hold()
        before = time.monotonic_ns()
        stream.launch(_busy, "busy")  # the doorbell: the worker's CPU is busy until `end`
        end = self.spinner.release(time.monotonic_ns())
        self.forced_waits_ns.append(end - before)

    def work_per_iteration(self) -> float:
        return 1.0

    def verify(self) -> VerifyResult:
        return VerifyResult(True, 0.0, 0.0, "nothing to verify: ops only wait")
