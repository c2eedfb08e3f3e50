"""The contract between the tracing engine (session.py) and probe families.

A family renders bpftrace probe blocks from the *live* format of each tracepoint it wants (a
missing tracepoint lowers coverage, never crashes), aggregates in the kernel into maps whose names
start with `@<family name>_`, and turns the maps printed at the end into typed metrics.
The engine puts every requested family into ONE bpftrace program.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aorta.common.jsontypes import JsonObject
from aorta.ebpf.procstat import MarkerClock
from aorta.ebpf.tracefs import EventFormat, Tracefs

#: one family's `snapshot()` values by window edge ("start", "stop"): opaque to everyone but the
#: family, which finds them in its collect context (`CollectContext.edges(family name)`)
EdgeSnapshots: TypeAlias = dict[str, object]
#: how the window's edges are marked (docs/ebpf.md), as the result's `window` block says
WINDOW_GATE = "prctl marker syscalls from the tracer (see docs/ebpf.md)"


@dataclass(frozen=True)
class BpftraceDialect:
    """Syntax differences between bpftrace versions (Debian 12: 0.17; Ubuntu 24.04: 0.20)."""

    version: tuple[int, int, int]

    def arg(self, field_name: str) -> str:
        """How to read a tracepoint argument: `args->x` before 0.20 (only form), `args.x` after."""
        return f"args.{field_name}" if self.version >= (0, 20, 0) else f"args->{field_name}"


@dataclass(frozen=True)
class TraceTarget:
    """Whose events count.

    pids: thread-group ids traced from the start; follow_children: also their descendants
    (torchrun ranks); thread_labels: tid → label (e.g. "q0" for a CPU-backend queue worker);
    doorbells: (pid, fd, worker tid, queue) of each CPU-backend queue's submission doorbell;
    window_ranks: how many processes send window markers (torchrun: the node's local ranks); above
    1 the first start opens the gate and later starts leave it open.
    rank_keys: a node's program (torchrun): pids[k] is local rank slot k, its children inherit the
    slot, and families key their per-process maps by the rank key (slot + 1) first, so each
    rank's numbers are sliced out of the one program's maps (probes.ranks.rank_slice).
    """

    pids: tuple[int, ...]
    follow_children: bool = True
    thread_labels: dict[int, str] = field(default_factory=dict)
    exclude_pids: tuple[int, ...] = ()  # never counted (the tracer's own bpftrace child)
    doorbells: tuple[tuple[int, int, int, int], ...] = ()
    window_ranks: int = 1
    rank_keys: bool = False
    timeline_events: int = 0  # per-event timeline records kept per kind (0: aggregates only)


@dataclass(frozen=True)
class QueueWorker:
    """A thread that runs one queue's work (CPU backend), as collect() finds it in the context's
    `workers`: its tid and queue, the streams it serves (None: not known from outside the
    process), its doorbell fd and its process (None where not known)."""

    tid: int
    queue: int
    streams: tuple[int, ...] | None = None
    doorbell_fd: int | None = None
    pid: int | None = None


@dataclass(frozen=True)
class WindowEdges:
    """Where the window's markers are caught, for a family that must act in the syscall of the
    thread that opens or closes the window (it is that thread's `curtask` there): `attach` (the
    marker's tracepoint), `event` ("system:event"), `match` (a predicate true for this program's
    markers only), `opens` / `closes` (true for the opening / closing one)."""

    attach: str
    event: str
    match: str
    opens: str
    closes: str


@dataclass(frozen=True)
class StreamHandle:
    """One stream of the GPU backend: its index and the runtime's handle for it (a cudaStream_t /
    hipStream_t as an int), so eBPF uprobe counts per handle join the harness's streams."""

    stream: int
    handle: int


@dataclass(frozen=True)
class Window:
    """The traced window as the kernel saw it: CLOCK_MONOTONIC ns of the gate's opening and
    closing (None when unknown)."""

    start_ns: int | None = None
    stop_ns: int | None = None

    @property
    def duration_ms(self) -> float | None:
        """Stop − start in ms, None when an edge is unknown."""
        if self.start_ns is None or self.stop_ns is None:
            return None
        return (self.stop_ns - self.start_ns) / 1e6

    def to_json(self) -> JsonObject:
        """The result's `window` block."""
        return {
            "start_monotonic_ns": self.start_ns,
            "stop_monotonic_ns": self.stop_ns,
            "duration_ms": self.duration_ms,
            "gate": WINDOW_GATE,
        }


@dataclass(frozen=True)
class CollectContext:
    """What `ProbeFamily.collect` gets besides the maps: the run's facts (the engine and the
    tracers build it; `engine.collect_results` adds the session's snapshots and each family's
    attached events).

    window: the traced window (kernel clock); pids: the traced processes; workers: the CPU
    backend's queue threads; submitter_tids: the threads that hand work to the queues; streams:
    how many streams the workload asked for (None: not known, e.g. from outside the process);
    stream_handles: the GPU backend's stream index → runtime handle; doorbells_traced: every
    doorbell of the program (a node's holds every local rank's; None: this process's workers);
    rank_key: a node program's rank key (torchrun), else None; snapshots: family name → its
    `snapshot()` values per window edge (None: the session's); attached: the "system:event"s the
    program attached for this family; marker_clock: the window-marking thread's own CPU time and
    switches read right before each marker (None: the session's).
    """

    window: Window = field(default_factory=Window)
    pids: tuple[int, ...] = ()
    workers: tuple[QueueWorker, ...] = ()
    submitter_tids: tuple[int, ...] = ()
    streams: int | None = None
    stream_handles: tuple[StreamHandle, ...] = ()
    doorbells_traced: int | None = None
    rank_key: int | None = None
    snapshots: Mapping[str, EdgeSnapshots] | None = None
    attached: tuple[str, ...] = ()
    marker_clock: MarkerClock | None = None

    def edges(self, family: str) -> EdgeSnapshots:
        """`family`'s snapshots by window edge ({} when it took none)."""
        return (self.snapshots or {}).get(family) or {}


@dataclass
class RenderContext:
    """What a family needs to render code for this machine and this run.

    `pid_filter` is a predicate true for traced processes (the engine keeps the map behind it,
    following children when asked); `gate` is a predicate true only inside the measurement window.
    Families AND both into their filters, except for events that fire in kernel workers on behalf
    of a process (attribute those by their own pid/pasid argument instead).
    """

    tracefs: Tracefs
    dialect: BpftraceDialect
    target: TraceTarget
    pid_filter: str
    gate: str
    rank: str | None = None  # node program: the current task's rank key (slot + 1); else None
    edges: WindowEdges | None = None  # the window markers (None: rendered without a gate probe)

    def prefix(self, rank: str | None = None) -> str:
        """`r, ` to put first in a per-rank map key in a node program ("" otherwise); `rank` is
        the key's expression where the event fires outside the rank's own process."""
        if self.rank is None:
            return ""
        return f"{rank or self.rank}, "

    def key(self, *parts: str, rank: str | None = None) -> str:
        """A map subscript led by the rank key in a node program: `[r, a]`, `[a]`, `[r]` or ""."""
        inner = self.prefix(rank) + ", ".join(parts)
        return f"[{inner.rstrip(', ')}]" if inner else ""

    @property
    def btf(self) -> bool:
        """bpftrace can read kernel structs here (the live kernel has BTF; recorded trees do not)."""
        return bool(getattr(self.tracefs, "btf", False))

    def event(self, system: str, name: str) -> EventFormat | None:
        """The live format of `system:name`, or None when this kernel lacks it."""
        return self.tracefs.read_format(system, name)


@dataclass
class ProbeCode:
    """A family's share of the bpftrace program."""

    probes: list[str] = field(default_factory=list)  # complete probe blocks
    begin: list[str] = field(default_factory=list)  # statements for BEGIN (map initialisation)
    end: list[str] = field(default_factory=list)  # statements for END (print(@map); …)
    used_events: list[str] = field(default_factory=list)  # "system:event" attached
    missing: dict[str, str] = field(default_factory=dict)  # "system:event" → why not attached


@dataclass
class FamilyResult:
    """Typed metrics of one family plus what it covered."""

    family: str
    section: str  # "queue" or "memory"
    metrics: JsonObject  # written into the result as is
    coverage: JsonObject


class ProbeFamily(ABC):
    """One question the kernel can answer (CPU scheduling of queue threads, amdgpu jobs, …)."""

    name: str  # also the map-name prefix: @<name>_...
    section: str  # "queue" or "memory"
    description: str
    # maps keyed by the rank key first in a node program (recorder names expand to their maps)
    rank_keyed_maps: tuple[str, ...] = ()

    @abstractmethod
    def wanted_events(self) -> list[str]:
        """Every "system:event" this family can use (present or not on this kernel)."""

    @abstractmethod
    def render(self, ctx: RenderContext) -> ProbeCode:
        """bpftrace code for the events present in ctx.tracefs; list the missing ones."""

    @abstractmethod
    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        """Metrics from this family's printed maps (keys are map names with '@').

        `context` carries run facts: the window, the queue workers, stream handles, snapshots, …
        """

    def render_state(self) -> JsonObject:
        """What `collect` keeps from `render` (JSON-safe), for processes that did not render: a
        node's other torchrun ranks collect from local rank 0's program."""
        return {}

    def restore_state(self, state: JsonObject) -> None:
        """Take over another process's `render_state()`."""

    def snapshot(self, target: TraceTarget) -> Any:
        """User-space counters read at each window edge (e.g. /proc), for `collect`; None: none.

        The engine calls it right before opening and right after closing the gate and passes
        both to `collect` as `context.edges(name)` = {"start": …, "stop": …}. Counters the
        kernel already keeps cost nothing on the hot path, unlike per-event map updates.
        """
        return None


class EventSetFamily(ProbeFamily):
    """A family that collects only the tracepoints its render attached (the set travels to a
    node's other ranks through render_state)."""

    def __init__(self) -> None:
        self.attached: set[str] | None = None  # set by render(): collect reports only these

    def render_state(self) -> JsonObject:
        return {"attached": None if self.attached is None else sorted(self.attached)}

    def restore_state(self, state: JsonObject) -> None:
        attached = state.get("attached")
        self.attached = None if attached is None else set(attached)
