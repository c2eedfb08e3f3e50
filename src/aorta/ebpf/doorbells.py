"""A running CPU-backend process's queue doorbells, found from /proc (for `ebpf-attach --pid`).

A benchmark run registers its doorbells with its own tracer; a process traced from outside does
not, so they are found the way they show: each queue's worker thread is named `aorta-hwqN`
(cpu_sched.WORKER_COMM) and, while idle, blocks in `read(fd, buf, 8)` on its doorbell, an eventfd.
`/proc/PID/task/TID/syscall` names the blocked call and its arguments, `/proc/PID/fd/FD` that the
fd is an eventfd. Threads a worker started inherit its name but never wait on a doorbell, so the
one that does is the worker. A worker that never waited in the sampling time (a queue busy the
whole time) leaves its queue unresolved, said so, never guessed.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

from aorta.common.jsontypes import JsonObject
from aorta.ebpf.probes.base import QueueWorker
from aorta.ebpf.probes.cpu_sched import DOORBELL_BYTES, WORKER_COMM

PROC = Path("/proc")
# the read syscall's number per architecture (the first field of /proc/…/syscall)
READ_SYSCALL = {"x86_64": 0, "aarch64": 63, "riscv64": 63}
PROCESS_QUEUE_STRIDE = 1000  # queue ids of the k-th process with queues: k × 1000 + N (as torchrun ranks)
SOURCE = (
    "/proc/PID/task/TID/comm (aorta-hwqN), /proc/PID/task/TID/syscall (worker blocked in "
    "read(fd, …, 8)) and /proc/PID/fd/FD (an eventfd), sampled before the trace starts"
)


@dataclass
class Doorbells:
    """What was found: TraceTarget.doorbells, the workers for cpu_sched's collect, what was not."""

    doorbells: tuple[tuple[int, int, int, int], ...] = ()  # (pid, fd, worker tid, queue id)
    workers: list[QueueWorker] = field(default_factory=list)
    unresolved: dict[int, str] = field(default_factory=dict)  # queue id → why
    sampled_s: float = 0.0

    def report(self) -> JsonObject:
        """JSON for the attach result: what was traced and what could not be."""
        return {
            "source": SOURCE,
            "found": [
                {"pid": w.pid, "tid": w.tid, "queue": w.queue, "fd": w.doorbell_fd} for w in self.workers
            ],
            "unresolved": {str(q): why for q, why in sorted(self.unresolved.items())},
            "complete": not self.unresolved,
            "sampled_s": self.sampled_s,
        }


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text()
    return None


def queue_threads(pid: int) -> dict[int, list[int]]:
    """Queue index N → tids of the process's threads named aorta-hwqN (worker and its helpers)."""
    out: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for task in (PROC / str(pid) / "task").iterdir():
            match = WORKER_COMM.match((_read(task / "comm") or "").strip())
            if match and task.name.isdigit():
                out.setdefault(int(match.group(1)), []).append(int(task.name))
    return out


def waiting_doorbell(pid: int, tid: int, read_nr: int) -> int | None:
    """The eventfd this thread is blocked reading 8 bytes from right now, or None."""
    fields = (_read(PROC / str(pid) / "task" / str(tid) / "syscall") or "").split()
    if len(fields) < 4 or not fields[0].isdigit() or int(fields[0]) != read_nr:
        return None
    try:
        fd, count = int(fields[1], 16), int(fields[3], 16)
    except ValueError:
        return None
    if count != DOORBELL_BYTES:
        return None
    with contextlib.suppress(OSError):
        if os.readlink(PROC / str(pid) / "fd" / str(fd)) == "anon_inode:[eventfd]":
            return fd
    return None


def find_doorbells(pids: list[int] | tuple[int, ...], timeout_s: float = 3.0) -> Doorbells:
    """Every queue of the CPU-backend processes among `pids`, sampled until each queue's worker
    was seen waiting on its doorbell or `timeout_s` passed."""
    t0 = time.monotonic()
    found = Doorbells()
    read_nr = READ_SYSCALL.get(platform.machine())
    queued = {pid: threads for pid in sorted(pids) if (threads := queue_threads(pid))}
    if not queued:
        return found
    ids = {pid: k * PROCESS_QUEUE_STRIDE for k, pid in enumerate(queued)} if len(queued) > 1 else {}
    if read_nr is None:
        why = f"no read syscall number known for {platform.machine()}: doorbells not found"
        found.unresolved = {ids.get(p, 0) + n: why for p, threads in queued.items() for n in threads}
        return found
    todo = {(pid, n): tids for pid, threads in queued.items() for n, tids in threads.items()}
    while todo:
        for (pid, n), tids in list(todo.items()):
            for tid in tids:
                fd = waiting_doorbell(pid, tid, read_nr)
                if fd is not None:
                    queue = ids.get(pid, 0) + n
                    found.doorbells += ((pid, fd, tid, queue),)
                    found.workers.append(QueueWorker(tid, queue, doorbell_fd=fd, pid=pid))
                    del todo[(pid, n)]
                    break
        if not todo or time.monotonic() - t0 > timeout_s:
            break
        time.sleep(0.001)
    found.unresolved = {
        ids.get(pid, 0) + n: f"worker aorta-hwq{n} of pid {pid} never seen waiting on its doorbell "
        f"in {timeout_s:g} s (busy the whole time, or not a CPU-backend queue)"
        for pid, n in todo
    }
    found.sampled_s = time.monotonic() - t0
    found.workers.sort(key=lambda w: w.queue)
    return found
