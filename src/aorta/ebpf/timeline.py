"""Bounded per-event records for the trace's timeline: the first N slices of a kind, clipped to
the window, with the exact number seen, so a timeline says how much it dropped.

A slice kind `name` is kept in three maps: @<name>[cpu, i, tid] = start ns, @<name>_e[cpu, i] =
end ns (both for i < the per-CPU cap) and @<name>_n[cpu] = slices seen on that CPU. Events of one
CPU are serialised (a tracepoint runs with preemption off), so a per-CPU index needs no atomics
and the count is exact; the store is sized before the program loads (cap ≤ TIMELINE_EVENTS per
kind over all CPUs). Times are bpftrace's `nsecs`: CLOCK_MONOTONIC, the clock of op_intervals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.program import GATE_MAP, WINDOW_START_MAP, WINDOW_STOP_MAP

TIMELINE_EVENTS = 16384  # events kept per kind, all CPUs together (the counts are never capped)


def cap_per_cpu(total: int | None = None, cpus: int | None = None) -> int:
    """Slots per CPU so that a kind never keeps more than `total` (TIMELINE_EVENTS) events."""
    return max(1, (total or TIMELINE_EVENTS) // max(1, cpus or os.cpu_count() or 1))


def _check(name: str) -> None:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"invalid timeline map name {name!r}")


@dataclass(frozen=True)
class Charged:
    """Where a slice's charged run time comes from: bpftrace expressions of one thread's run-time
    counter, each stored + 1 so that 0 means unknown. `now`: at the switch that ends the slice;
    `before`: at the slice's start (the thread's previous switch-out); `at_open` / `at_close`: at
    the window's opening / closing marker, read by the thread that sent it, for its slices the
    window clipped (0 for every other thread: their clipped slices stay uncharged)."""

    now: str
    before: str
    at_open: str = "0"
    at_close: str = "0"


def slice_code(
    name: str, start: str, tid: str, cap: int, charged: Charged | None = None, unstarted: bool = False
) -> list[str]:
    """Statements recording the slice [`start`, now] of thread `tid` (bpftrace expressions),
    clipped to the window: kept when it overlaps it, even if it ends after the gate closed (the
    first switch after the close ends the slice that was running at it). `$t` must hold now.
    `charged`: the thread's run-time counter at the slice's ends (Charged), whose difference, the
    ns the kernel charged the slice inside the window, goes to @<name>_x[cpu, i] when both ends
    are known: a clipped end is read at the marker that clipped it. `unstarted`: a slice that
    ends while the gate is open but whose start was never recorded (`start` is 0) is counted per
    thread in @<name>_u, with its charged ns summed in @<name>_ux (from the thread's previous
    switch-out, or the opening marker if later): not drawn, but not silently gone either."""
    _check(name)
    keep = f"@{name}[cpu, $i, {tid}] = $a; @{name}_e[cpu, $i] = $e;"
    if charged is not None:
        keep += (
            f" $c0 = {charged.before}; if ($a != $a0) {{ $c0 = {charged.at_open}; }}"
            f" $c1 = {charged.now}; if ($e != $t) {{ $c1 = {charged.at_close}; }}"
            f" if ($c0 && $c1) {{ @{name}_x[cpu, $i] = $c1 - $c0; }}"
        )
    lines = [
        f"$a = {start}; $a0 = $a; $g0 = {WINDOW_START_MAP}; $g1 = {WINDOW_STOP_MAP};",
        "if ($g0 && $a) {",
        "  $e = $t;",
        f"  if ({GATE_MAP} == 0 && $g1 && $e > $g1) {{ $e = $g1; }}",
        "  if ($a < $g0) { $a = $g0; }",
        "  if ($e > $a) {",
        f"    $i = @{name}_n[cpu];",
        f"    if ($i < {int(cap)}) {{ {keep} }}",
        f"    @{name}_n[cpu] = $i + 1;",
        "  }",
        "}",
    ]
    if unstarted:
        lost = f"@{name}_u[{tid}] = count();"
        if charged is not None:
            # own variables: bpftrace 0.17 types a variable at its first assignment in the text
            lost += (
                f" $u0 = {charged.before}; $u9 = {charged.at_open}; if ($u9 > $u0) {{ $u0 = $u9; }}"
                f" $u1 = {charged.now}; if ($u0 && $u1) {{ @{name}_ux[{tid}] = sum($u1 - $u0); }}"
            )
        lines[-1] = f"}} else {{ if ($g0 && {GATE_MAP}) {{ {lost} }} }}"
    return lines


def slices(maps: JsonObject, name: str, unstarted: bool = False) -> JsonObject:
    """[[tid, start ns, end ns, charged ns or None], …] sorted by start, with `seen` (exact),
    `kept` and `dropped`; charged is what the kernel counted as the thread's run time.
    `unstarted` (rendered with slice_code's `unstarted`): also `unstarted`, the slices that ended
    in the window without a recorded start, and per thread [[tid, count, charged ns or None], …]
    in `unstarted_by_thread`."""
    ends = hist.keyed(maps.get(f"@{name}_e"))
    charged = hist.keyed(maps.get(f"@{name}_x"))
    rows = []
    for key, start in hist.keyed(maps.get(f"@{name}")).items():
        cpu, i, tid = key.split(",")
        end, ran = ends.get(f"{cpu},{i}"), charged.get(f"{cpu},{i}")
        if end is not None:
            rows.append([int(tid), int(start), int(end), None if ran is None else int(ran)])
    rows.sort(key=lambda r: (r[1], r[0]))
    seen = sum(int(v) for v in hist.keyed(maps.get(f"@{name}_n")).values())
    kind: JsonObject = {"rows": rows, "seen": seen, "kept": len(rows), "dropped": seen - len(rows)}
    if unstarted:
        lost_ns = hist.keyed(maps.get(f"@{name}_ux"))
        by_thread = [
            [int(t), int(n), None if lost_ns.get(t) is None else int(lost_ns[t])]
            for t, n in sorted(hist.keyed(maps.get(f"@{name}_u")).items(), key=lambda kv: int(kv[0]))
        ]
        kind["unstarted"] = sum(n for _, n, _ in by_thread)
        kind["unstarted_by_thread"] = by_thread
    return kind


def open_slices(maps: JsonObject, name: str, window: JsonObject, kind: JsonObject, cap_total: int) -> None:
    """Add to `kind` the slices still open when bpftrace stopped (@<name> tid → start ns, from a
    thread that never switched after the gate closed), clipped to the window, within the cap."""
    start, stop = window.get("start_monotonic_ns"), window.get("stop_monotonic_ns")
    if not (isinstance(start, int) and isinstance(stop, int)):
        return
    for tid, since in sorted(hist.keyed(maps.get(name)).items()):
        a, e = max(int(since), start), stop
        if e <= a:
            continue
        kind["seen"] += 1
        if kind["kept"] < cap_total:
            kind["rows"].append([int(tid), a, e, None])
            kind["kept"] += 1
        else:
            kind["dropped"] += 1
    kind["rows"].sort(key=lambda r: (r[1], r[0]))


def instant_code(name: str, value: str, cap: int) -> list[str]:
    """Statements keeping the first `cap` events of this CPU as @<name>[cpu, i] = now and
    @<name>_v[cpu, i] = `value`, counting all in @<name>_n[cpu] (callers gate on the window)."""
    _check(name)
    return [
        f"$i = @{name}_n[cpu];",
        f"if ($i < {int(cap)}) {{ @{name}[cpu, $i] = nsecs; @{name}_v[cpu, $i] = {value}; }}",
        f"@{name}_n[cpu] = $i + 1;",
    ]


def instants(maps: JsonObject, name: str) -> JsonObject:
    """[[time ns, value], …] sorted by time, with `seen` (exact), `kept` and `dropped`."""
    values = hist.keyed(maps.get(f"@{name}_v"))
    rows = sorted([int(ts), int(values.get(key, 0))] for key, ts in hist.keyed(maps.get(f"@{name}")).items())
    seen = sum(int(v) for v in hist.keyed(maps.get(f"@{name}_n")).values())
    return {"rows": rows, "seen": seen, "kept": len(rows), "dropped": seen - len(rows)}


def bucket_code(name: str, cap: int, bucket_ns: int = 1_000_000) -> list[str]:
    """Statements counting this event in @<name>[bucket of `bucket_ns` since the window opened]
    for the first `cap` buckets, later ones in @<name>_late (callers gate on the window)."""
    _check(name)
    return [
        f"$b = (nsecs - {GATE_MAP}) / {int(bucket_ns)};",
        f"if ($b < {int(cap)}) {{ @{name}[$b] = count(); }} else {{ @{name}_late = count(); }}",
    ]


def buckets(maps: JsonObject, name: str) -> JsonObject:
    """[[bucket index, count], …] with `seen` (every event), `kept` (in the buckets), `dropped`."""
    rows = sorted([int(k), int(v)] for k, v in hist.keyed(maps.get(f"@{name}")).items())
    late = maps.get(f"@{name}_late")
    dropped = int(late) if isinstance(late, (int, float)) else 0
    kept = sum(c for _, c in rows)
    return {"rows": rows, "seen": kept + dropped, "kept": kept, "dropped": dropped}
