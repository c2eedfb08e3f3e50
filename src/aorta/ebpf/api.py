"""The few names a Python user of the tracing engine needs (re-exported by `aorta.ebpf`): is
tracing possible here, whom to trace, which families, and one window traced as a `with` block."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import engine
from aorta.ebpf.engine import Readiness, check_readiness
from aorta.ebpf.probes.base import CollectContext, ProbeFamily, QueueWorker, TraceTarget, Window
from aorta.ebpf.probes.registry import families_for


class TracingUnavailable(Exception):
    """No bpftrace, no privileges or no tracefs here; the message says which and the fix."""


def families(
    queue: bool = True, memory: bool = False, names: tuple[str, ...] | None = None
) -> list[ProbeFamily]:
    """Fresh probe families for the modes asked (queue: CPU scheduling, doorbells, GPU queues;
    memory: host and GPU memory), only those called `names` when given (ValueError otherwise)."""
    found = families_for(queue=queue, memory=memory)
    if names is None:
        return found
    known = {f.name for f in found}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"unknown probe families {unknown}: choose from {sorted(known)}")
    return [f for f in found if f.name in names]


@dataclass
class TracedWindow:
    """What `trace_window` measured: filled when its `with` block ends (empty inside it).

    `sections` holds `ebpf_queue_metrics` / `ebpf_memory_metrics`, the same blocks a benchmark
    result carries (docs/ebpf-integration.md); `window` the window's CLOCK_MONOTONIC edges."""

    sections: JsonObject = field(default_factory=dict)
    window: JsonObject = field(default_factory=dict)

    @property
    def queue(self) -> JsonObject | None:
        return self.sections.get("ebpf_queue_metrics")

    @property
    def memory(self) -> JsonObject | None:
        return self.sections.get("ebpf_memory_metrics")


def _default_context(target: TraceTarget, window: Window) -> CollectContext:
    """The family context for a plain Python caller: its doorbells' workers as queues, the
    calling thread as the submitter."""
    workers = tuple(QueueWorker(tid, queue, streams=(queue,)) for _, _, tid, queue in target.doorbells)
    return CollectContext(
        window=window,
        workers=workers,
        pids=tuple(target.pids),
        streams=None,
        submitter_tids=(threading.get_native_id(),),
    )


@contextlib.contextmanager
def trace_window(
    target: TraceTarget,
    *,
    queue: bool = True,
    memory: bool = False,
    probe_families: list[ProbeFamily] | None = None,
    ready: Readiness | None = None,
) -> Iterator[TracedWindow]:
    """Trace what `target` does inside the `with` block: bpftrace is started and every probe
    attached before the block runs, the window opens at its first line and closes at its end,
    and the result's sections are filled on the way out. bpftrace never outlives the block,
    however it ends. TracingUnavailable when this machine cannot trace; ProgramError /
    SessionError when the program cannot be built or started."""
    ready = ready or check_readiness()
    if not ready.ok or ready.tracefs is None:
        raise TracingUnavailable(ready.reason or "eBPF tracing unavailable")
    program = engine.make_program(
        queue, memory, target, ready.tracefs, ready.version, families=probe_families
    )
    session = engine.start_session(program, ready)
    traced = TracedWindow()
    try:
        session.window_start()
        yield traced
        session.window_stop()
        output = session.stop()
    except BaseException:
        session.abort()
        raise
    window = engine.window_edges(output)
    traced.window = window.to_json()
    results = engine.collect_results(program, output, _default_context(target, window))
    traced.sections = engine.build_sections(program, output, results, ready, queue=queue, memory=memory)
