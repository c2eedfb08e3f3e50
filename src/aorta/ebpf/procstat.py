"""Per-thread scheduler counters the kernel already keeps (/proc/PID/task/TID/{schedstat,status}).

Read at the window edges they give on-CPU time, total run-queue wait, and voluntary/involuntary
context switches of every thread at no cost on the hot path, and a cross-check of what the eBPF
probes measure event by event.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PROC = Path("/proc")

#: the counters `delta` takes the difference of
Counter = Literal["exec_ns", "run_delay_ns", "voluntary", "involuntary"]


@dataclass(frozen=True)
class ThreadCounters:
    """One thread's counters at one moment: its process and name, on-CPU time and run-queue wait
    (ns, schedstat; None without it), context switches, and the CPU it last ran on."""

    pid: int
    comm: str | None
    exec_ns: int | None
    run_delay_ns: int | None
    voluntary: int
    involuntary: int
    cpu: int | None


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text()
    return None


def _descendants(pids: tuple[int, ...] | list[int], exclude: tuple[int, ...] = ()) -> list[int]:
    """The pids and every process below them (children listed by each of their threads)."""
    seen: list[int] = []
    todo = [int(p) for p in pids]
    while todo:
        pid = todo.pop()
        if pid in seen or pid in exclude:
            continue
        seen.append(pid)
        with contextlib.suppress(OSError):
            for task in (PROC / str(pid) / "task").iterdir():
                text = _read(task / "children") or ""
                todo.extend(int(c) for c in text.split())
    return seen


def task_counters(
    pids: tuple[int, ...] | list[int], exclude: tuple[int, ...] = ()
) -> dict[int, ThreadCounters]:
    """tid → its counters, for every thread of the pids and their descendants."""
    out: dict[int, ThreadCounters] = {}
    for pid in _descendants(pids, exclude):
        try:
            tasks = list((PROC / str(pid) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            sched = (_read(task / "schedstat") or "").split()
            stat = (_read(task / "stat") or "").rpartition(")")[2].split()
            status = _read(task / "status") or ""
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            try:
                out[int(task.name)] = ThreadCounters(
                    pid=pid,
                    comm=fields.get("Name", "").strip() or None,
                    exec_ns=int(sched[0]) if len(sched) >= 2 else None,
                    run_delay_ns=int(sched[1]) if len(sched) >= 2 else None,
                    voluntary=int(fields["voluntary_ctxt_switches"]),
                    involuntary=int(fields["nonvoluntary_ctxt_switches"]),
                    # field 39 "processor": the CPU it last ran on (stat fields after the comm)
                    cpu=int(stat[36]) if len(stat) > 36 else None,
                )
            except (KeyError, ValueError):
                continue
    return out


def delta(
    start: Mapping[int, ThreadCounters], stop: Mapping[int, ThreadCounters], tid: int, key: Counter
) -> int | None:
    """stop − start of one counter (a thread born in the window starts at 0); None if unknown."""
    end: int | None = getattr(stop[tid], key) if tid in stop else None
    if end is None:
        return None
    begin: int | None = getattr(start[tid], key) if tid in start else 0
    return None if begin is None else end - begin
