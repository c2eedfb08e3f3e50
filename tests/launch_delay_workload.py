"""Test-only workload whose host launch delay is known in advance (switch-analysis ground truth).

Two streams on one queue (run it with GPU_MAX_HW_QUEUES=1). Each op busy-waits BUSY_NS. A phase
is a gate op (it blocks the worker until the host has launched the whole phase, so every op of the
phase is queued before its lane's previous op ends: a ready gap, deterministically) followed by
busy ops; its last op tells the host when it ended. Per iteration:

- phase A: s0 gate, s0 busy × K, s1 busy × K: the one switch (s0 → s1) is a ready gap;
- `delay_ns` > 0: the host waits for phase A's end, spins until that end + delay_ns, then launches
  phase B0 (s0 gate + busy × K), waits for its end, spins `delay_ns` again, launches phase B1
  (s1 gate + busy × K). The two switches into B0 and B1 waited for the host: each lane wait is
  the known delay (less the few µs between the last op's signal and its recorded end);
- `delay_ns` == 0 (queued): B0 and B1 are launched right after A, before A's gate is released:
  every gap of the iteration is ready, none waited.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo

BUSY_NS = 50_000
OPS_PER_PHASE = 4  # K
DELAY_NS = 2_000_000


def _busy() -> None:
    end = time.monotonic_ns() + BUSY_NS
    while time.monotonic_ns() < end:
        pass


class LaunchDelay(Workload):
    """The workload; the test sets `delay_ns` (0: every op queued ahead) before the run."""

    INFO = WorkloadInfo(
        name="launch_delay",
        category="latency_sensitive",
        description="test only: two streams on one queue, the host launches some phases a known time late",
        min_streams=2,
        max_streams=2,
        recommended_streams=2,
        switch_sensitivity="high",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES: dict[str, dict[str, int]] = {"small": {}, "medium": {}, "large": {}}
    delay_ns = DELAY_NS

    def setup(self) -> None:
        self._ended = threading.Event()
        self._ended_ns = 0  # when the last phase's last op finished its work (worker's clock)

    def _phase(self, stream: Any, gate: threading.Event) -> None:
        """A gate op, then K busy ops; the last one sets `_ended` once it is done."""
        stream.launch(lambda: gate.wait(10), "gate")
        for _ in range(OPS_PER_PHASE - 1):
            stream.launch(_busy, "busy")
        stream.launch(self._busy_then_signal, "busy")

    def _busy_then_signal(self) -> None:
        _busy()
        self._ended_ns = time.monotonic_ns()
        self._ended.set()

    def _after_end(self) -> None:
        """Wait for the signalled end of the last phase, then spin until `delay_ns` past it."""
        self._ended.wait(10)
        self._ended.clear()
        deadline = self._ended_ns + self.delay_ns
        while time.monotonic_ns() < deadline:
            pass

    def run_iteration(self, streams: list[Any]) -> None:
        s0, s1 = streams
        gate = threading.Event()
        s0.launch(lambda: gate.wait(10), "gate")
        for _ in range(OPS_PER_PHASE):
            s0.launch(_busy, "busy")
        for _ in range(OPS_PER_PHASE - 1):
            s1.launch(_busy, "busy")
        s1.launch(self._busy_then_signal, "busy")
        if self.delay_ns == 0:  # queued: every phase launched before the first gate opens
            gates = [threading.Event(), threading.Event()]
            self._phase(s0, gates[0])
            self._phase(s1, gates[1])
            for g in (gate, *gates):
                g.set()
            return
        gate.set()
        for stream in (s0, s1):
            self._after_end()
            late = threading.Event()
            self._phase(stream, late)
            late.set()
        self._ended.wait(10)
        self._ended.clear()

    def work_per_iteration(self) -> float:
        return 1.0

    def verify(self) -> VerifyResult:
        return VerifyResult(True, 0.0, 0.0, "nothing to verify: ops only wait")
