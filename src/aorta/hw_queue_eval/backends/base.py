"""The one stream API every backend offers (docs/architecture.md, "One stream API")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.ops.records import OpRecord

if TYPE_CHECKING:
    from aorta.hw_queue_eval.results.models import Memory, QueueMapping


@dataclass(frozen=True)
class WorkerInfo:
    """A host thread that executes queue work (CPU backend): eBPF attributes kernel events by tid.

    doorbell_fd: the eventfd (in this process) the host writes, and only for submissions, when it
    hands work to this idle queue; the worker blocks reading it. None where there is no doorbell.
    """

    tid: int
    queue: int
    streams: tuple[int, ...]
    doorbell_fd: int | None = None


@dataclass(frozen=True)
class SubmissionRecord:
    """One hand-off of work to an idle queue (a doorbell ring), as the harness saw it.

    Times are absolute CLOCK_MONOTONIC ns (bpftrace's `nsecs`): ring_ns right before the doorbell
    write, rung_ns right after it returned, start_ns when the worker began the first task handed
    over (for an op: its start). seq counts this queue's rings in the window from 0; first_kind is
    "op", "wait", "marker" or "stop".
    """

    queue: int
    seq: int
    ring_ns: int
    rung_ns: int
    start_ns: int
    first_kind: str


@dataclass(frozen=True)
class HandoffTotals:
    """Every hand-off to an idle queue of the window, counted (the kept SubmissionRecords may be
    only the first ones): in all, per queue, by the kind of the first task handed over, and how
    many records were kept."""

    count: int
    per_queue: dict[int, int]
    first_task_kinds: dict[str, int]
    kept: int


class DependencyLog:
    """Cross-stream waits enqueued during the window, named by per-stream op ordinals.

    A row (waiter, waiter_op, target, target_op) says: the `waiter_op`-th op launched on stream
    `waiter` in the window waits for the `target_op`-th op launched on stream `target` (and all
    before it). Ordinals count launches from the window start, the order ops run in on a stream,
    so the trace export can draw each wait as an arrow between two measured ops.
    """

    columns = ("waiter_stream", "waiter_op", "target_stream", "target_op")
    max_rows = 200_000  # rows kept (the result keeps at most this many); `total` counts all

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int]] = []
        self.total = 0
        self.pairs: dict[tuple[int, int], int] = {}  # (target, waiter) → waits, every one counted
        self._launched: dict[int, int] = {}
        self.active = False

    def start(self) -> None:
        """Begin a window: forget earlier launches and waits."""
        self.rows.clear()
        self.total = 0
        self.pairs.clear()
        self._launched.clear()
        self.active = True

    def stop(self) -> list[tuple[int, int, int, int]]:
        """End the window; the waits recorded in it."""
        self.active = False
        return list(self.rows)

    def launched(self, stream: int) -> None:
        """Count one op launched on `stream`."""
        if self.active:
            self._launched[stream] = self._launched.get(stream, 0) + 1

    def waited(self, waiter: int, target: int) -> None:
        """Record that `waiter`'s next op waits for `target`'s last launched op (if in the window)."""
        done = self._launched.get(target, 0)
        if self.active and done > 0 and waiter != target:
            self.total += 1
            self.pairs[(target, waiter)] = self.pairs.get((target, waiter), 0) + 1
            if self.total <= self.max_rows:
                self.rows.append((waiter, self._launched.get(waiter, 0), target, done - 1))


class Stream(ABC):
    """An ordered sequence of ops. Ops on one stream run in order; streams may run concurrently."""

    index: int

    @abstractmethod
    def launch(self, fn: Callable[[], Any], label: str) -> None:
        """Enqueue `fn` (which writes into pre-allocated buffers) as one op on this stream."""

    @abstractmethod
    def wait(self, other: Stream) -> None:
        """Later ops on this stream start only after everything enqueued so far on `other`."""


class Backend(ABC):
    """Executes streams on a device and records each op's interval."""

    name: str
    device: str
    row_cap: int | None = None  # ops kept as rows past which a backend may fold (None: keep all)

    @property
    @abstractmethod
    def streams(self) -> list[Stream]:
        """The N distinct streams of this run."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until every stream has finished all enqueued work (one host wait)."""

    @abstractmethod
    def start_window(self) -> None:
        """Begin recording ops (after warm-up); time zero of OpRecord times."""

    @abstractmethod
    def begin_iteration(self, iteration: int) -> None:
        """Tag ops launched from now on with `iteration`; mark its start on every stream."""

    @abstractmethod
    def end_iteration(self) -> None:
        """Mark the end of the current iteration after all streams (joins them on GPU)."""

    @abstractmethod
    def stop_window(self) -> list[OpRecord]:
        """Stop recording and return the ops of the window (call after synchronize)."""

    @abstractmethod
    def iteration_times_ms(self) -> list[float] | None:
        """Device-side per-iteration times of the window, if measured; else None."""

    def fold_pending(self) -> None:
        """Fold op records handed over so far into running figures (between iterations)."""
        return None

    def folded_ops(self) -> Any:
        """After stop_window: the window's op figures (opfold.FoldedOps) when it had more ops
        than `row_cap` and stop_window returned only the first ones; None when it returned all."""
        return None

    def handoff_totals(self) -> HandoffTotals | None:
        """Every hand-off of the window counted; None where hand-offs are not observable."""
        return None

    def submissions(self) -> list[SubmissionRecord] | None:
        """The window's hand-offs to idle queues (after stop_window); None where not observable."""
        return None

    def window_waits(self) -> list[tuple[int, int, int, int]]:
        """Cross-stream waits of the last window (DependencyLog rows); empty if not tracked."""
        log = getattr(self, "dependencies", None)
        return list(log.rows) if log is not None else []

    def window_edges(self) -> dict[tuple[int, int], int] | None:
        """Waits of the last window per (producer, consumer) stream pair; None if not tracked."""
        log = getattr(self, "dependencies", None)
        return dict(log.pairs) if log is not None else None

    def window_wait_count(self) -> int:
        """Every cross-stream wait of the last window, also those beyond the rows kept."""
        log = getattr(self, "dependencies", None)
        return log.total if log is not None else 0

    def queue_mapping(self) -> QueueMapping:
        """How streams map onto hardware queues, as far as this backend knows."""
        return {
            "pool_size": None,
            "stream_to_queue": None,
            "reason": "the runtime assigns hardware queues; see eBPF/KFD tracing",
        }

    def set_instrumentation(self, op_timing: bool, iteration_joins: bool) -> None:
        """Per-op device timing and per-iteration joins on or off (GPU); CPU: nothing to switch."""
        return None

    def workers(self) -> list[WorkerInfo]:
        """Host threads that execute queue work (empty for GPU backends)."""
        return []

    def torch_device(self) -> Any:
        """The torch.device where workloads allocate buffers."""
        import torch

        return torch.device(self.device)

    def memory_stats(self) -> Memory:
        """Peak memory during the run, with what was measured."""
        return {"kind": None, "peak_bytes": None, "reason": "not measured by this backend"}

    def reset_memory_peak(self) -> None:
        """Start a new peak-memory measurement (no-op where unsupported)."""

    def environment(self) -> JsonObject:
        """Backend facts for the result's environment block."""
        return {}

    def close(self) -> None:
        """Stop workers and release resources; idempotent."""
