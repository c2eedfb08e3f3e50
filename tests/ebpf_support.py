"""One place that decides whether real-eBPF tests can run: skip with the reason, but FAIL when CI=true."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from aorta.ebpf.interrupt import Interrupter
from aorta.ebpf.probes.base import (
    CollectContext,
    FamilyResult,
    ProbeCode,
    ProbeFamily,
    RenderContext,
    StreamHandle,
)
from aorta.ebpf.probes.gpu_runtime_apis import AttachedProbe


def ebpf_unavailable_reason() -> str | None:
    """Why real bpftrace cannot run here, or None when it can."""
    from aorta.ebpf.engine import check_readiness

    ready = check_readiness(mount_tracefs=True)
    if not ready.ok:
        return ready.reason
    if ready.tracefs is None or not ready.tracefs.has_event("sched", "sched_switch"):
        return "tracefs lacks sched:sched_switch"
    return None


def path_without_bpftrace() -> str:
    """$PATH minus every folder holding a bpftrace: a command started with it finds none (the
    --bpftrace option is the only other way to name one)."""
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(d for d in folders if d and not os.path.exists(os.path.join(d, "bpftrace")))


def require_ebpf() -> None:
    """Skip (locally) or fail (CI=true) when eBPF is impossible on this machine."""
    reason = ebpf_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"eBPF required in CI but unavailable: {reason}")
    pytest.skip(f"eBPF unavailable: {reason}")


class VerboseAttach:
    """The lines of a `bpftrace -v` run (stdout with stderr merged), read on a thread."""

    def __init__(self, proc: Any) -> None:
        self.proc, self.lines = proc, []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._ended = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def _next(self, deadline: float) -> str | None:
        line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        if line is None:
            self._ended = True
        else:
            self.lines.append(line)
        return line

    def wait_attached(self, program_text: str, timeout: float = 60) -> list[str]:
        """Lines up to the last of the probes that "Attaching N probes..." announced (less the
        END probe of `program_text`, attached only at exit); fails the test when bpftrace ends
        or `timeout` passes first. A signal sent afterwards cannot cut the sequence short."""
        at_exit = sum(line.strip().startswith("END") for line in program_text.splitlines())
        expected, attached = None, 0
        deadline = time.monotonic() + timeout
        while expected is None or attached < expected:
            try:
                line = self._next(deadline)
            except queue.Empty:
                line = ""
            if not line:
                self.proc.kill()
                pytest.fail(
                    f"bpftrace attached {attached} of {expected} probes "
                    f"({'ended' if line is None else f'{timeout:g} s passed'}): "
                    f"{''.join(self.lines)[-2000:]}"
                )
            announced = re.match(r"Attaching (\d+) probes?\.\.\.", line)
            if announced:
                expected = int(announced.group(1)) - at_exit
            elif line.startswith("Attaching "):
                attached += 1
        return list(self.lines)

    def stop(self, timeout: float = 30) -> list[str]:
        """SIGINT bpftrace when it can take it (`aorta.ebpf.interrupt`) and return every line
        once it closed its output."""
        deadline = time.monotonic() + timeout
        interrupter = Interrupter(self.proc.pid)
        while not self._ended:
            if self.proc.poll() is None:
                interrupter.send_if_due(time.monotonic(), len(self.lines))
            try:
                while not self._ended:
                    self._next(min(deadline, time.monotonic() + 0.05))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    self.proc.kill()
                    raise
        self.proc.wait(timeout=timeout)
        return list(self.lines)


def start_attach(pid: int, *args: str, duration: str = "120s") -> subprocess.Popen[str]:
    """`ebpf-attach --pid PID --duration DURATION ARGS…` started, returned once it says it traces
    (the window is open); its stderr so far is in the failure message when it ends before that."""
    attach = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "ebpf-attach",
            "--pid",
            str(pid),
            "--duration",
            duration,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert attach.stderr is not None
    lines = [attach.stderr.readline()]
    while lines[-1] and not lines[-1].startswith(f"tracing pid {pid}"):
        lines.append(attach.stderr.readline())
    assert lines[-1], "".join(lines) + attach.communicate()[1]
    return attach


class GetppidFamily(ProbeFamily):
    """Test family: runs `action` on each getppid() of the traced process in the window (an exact
    ground truth: the test makes the calls); collect returns the printed maps as they are."""

    section = "queue"
    description = "test"

    def __init__(self, name: str, action: str) -> None:
        self.name, self.action = name, action

    def wanted_events(self) -> list[str]:
        return ["syscalls:sys_enter_getppid"]

    def render(self, ctx: RenderContext) -> ProbeCode:
        return ProbeCode(
            probes=[
                "tracepoint:syscalls:sys_enter_getppid\n"
                f"/{ctx.pid_filter} && {ctx.gate}/\n{{\n  {self.action}\n}}"
            ],
            used_events=["syscalls:sys_enter_getppid"],
        )

    def collect(self, maps: dict[str, Any], context: CollectContext) -> FamilyResult:
        return FamilyResult(self.name, self.section, dict(maps), {})


def many_keys() -> GetppidFamily:
    """One new map key per getppid() (keyed by nsecs), and their count."""
    return GetppidFamily("t_many", "@t_many_keys[nsecs] = count();\n  @t_many_n = count();")


class FakeGpuBackend:
    """What the tracer asks of a GPU backend: no CPU workers, the streams' runtime handles."""

    name = "gpu"

    def __init__(self, handles: list[int]) -> None:
        self.handles = handles

    def workers(self) -> list[Any]:
        return []

    def stream_handles(self) -> list[StreamHandle]:
        return [StreamHandle(i, h) for i, h in enumerate(self.handles)]


def attached_probe(api: str, entry_instruction: str = "") -> AttachedProbe:
    """An entry point as the gpu_runtime family records its probe (the file, address and pid are
    placeholders: collect reads the API and the class of its first instruction; "" = unknown)."""
    return AttachedProbe(api, api, "0x0", "/stand-in/lib.so", "/stand-in/lib.so", 0, entry_instruction)
