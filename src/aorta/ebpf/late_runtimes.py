"""GPU runtime libraries a traced process maps after attach (dlopen): probed from then on, timed.

A bpftrace program's uprobes are fixed when it starts, so a runtime dlopened later is invisible to
it. The main program's gpu_runtime family records, from the kernel, every executable file mapping
of the traced processes (`probes/gpu_runtime_loads`) and prints a notice for each. `LateRuntimes`
re-reads /proc/PID/maps of the process and its children when a notice arrives (and, where asked,
every RESCAN_S as well) and starts one more bpftrace program carrying only the gpu_runtime family
on the new files (at most MAX_LATE of them). Its gate opens once its uprobes are live and the main
window is open, and closes with the main one; its printed maps are added into the main output
(`absorb`), and its entry points join the family's `probes.attached` with `late_attach_s`.

`report` says, per late library, when the kernel saw it mapped, when its probes were live and
counted from, and the span in between: calls made then were not counted, and their number is not
known (late_report). A library found but not probed (too many programs, the window ending, a
start error) is listed with the reason, never dropped.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import engine, hist
from aorta.ebpf import late_report as lr
from aorta.ebpf.probes import gpu_runtime_loads as loads
from aorta.ebpf.probes.base import TraceTarget, Window
from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
from aorta.ebpf.probes.gpu_runtime_apis import MissedProbe
from aorta.ebpf.program import WINDOW_START_MAP, WINDOW_STOP_MAP, Program, ProgramError
from aorta.ebpf.runtime_libs import (
    MappedLibrary,
    executable_starts,
    file_identity,
    runtime_libraries,
    with_descendants,
)
from aorta.ebpf.session import SessionError, SessionOutput, TraceSession

RESCAN_S = 0.5
MAX_LATE = 4


@dataclass
class _Late:
    """One late program and what it probes."""

    program: Program
    family: GpuRuntimeFamily
    session: TraceSession
    live_ns: int  # time.monotonic_ns() once its handshake completed (its uprobes were live)
    render_s: float  # reading the files' symbols and building the program
    gate_open: bool = False
    out: SessionOutput | None = None


@dataclass
class _Found:
    """One runtime file found mapped after attach."""

    library: MappedLibrary
    found_ns: int
    starts: tuple[tuple[int, int], ...]
    late: _Late | None = None
    reason: str | None = None  # why it was not probed


@dataclass
class _State:
    """What poll (a watcher thread in `run`) and the window edges (the main thread) share."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    window_open: bool = False
    closed: bool = False  # the window is over (or aborted): no program starts any more


class LateRuntimes:
    """Watches the traced processes for runtime libraries mapped after attach (see module doc)."""

    def __init__(
        self,
        root_pid: int | tuple[int, ...],
        program: Program,
        ready: engine.Readiness,
        session: TraceSession,
        rescan_s: float | None = RESCAN_S,
    ) -> None:
        """`root_pid`: the traced process (or processes: ebpf-attach without --pid); `program`,
        `session`: the main ones (its gpu_runtime family's files are known, its notices arrive
        on the session); `rescan_s`: re-scan that often without a notice too (None: only on a
        notice, as in `run`, whose process is the one measured)."""
        self.roots = (root_pid,) if isinstance(root_pid, int) else tuple(root_pid)
        self.ready, self.session, self.rescan_s = ready, session, rescan_s
        self.main = next((f for f in program.families if isinstance(f, GpuRuntimeFamily)), None)
        self.known = {file_identity(p) for p in (self.main.seen_paths if self.main else [])}
        self.views = self.main.views if self.main else None  # late files: the main one's views
        self.late: list[_Late] = []
        self.found: list[_Found] = []
        self.errors: list[str] = []
        self._state = _State()
        self._scan_lock = threading.Lock()
        self._last = time.monotonic()

    # -- watching ------------------------------------------------------------------------------
    def poll(self) -> None:
        """Re-scan when the kernel reported a new executable mapping (or the interval passed);
        start a program for new runtime files, if any."""
        notice = self.session.printf_seen.is_set()
        now = time.monotonic()
        if not notice and (self.rescan_s is None or now - self._last < self.rescan_s):
            return
        self.session.printf_seen.clear()
        self._last = now
        self.scan(None)

    def scan(self, not_probed: str | None) -> None:
        """Find runtime files mapped since the last scan; probe them, or list them as not probed
        with `not_probed` (the reason) when it is given. One scan at a time (`run` scans on a
        watcher thread and once more on the main thread after the window)."""
        with self._scan_lock:
            self._scan(not_probed)

    def _scan(self, not_probed: str | None) -> None:
        pids = with_descendants(self.roots)
        new = [lib for lib in runtime_libraries(pids) if file_identity(lib.path) not in self.known]
        if not new:
            return
        now = time.monotonic_ns()
        self.known |= {file_identity(lib.path) for lib in new}
        items = [_Found(lib, now, _starts(lib, pids)) for lib in new]
        self.found += items
        if not_probed is None and self._state.closed:
            not_probed = "mapped as the window ended: not probed"
        if not_probed is None and len(self.late) >= MAX_LATE:
            not_probed = f"at most {MAX_LATE} late programs: not probed"
        if not_probed is None:
            not_probed = self._start(new, items, pids)
        for item in items:
            item.reason = item.reason or (not_probed if item.late is None else None)

    def _start(self, new: list[MappedLibrary], items: list[_Found], pids: list[int]) -> str | None:
        """One late program on `new`; None once it runs, else why it does not."""
        family = GpuRuntimeFamily(libraries=new, views=self.views, calibrate=False, watch_loads=False)
        assert self.ready.tracefs is not None
        target = TraceTarget(pids=tuple(pids), follow_children=True)
        t0 = time.monotonic()
        try:
            program = engine.make_program(
                True, False, target, self.ready.tracefs, self.ready.version, families=[family]
            )
        except ProgramError as exc:
            return f"its program could not be built: {exc}"
        render_s = time.monotonic() - t0
        if not family.attached:
            why = sorted({n.reason for n in family.not_attached}) or ["no entry point to probe"]
            return f"nothing in it could be probed: {'; '.join(why)}"
        try:
            session = engine.start_session(program, self.ready)
        except SessionError as exc:
            self.errors.append(f"late runtime {', '.join(lib.mapped_as for lib in new)}: {exc}")
            return f"its program did not start: {exc}"
        late = _Late(program, family, session, time.monotonic_ns(), render_s)
        with self._state.lock:
            if self._state.closed:  # the window ended (or the run was aborted) meanwhile
                session.abort()
                return "its probes were live only after the window ended: not probed"
            self.late.append(late)
            for item in items:
                item.late = late
            if self._state.window_open:
                session.window_start()
                late.gate_open = True
        return None

    def probed_paths(self) -> list[str]:
        """The files late programs probe now (their handshake completed), as the processes see them."""
        with self._state.lock:
            return [item.library.mapped_as for item in self.found if item.late is not None]

    # -- window edges --------------------------------------------------------------------------
    def window_start(self) -> None:
        """The main window opened: open every late program's gate (later ones open at start)."""
        with self._state.lock:
            self._state.window_open = True
            for late in self.late:
                if not late.gate_open:
                    late.session.window_start()
                    late.gate_open = True

    def window_stop(self) -> None:
        """Close every late program's gate (right before the main one closes); none starts now."""
        with self._state.lock:
            self._state.window_open, self._state.closed = False, True
            for late in self.late:
                late.session.window_stop()

    def stop(self) -> None:
        """Stop every late program (after window_stop)."""
        for late in self.late:
            try:
                late.out = late.session.stop()
            except SessionError as exc:
                late.session.abort()
                self.errors.append(str(exc))

    def abort(self) -> None:
        """Kill every late program (the main session failed, Ctrl+C)."""
        with self._state.lock:
            self._state.closed = True
            lates = list(self.late)
        for late in lates:
            late.session.abort()

    # -- results -------------------------------------------------------------------------------
    def absorb(self, program: Program, out: SessionOutput) -> SessionOutput:
        """The main output with the late programs' gpu_runtime maps added in; the main program's
        family learns their attached entry points (and its 'nothing mapped' line goes), and the
        files found but not probed are listed as not attached, with the reason."""
        main = next((f for f in program.families if isinstance(f, GpuRuntimeFamily)), None)
        if main is None:
            return out
        maps, lost = dict(out.maps), out.lost_events
        start = _ns(out.maps.get(WINDOW_START_MAP))
        missing = program.missing.setdefault(main.name, {})
        used = program.used_events.setdefault(main.name, [])
        for late in self.late:
            if late.out is None:
                continue
            for name, value in late.out.maps.items():
                if name.startswith("@gpu_runtime_"):
                    maps[name] = add_maps(maps.get(name), value)
            lost += late.out.lost_events
            after = _seconds(late.live_ns, start)
            main.attached += [replace(a, late=True, late_attach_s=after) for a in late.family.attached]
            main.not_attached += late.family.not_attached
            used += late.program.used_events.get(main.name, [])
            missing.pop("uprobe:*", None)
            missing.update(late.program.missing.get(main.name, {}))
        for item in self.found:
            if item.late is None:
                why = f"mapped after attach; {item.reason}"
                missing[f"uprobe:{item.library.mapped_as}"] = why
                main.not_attached.append(MissedProbe("*", item.library.mapped_as, why))
        return replace(out, maps=maps, lost_events=lost)

    def report(self, out: SessionOutput) -> JsonObject:
        """What was found late and when (see late_report), for the result file."""
        window = Window(_ns(out.maps.get(WINDOW_START_MAP)), _ns(out.maps.get(WINDOW_STOP_MAP)))
        found = loads.records(out.maps)
        dropped = loads.dropped(out.maps)
        loads_reason = self.main.loads_reason if self.main is not None else "no gpu_runtime family"
        return {
            "rescan": (
                "on each executable mapping the kernel reported"
                + (f", and every {self.rescan_s:g} s" if self.rescan_s is not None else "")
            ),
            "max_programs": MAX_LATE,
            "mapping_times": {
                "source": " + ".join(loads.EVENTS) + " (PROT_EXEC file mappings of the traced processes)",
                "recorded": len(found),
                "dropped": dropped,
                "reason": loads_reason,
            },
            "libraries": [
                lr.library_row(self._late_library(item), found, window, loads_reason, dropped)
                for item in self.found
            ],
            "programs": [
                {
                    "libraries": sorted({a.library for a in late.family.attached}),
                    "probes_live_after_s": _seconds(late.live_ns, window.start_ns),
                    "render_s": round(late.render_s, 3),
                    "attach_s": _round(late.session.output.attach_s),
                    "lost_events": late.out.lost_events if late.out else None,
                }
                for late in self.late
            ],
            "errors": self.errors,
        }

    def _late_library(self, item: _Found) -> lr.LateLibrary:
        late = item.late
        counted = _ns(late.out.maps.get(WINDOW_START_MAP)) if late is not None and late.out else None
        return lr.LateLibrary(
            path=item.library.mapped_as,
            kind=item.library.kind,
            starts=item.starts,
            found_ns=item.found_ns,
            live_ns=late.live_ns if late is not None else None,
            counted_from_ns=counted,
            reason=item.reason,
        )


def place(sections: JsonObject, report: JsonObject) -> None:
    """Put the late-runtime report into the gpu_runtime family's metrics of the queue section."""
    family = ((sections.get("ebpf_queue_metrics") or {}).get("families") or {}).get("gpu_runtime")
    if isinstance(family, dict) and isinstance(family.get("metrics"), dict):
        family["metrics"]["late_runtimes"] = report


def _starts(lib: MappedLibrary, pids: list[int]) -> tuple[tuple[int, int], ...]:
    """Where `lib`'s code lies in each traced process that maps it now."""
    try:
        inode = os.stat(lib.path).st_ino
    except OSError:
        return ()
    return tuple(executable_starts(pids, inode, lib.mapped_as.removesuffix(" (deleted)").rsplit("/", 1)[-1]))


def _seconds(ns: int, since_ns: int | None) -> float | None:
    return round((ns - since_ns) / 1e9, 3) if since_ns is not None else None


def _round(seconds: float | None) -> float | None:
    return round(seconds, 3) if seconds is not None else None


def _ns(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def add_maps(a: Any, b: Any) -> Any:
    """Two printed maps of the same name summed key by key (counts and stats(); a key in only
    one is kept as is). Values of other shapes: the second wins (never the case for keys the
    libraries do not share)."""
    if a is None:
        return b
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if hist.stats(a) is not None and hist.stats(b) is not None:
        count, total = a["count"] + b["count"], a["total"] + b["total"]
        return {"count": count, "average": total // count if count else 0, "total": total}
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = add_maps(out.get(k), v)
        return out
    return b
