"""`--cpus LIST`: pin the host thread and the queue workers to CPUs; parse, apply, read back.

Mapping (docs/metrics.md): the threads [host, queue 0, queue 1, …] take the listed CPUs in
turn, thread k on cpus[k mod n]: `--cpus 0,1` puts the host on 0 and queues 0, 1, 2, 3 on 1, 0, 1,
0. Each thread gets one CPU. Other threads (torch's inter-op pool, an OpenMP team of
--threads-per-queue > 1, a progress bar) keep the process's mask. No torch here.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject


def _format(cpus: Collection[int]) -> str:
    """CPUs as the shortest list of ranges: [0, 1, 2, 5] → '0-2,5'."""
    parts: list[str] = []
    ordered = sorted(cpus)
    start = prev = ordered[0]
    for cpu in [*ordered[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def format_cpu_list(cpus: Sequence[int]) -> str:
    """The --cpus text that gives `cpus` back in this order (children get it verbatim)."""
    return ",".join(str(c) for c in cpus)


def parse_cpu_list(text: str | None, allowed: set[int] | None = None) -> tuple[int, ...] | None:
    """'0,1', '0-3' or '0-1,3' → the CPUs in the given order; None when not given.

    Every CPU must be in this process's allowed set (sched_getaffinity: taskset, cgroup cpuset);
    UsageError naming the bad item otherwise."""
    if text is None:
        return None
    allowed = set(os.sched_getaffinity(0)) if allowed is None else allowed
    cpus: list[int] = []
    for position, part in enumerate(str(text).split(","), start=1):
        item = part.strip()
        if not item:
            raise UsageError(f"--cpus {text!r}: item {position} is empty (stray comma?)")
        low, sep, high = item.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"--cpus {text!r}: {item!r} is not a CPU number or a range such as 0-3")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise UsageError(f"--cpus {text!r}: the range {item!r} runs backwards: write {last}-{first}")
        for cpu in range(first, last + 1):
            if cpu in cpus:
                raise UsageError(f"--cpus {text!r}: CPU {cpu} is listed twice")
            if cpu not in allowed:
                raise UsageError(
                    f"--cpus {text!r}: CPU {cpu} is not one this process may run on "
                    f"({_format(allowed)}, from taskset/the cgroup cpuset): use CPUs from that set"
                )
            cpus.append(cpu)
    return tuple(cpus)


def plan(cpus: Sequence[int], queues: int) -> tuple[int, list[int]]:
    """(host CPU, CPU of each queue worker): thread k of [host, q0, q1, …] on cpus[k mod n]."""
    return cpus[0], [cpus[(k + 1) % len(cpus)] for k in range(queues)]


class Pinning:
    """Pins the calling (host) thread and the given worker threads; restores the host's mask."""

    def __init__(self, cpus: Sequence[int], worker_tids: Sequence[int]) -> None:
        self.cpus = list(cpus)
        self.worker_tids = list(worker_tids)
        self._host_before = os.sched_getaffinity(0)
        host, workers = plan(self.cpus, len(self.worker_tids))
        for tid, cpu in zip(self.worker_tids, workers, strict=True):
            os.sched_setaffinity(tid, {cpu})  # a thread id: that thread only
        os.sched_setaffinity(0, {host})  # 0: the calling thread only (Linux)

    def report(self) -> JsonObject:
        """What the threads' masks read back as (environment.cpus_pinned)."""

        def mask(tid: int) -> list[int] | None:
            try:
                return sorted(os.sched_getaffinity(tid))
            except OSError:  # the thread has ended
                return None

        return {
            "cpus": self.cpus,
            "mapping": "thread k of [host, queue 0, queue 1, …] on cpus[k mod len(cpus)]",
            "host": mask(0),
            "queues": [mask(tid) for tid in self.worker_tids],
        }

    def restore(self) -> None:
        """The host thread's mask as it was (workers end with their backend)."""
        os.sched_setaffinity(0, self._host_before)
