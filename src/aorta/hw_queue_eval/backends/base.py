"""The one stream API every backend offers (ARCHITECTURE.md decision 1) and the op record."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One measured op. Times are ns on one clock, relative to the window start.

    Slotted: a run keeps every op of its window, so the per-op size sets the run's memory.

    ready_ns: when the op could have started (enqueued, its stream's previous op done, its waits
    satisfied); None where the backend cannot know it (GPU).
    """

    iteration: int
    stream: int
    queue: int | None
    label: str
    ready_ns: int | None
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class WorkerInfo:
    """A host thread that executes queue work (CPU backend): eBPF attributes kernel events by tid."""

    tid: int
    queue: int
    streams: tuple[int, ...]


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

    def queue_mapping(self) -> dict[str, Any]:
        """How streams map onto hardware queues, as far as this backend knows."""
        return {"pool_size": None, "stream_to_queue": None,
                "reason": "the runtime assigns hardware queues; see eBPF/KFD tracing"}

    def workers(self) -> list[WorkerInfo]:
        """Host threads that execute queue work (empty for GPU backends)."""
        return []

    def torch_device(self) -> Any:
        """The torch.device where workloads allocate buffers."""
        import torch

        return torch.device(self.device)

    def memory_stats(self) -> dict[str, Any]:
        """Peak memory during the run, with what was measured."""
        return {"kind": None, "peak_bytes": None, "reason": "not measured by this backend"}

    def reset_memory_peak(self) -> None:
        """Start a new peak-memory measurement (no-op where unsupported)."""

    def environment(self) -> dict[str, Any]:
        """Backend facts for the result's environment block."""
        return {}

    def close(self) -> None:
        """Stop workers and release resources; idempotent."""
