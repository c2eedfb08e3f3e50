"""The benchmark's WindowTracer: one eBPF session around exactly the measurement window.

Tracer problems never crash a run: they end up as `status`/`error` in the result sections.
`make_tracer(queue, memory)` is the one place run/sweep build a tracer from their flags.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import engine
from aorta.ebpf import timeline as timeline_mod
from aorta.ebpf.late_runtimes import place
from aorta.ebpf.probes.base import CollectContext, QueueWorker, StreamHandle, TraceTarget
from aorta.ebpf.probes.cpu_sched import SUBMITTER_LABEL
from aorta.ebpf.program import Program, ProgramError
from aorta.ebpf.session import SessionError, TraceSession
from aorta.hw_queue_eval.results.models import TracerSections
from aorta.hw_queue_eval.tracing.collective_join import collective_join, harness_collective_ops
from aorta.hw_queue_eval.tracing.gpu_runtime_comparison import compare_gpu_runtime
from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness
from aorta.hw_queue_eval.tracing.late_watch import LateWatch
from aorta.hw_queue_eval.tracing.window_context import WindowContext


class EbpfTracer:
    """Implements harness.WindowTracer with aorta.ebpf."""

    def __init__(
        self,
        queue: bool,
        memory: bool,
        ready: engine.Readiness | None = None,
        gpu_runtime: bool = False,
        timeline: bool = False,
        gpu_runtime_views: tuple[str, ...] | None = None,
    ) -> None:
        self.queue = queue or gpu_runtime
        self.gpu_runtime_views = gpu_runtime_views  # --ebpf-gpu-runtime-views (None: default)
        # per-event records for --trace-out's timeline (bounded: timeline.TIMELINE_EVENTS per kind)
        self.timeline_events = timeline_mod.TIMELINE_EVENTS if timeline else 0
        self.gpu_runtime = gpu_runtime
        self.memory = memory
        self.ready = ready if ready is not None else engine.check_readiness()
        self.program: Program | None = None
        self.session: TraceSession | None = None
        self.error: str | None = None if self.ready.ok else self.ready.reason
        self.status = "ok" if self.ready.ok else "unavailable"
        self.submitter_tid: int | None = None
        self.late: LateWatch | None = None  # runtimes mapped after prepare (gpu_runtime only)

    def prepare(self, backend: Any, workload: Any) -> None:
        """Attach every probe (blocking until the handshake) before warm-up."""
        if not self.ready.ok or self.ready.tracefs is None:
            return
        workers = [w for w in backend.workers() if w.tid]
        labels = {w.tid: f"q{w.queue}" for w in workers}
        # this (harness) thread enqueues all work on either backend: it rings the CPU backend's
        # doorbells and makes the GPU backend's runtime calls (torch launches from the caller's
        # thread), so it is followed whenever tracing is on, GPU runs included
        self.submitter_tid = threading.get_native_id()
        labels[self.submitter_tid] = SUBMITTER_LABEL
        pid = os.getpid()
        doorbells = tuple((pid, w.doorbell_fd, w.tid, w.queue) for w in workers if w.doorbell_fd is not None)
        target = TraceTarget(
            pids=(pid,),
            follow_children=True,
            thread_labels=labels,
            doorbells=doorbells,
            timeline_events=self.timeline_events,
        )
        try:
            self.program = engine.make_program(
                self.queue,
                self.memory,
                target,
                self.ready.tracefs,
                self.ready.version,
                gpu_runtime=self.gpu_runtime,
                gpu_runtime_views=self.gpu_runtime_views,
            )
            self.session = engine.start_session(self.program, self.ready)
        except (ProgramError, SessionError, OSError) as exc:
            self.status, self.error = "error", str(exc)
            self.session = None
            return
        if self.gpu_runtime:
            self.late = LateWatch(pid, self.program, self.ready, self.session)

    def window_start(self) -> None:
        if self.session is not None:
            self.session.window_start()
        if self.late is not None:
            self.late.window_start()

    def window_stop(self) -> None:
        if self.late is not None:  # late gates first: no late call counts outside the main window
            self.late.window_stop()
        if self.session is not None:
            self.session.window_stop()

    def finish(self, context: WindowContext) -> TracerSections:
        """Stop bpftrace and turn its maps into result sections; never raises."""
        try:
            sections = self._finish(context)
        except Exception as exc:  # a tracer bug must not lose the benchmark's numbers
            self.abort()
            sections = engine.unavailable_sections(
                f"tracer failed: {type(exc).__name__}: {exc}", self.queue, self.memory, "error", self.ready
            )
        warn_in_result(context.warnings, sections)
        return TracerSections.of(sections)

    def _finish(self, context: WindowContext) -> JsonObject:
        if self.session is None or self.program is None:
            sections = engine.unavailable_sections(
                self.error or "not started", self.queue, self.memory, self.status, self.ready
            )
            if self.queue:
                sections["ebpf_vs_cuda_comparison"] = {"status": self.status, "error": self.error}
            return sections
        late, self.late = self.late, None
        if late is not None:
            late.finish()
        # the --trace-out timeline doubles the gpu_runtime uprobes bpftrace detaches on exit
        output = self.session.stop()
        self.session = None
        report = None
        if late is not None:
            output, report = late.absorb(self.program, output)
        fam_context = family_context(context, os.getpid(), self.submitter_tid, output)
        sections = sections_for(
            self.program, output, self.ready, self.queue, self.memory, context, fam_context
        )
        if report is not None:
            place(sections, report)
        return sections

    def abort(self) -> None:
        """Stop bpftrace now (exceptions, Ctrl+C): no orphan, temp files removed."""
        if self.late is not None:
            self.late.abort()
            self.late = None
        if self.session is not None:
            self.session.abort()
            self.session = None


def family_context(
    context: WindowContext, pid: int, submitter_tid: int | None, output: Any
) -> CollectContext:
    """What the families' collect needs from one benchmark process (its workers, pid, streams)."""
    backend = context.backend
    workers = (
        tuple(QueueWorker(w.tid, w.queue, tuple(w.streams), w.doorbell_fd) for w in backend.workers())
        if backend is not None
        else ()
    )
    return CollectContext(
        workers=workers,
        window=engine.window_edges(output),
        pids=(pid,),
        streams=context.stream_count,
        submitter_tids=(submitter_tid,) if submitter_tid else (),
        stream_handles=stream_handles(backend),
    )


def sections_for(
    program: Program,
    output: Any,
    ready: engine.Readiness,
    queue: bool,
    memory: bool,
    context: WindowContext,
    fam_context: CollectContext,
) -> JsonObject:
    """The result sections of one process from a stopped session's output."""
    results = engine.collect_results(program, output, fam_context)
    backend = context.backend.name if context.backend is not None else None
    sections = engine.build_sections(program, output, results, ready, queue, memory, backend)
    if queue:
        queue_section = sections["ebpf_queue_metrics"]
        queue_section["interpretation"] = engine.interpret_queue(queue_section, fam_context.streams)
        family = (queue_section.get("families") or {}).get("cpu_sched") or {}
        # per-submission kernel records feed the comparison; the JSON keeps counts and sums
        records = (family.get("metrics") or {}).pop("per_submission", None)
        sections["ebpf_vs_cuda_comparison"] = (
            compare_gpu_runtime(queue_section, list(context.ops), fam_context.streams, context.folded)
            if queue_section.get("source") == "gpu_runtime"
            else compare_with_harness(queue_section, context.submissions, records, context.handoff_totals)
        )
        runtime = (queue_section.get("families") or {}).get("gpu_runtime")
        if runtime is not None:  # the workload's collective ops vs the runtime's NCCL/RCCL calls
            sections["ebpf_vs_cuda_comparison"]["collectives"] = collective_join(
                runtime.get("metrics") or {},
                harness_collective_ops(context.ops, context.folded),
                context.collectives,
            )
    return sections


def warn_in_result(warnings: list[str], sections: JsonObject) -> None:
    """Surface tracing problems among the result's warnings (they are easy to miss otherwise)."""
    for key, section in sections.items():
        if not isinstance(section, dict) or key == "ebpf_vs_cuda_comparison":
            continue
        if section.get("status") != "ok":
            warnings.append(f"{key}: tracing {section.get('status')}: {section.get('error')}")
        elif section.get("warning"):  # lost events, updates dropped by full maps
            warnings.append(f"{key}: {section['warning']}")


def make_tracer(
    queue: bool,
    memory: bool,
    gpu_runtime: bool = False,
    timeline: bool = False,
    bpftrace: str | None = None,
    gpu_runtime_views: tuple[str, ...] | None = None,
) -> EbpfTracer | None:
    """A tracer for the requested modes, or None when no tracing was asked for; `timeline`
    (--trace-out given) also keeps the first events of each kind for the trace; `bpftrace` is
    the --bpftrace option (None: PATH's); `gpu_runtime_views`: --ebpf-gpu-runtime-views."""
    if not (queue or memory or gpu_runtime):
        return None
    ready = engine.check_readiness(bpftrace=bpftrace)
    return EbpfTracer(
        queue,
        memory,
        ready=ready,
        gpu_runtime=gpu_runtime,
        timeline=timeline,
        gpu_runtime_views=gpu_runtime_views,
    )


def stream_handles(backend: Any) -> tuple[StreamHandle, ...]:
    """The backend's stream index → runtime stream handle (GPU backend), to join uprobe counts."""
    method = getattr(backend, "stream_handles", None)
    try:
        return tuple(method()) if callable(method) else ()
    except Exception:  # a backend without live streams: nothing to join, never a crash
        return ()
