"""Per-thread scheduler counters the kernel already keeps (/proc/PID/task/TID/{schedstat,status}).

Read at the window edges they give on-CPU time, total run-queue wait, and voluntary/involuntary
context switches of every thread at no cost on the hot path, and a cross-check of what the eBPF
probes measure event by event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import threading
import time
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


@dataclass(frozen=True)
class OwnCounters:
    """The calling thread's on-CPU time and context switches at one moment, read from the
    thread itself: its CPU clock (CLOCK_THREAD_CPUTIME_ID, the counter /proc's schedstat shows,
    brought up to date first: for a running thread schedstat shows it as of the last tick or
    switch) and getrusage(RUSAGE_THREAD) (the switch counts /proc's status shows)."""

    exec_ns: int
    voluntary: int
    involuntary: int


def own_counters() -> OwnCounters:
    """This thread's counters now (two syscalls, no /proc walk)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return OwnCounters(time.clock_gettime_ns(time.CLOCK_THREAD_CPUTIME_ID), usage.ru_nvcsw, usage.ru_nivcsw)


@dataclass
class MarkerClock:
    """The counters of the thread that opens and closes the window (`tid`), read right before
    each marker (`start`, `stop`). That thread runs at both edges, so the /proc snapshot, read on
    its time before the opening marker and after the closing one (other families' snapshots
    between), would charge it time and switches outside the window; these reads are the window's."""

    tid: int
    start: OwnCounters
    stop: OwnCounters | None = None


def start_marker_clock() -> MarkerClock:
    """The calling thread's counters for the window's opening marker, sent next."""
    return MarkerClock(threading.get_native_id(), own_counters())


def with_marker_clock(
    start: dict[int, ThreadCounters], stop: dict[int, ThreadCounters], clock: MarkerClock | None
) -> tuple[dict[int, ThreadCounters], dict[int, ThreadCounters]]:
    """The edge snapshots with the marker thread's on-CPU time and switches taken from `clock`
    (its reads at the markers) where both snapshots hold the thread and both edges were read."""
    if clock is None or clock.stop is None or clock.tid not in start or clock.tid not in stop:
        return start, stop
    first = _at(start[clock.tid], clock.start)
    last = _at(stop[clock.tid], clock.stop)
    return {**start, clock.tid: first}, {**stop, clock.tid: last}


def _at(counters: ThreadCounters, own: OwnCounters) -> ThreadCounters:
    return dataclasses.replace(
        counters, exec_ns=own.exec_ns, voluntary=own.voluntary, involuntary=own.involuntary
    )


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
