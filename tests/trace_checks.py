"""Structural checks of a trace-event object, as Perfetto needs it (tests only: aorta writes
traces, these prove their shape)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aorta.hw_queue_eval.report.trace import PID_THREADS

PHASES = {"X", "C", "M", "i", "s", "f"}
#: switches of the harness thread between the read of its counters and a window marker, which the
#: eBPF timeline and its per-thread row then disagree on (a GIL hand-off there is two: the forced
#: switch and the wait to take the GIL back; seen in 2 of 46 runs on the shared VM, -1 and -2)
HARNESS_EDGE_SWITCHES = 2


def validate_trace(trace: Any) -> list[str]:
    """Structural problems of a trace-event object (empty list: Perfetto can load it)."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    problems = []
    for i, event in enumerate(trace["traceEvents"]):
        ph = event.get("ph")
        if ph not in PHASES:
            problems.append(f"event {i}: unknown phase {ph!r}")
            continue
        if not isinstance(event.get("name"), str) or not isinstance(event.get("pid"), int):
            problems.append(f"event {i}: needs a string name and an integer pid")
        if ph != "M" and not isinstance(event.get("ts"), (int, float)):
            problems.append(f"event {i}: needs a numeric ts")
        if ph == "X" and not (isinstance(event.get("dur"), (int, float)) and event["dur"] >= 0):
            problems.append(f"event {i}: complete event needs dur ≥ 0")
        if ph in ("s", "f") and not isinstance(event.get("id"), int):
            problems.append(f"event {i}: flow event needs an integer id")
        if ph in ("X", "i", "s", "f") and not isinstance(event.get("tid"), int):
            problems.append(f"event {i}: needs an integer tid")
        if ph == "C" and not all(
            isinstance(v, (int, float)) for v in (event.get("args") or {None: None}).values()
        ):
            problems.append(f"event {i}: counter args must be numbers")
    return problems + overlap_problems(trace["traceEvents"])


def overlap_problems(events: list[Any], eps_us: float = 1e-3) -> list[str]:
    """Complete events of one track that overlap without nesting (Perfetto cannot draw them)."""
    tracks: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            ts, dur = event.get("ts"), event.get("dur")
            if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
                tracks[(event.get("pid"), event.get("tid"))].append((ts, ts + dur))
    problems = []
    for (pid, tid), slices in sorted(tracks.items(), key=lambda kv: str(kv[0])):
        open_ends: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start + eps_us:
                open_ends.pop()
            if open_ends and end > open_ends[-1] + eps_us:
                problems.append(
                    f"pid {pid} tid {tid}: slice at {start} overlaps one ending at {open_ends[-1]}"
                )
                break
            open_ends.append(end)
    return problems


def thread_slices(trace: dict[str, Any], what: str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The slices of process 4's thread tracks named `what` ("on CPU" or "run queue"), by the
    thread's (label, tid) as the track name gives them ("q0 tid 812 on CPU", "host tid 800 …")."""
    names = {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["pid"] == PID_THREADS and e["name"] == "thread_name"
    }
    out: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] != "X" or event["pid"] != PID_THREADS:
            continue
        label, _, rest = names[event["tid"]].partition(" tid ")
        tid, _, kind = rest.partition(" ")
        if kind == what:
            out[(label, int(tid))].append(event)
    return dict(out)
