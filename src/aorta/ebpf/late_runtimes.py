"""GPU runtime libraries a traced process maps after attach (dlopen): probed from then on.

A bpftrace program's uprobes are fixed when it starts, so a runtime dlopened later is invisible to
it. While `ebpf-attach` waits, `LateRuntimes.poll` re-reads /proc/PID/maps of the process and its
children (at most every RESCAN_S) and starts one more bpftrace program carrying only the
gpu_runtime family on the new files (at most MAX_LATE of them). Its window opens as soon as its
uprobes are live and closes with the main one; its printed maps are added into the main output
(`absorb`), and its entry points join the family's `probes.attached` with `late_attach_s`.
Calls made between the dlopen and that moment are not seen (bounded by the rescan interval plus
bpftrace's start-up on the file).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import engine, hist
from aorta.ebpf.probes.base import TraceTarget
from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
from aorta.ebpf.program import Program
from aorta.ebpf.runtime_libs import file_identity, runtime_libraries, with_descendants
from aorta.ebpf.session import SessionError, SessionOutput, TraceSession

RESCAN_S = 0.5
MAX_LATE = 4


@dataclass
class _Late:
    program: Program
    family: GpuRuntimeFamily
    session: TraceSession
    after_s: float  # seconds after the main window opened that its uprobes were live
    out: SessionOutput | None = None


class LateRuntimes:
    """Watches the traced processes for runtime libraries mapped after attach (see module doc)."""

    def __init__(
        self, root_pid: int | tuple[int, ...], program: Program, ready: engine.Readiness, started: float
    ) -> None:
        """`root_pid`: the traced process (or processes: ebpf-attach without --pid); `program`: the
        main one (its gpu_runtime family's files are known); `started`: when its window opened
        (time.monotonic)."""
        self.roots = (root_pid,) if isinstance(root_pid, int) else tuple(root_pid)
        self.ready, self.started = ready, started
        main = [f for f in program.families if isinstance(f, GpuRuntimeFamily)]
        self.known = {file_identity(p) for f in main for p in f.seen_paths}
        self.views = main[0].views if main else None  # late files: the same views as the main one
        self.late: list[_Late] = []
        self.errors: list[str] = []
        self._last = 0.0

    def poll(self) -> None:
        """Re-scan (rate-limited); start a program for new runtime files, if any and if allowed."""
        now = time.monotonic()
        if now - self._last < RESCAN_S or len(self.late) >= MAX_LATE:
            return
        self._last = now
        pids = with_descendants(self.roots)
        new = [lib for lib in runtime_libraries(pids) if file_identity(lib.path) not in self.known]
        if not new:
            return
        self.known |= {file_identity(lib.path) for lib in new}
        family = GpuRuntimeFamily(libraries=new, views=self.views, calibrate=False)
        tracefs = self.ready.tracefs
        assert tracefs is not None
        target = TraceTarget(pids=tuple(pids), follow_children=True)
        program = engine.make_program(True, False, target, tracefs, self.ready.version, families=[family])
        if not family.attached:
            return  # nothing probeable in the new files: the family lists why at collect time
        try:
            session = engine.start_session(program, self.ready)
            session.window_start()
        except SessionError as exc:
            self.errors.append(f"late runtime {', '.join(lib.mapped_as for lib in new)}: {exc}")
            return
        self.late.append(_Late(program, family, session, time.monotonic() - self.started))

    def stop(self) -> None:
        """Close every late program's window and stop it (called right after the main window)."""
        for late in self.late:
            try:
                late.session.window_stop()
                late.out = late.session.stop()
            except SessionError as exc:
                late.session.abort()
                self.errors.append(str(exc))

    def abort(self) -> None:
        """Kill every late program (the main session failed)."""
        for late in self.late:
            late.session.abort()

    def absorb(self, program: Program, out: SessionOutput) -> SessionOutput:
        """The main output with the late programs' gpu_runtime maps added in; the main program's
        family learns their attached entry points (and its 'nothing mapped' line goes)."""
        main = next((f for f in program.families if isinstance(f, GpuRuntimeFamily)), None)
        maps, lost = dict(out.maps), out.lost_events
        for late in self.late:
            if late.out is None or main is None:
                continue
            for name, value in late.out.maps.items():
                if name.startswith("@gpu_runtime_"):
                    maps[name] = add_maps(maps.get(name), value)
            lost += late.out.lost_events
            main.attached += [{**a, "late_attach_s": round(late.after_s, 3)} for a in late.family.attached]
            main.not_attached += late.family.not_attached
            used = program.used_events.setdefault(main.name, [])
            used += late.program.used_events.get(main.name, [])
            missing = program.missing.setdefault(main.name, {})
            missing.pop("uprobe:*", None)
            missing.update(late.program.missing.get(main.name, {}))
        return replace(out, maps=maps, lost_events=lost)

    def report(self) -> JsonObject:
        """What was found late, for the result file."""
        return {
            "rescan_s": RESCAN_S,
            "max_programs": MAX_LATE,
            "programs": [
                {
                    "libraries": sorted({a["library"] for a in late.family.attached}),
                    "probes_live_after_s": round(late.after_s, 3),
                    "lost_events": late.out.lost_events if late.out else None,
                }
                for late in self.late
            ],
            "errors": self.errors,
        }


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
