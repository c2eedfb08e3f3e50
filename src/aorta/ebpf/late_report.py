"""What the result says about one runtime library mapped after attach (pure; late_runtimes uses it).

All times are CLOCK_MONOTONIC: the kernel's (bpftrace `nsecs`) for when the library was mapped
(`probes/gpu_runtime_loads`) and when its late program's gate opened, this process's
`time.monotonic_ns()` (the same clock) for when that program's uprobes were live (its handshake
had completed) and when a re-scan found the library. They are given in ms since the main window
opened. A call into the library counts only from its late program's gate opening on; calls made
between the mapping and then are not counted, and nothing can count them afterwards: no probe was
on the library, so the result gives the span, and the number of calls as null with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from aorta.common.jsontypes import JsonObject
from aorta.ebpf.probes.base import Window
from aorta.ebpf.probes.gpu_runtime_loads import MAX_RECORDS, ExecMapping, mapped_at


@dataclass(frozen=True)
class LateLibrary:
    """One runtime file found mapped after attach, and what became of it.

    `starts`: (pid, start of its executable segment) in each traced process that mapped it when
    a re-scan found it; `found_ns`: when that re-scan ran; `live_ns`: when its late program's
    uprobes were live (None: not probed, `reason` says why); `counted_from_ns`: when that
    program's gate opened (kernel), from which its calls count."""

    path: str
    kind: str
    starts: tuple[tuple[int, int], ...]
    found_ns: int
    live_ns: int | None = None
    counted_from_ns: int | None = None
    reason: str | None = None


def first_mapping(lib: LateLibrary, found: list[ExecMapping]) -> ExecMapping | None:
    """The kernel's record of the earliest mapping of `lib`'s executable segment by a traced
    process (only records made before the re-scan that found it)."""
    hits = [mapped_at((r for r in found if r.ns <= lib.found_ns), pid, start) for pid, start in lib.starts]
    known = [h for h in hits if h is not None]
    return min(known, key=lambda r: r.ns) if known else None


def mapped_reason(lib: LateLibrary, loads_reason: str | None, dropped: int) -> str:
    """Why the mapping time of `lib` is not known."""
    if loads_reason is not None:
        return f"mapping times not recorded: {loads_reason}"
    if not lib.starts:
        return "its executable segment was not in /proc/PID/maps when it was found"
    if dropped:
        return (
            f"no record of its mapping: the first {MAX_RECORDS} executable mappings were kept and "
            f"{dropped} later ones were not"
        )
    return (
        "no record of its mapping: it was mapped before the mmap probes were live (after the "
        "program was rendered, before it attached)"
    )


def library_row(
    lib: LateLibrary, found: list[ExecMapping], window: Window, loads_reason: str | None, dropped: int
) -> JsonObject:
    """The result's row for one late library (see the module doc)."""
    hit = first_mapping(lib, found)
    mapped_ns = hit.ns if hit is not None else None

    def since_start(ns: int | None) -> float | None:
        if ns is None or window.start_ns is None:
            return None
        return round((ns - window.start_ns) / 1e6, 3)

    gap = None
    if lib.live_ns is not None and mapped_ns is not None:
        gap = round((lib.live_ns - mapped_ns) / 1e6, 3)
    # the part of the window during which calls into it were not counted
    end = lib.counted_from_ns if lib.live_ns is not None else window.stop_ns
    begin = max(mapped_ns, window.start_ns) if mapped_ns is not None and window.start_ns is not None else None
    uncounted = round(max(0, end - begin) / 1e6, 3) if begin is not None and end is not None else None
    calls, why = calls_not_counted(lib, uncounted, mapped_ns, window)
    return {
        "library": lib.path,
        "kind": lib.kind,
        "pids": sorted({pid for pid, _ in lib.starts}),
        "probed": lib.live_ns is not None,
        "not_probed_reason": lib.reason,
        "mapped_pid": hit.pid if hit is not None else None,
        "mapped_monotonic_ns": mapped_ns,
        "mapped_at_ms": since_start(mapped_ns),
        "mapped_reason": None if hit is not None else mapped_reason(lib, loads_reason, dropped),
        "found_at_ms": since_start(lib.found_ns),
        "probes_live_monotonic_ns": lib.live_ns,
        "probes_live_at_ms": since_start(lib.live_ns),
        "counted_from_monotonic_ns": lib.counted_from_ns,
        "counted_from_ms": since_start(lib.counted_from_ns),
        "map_to_live_ms": gap,
        "not_counted_ms": uncounted,
        "calls_not_counted": calls,
        "calls_not_counted_reason": why,
    }


def calls_not_counted(
    lib: LateLibrary, uncounted_ms: float | None, mapped_ns: int | None, window: Window
) -> tuple[int | None, str]:
    """How many of the window's calls into `lib` were not counted (0 only when none can have
    been: it was live before the window opened), with what is known."""
    if uncounted_ms is None:
        what = "when it was mapped" if mapped_ns is None else "the window"
        return None, f"not known: {what} is not known, so neither is the span its calls were not counted in"
    if uncounted_ms == 0 and lib.live_ns is not None:
        return 0, "its probes were live before the window opened: every call in the window was counted"
    if lib.live_ns is None:
        return None, (
            f"not probed: calls in the last {uncounted_ms:.1f} ms of the window (from its mapping on) "
            "were not counted; their number is not known"
        )
    after = (
        "the window opened"
        if window.start_ns is not None and mapped_ns is not None and (mapped_ns < window.start_ns)
        else "the runtime was mapped"
    )
    return None, (
        f"calls in the first {uncounted_ms:.1f} ms after {after} were not counted: no probe was on the "
        "library yet, so their number is not known"
    )
