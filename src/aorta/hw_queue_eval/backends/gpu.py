"""GPU backend: N distinct torch.cuda streams on ONE device (ROCm HIP or CUDA).

With op timing on, every op is bracketed by timing events on its own stream. In per_iteration
mode, iteration time is measured by events on a separate timer stream that every worker stream
waits for at the start and that waits for every worker stream at the end, so the measured span
covers all streams without a host sync per stream. In end_only mode there are no per-iteration
joins, so iterations may overlap. `set_instrumentation` switches both (the harness measures what
they cost against an uninstrumented window).

Bounded memory: a window with no more ops than the row cap is read after it ends, as it always
was (no host work inside it). Once a window has launched more, its ops are read between
iterations (`fold_pending`, once a chunk is pending) as they complete: their times (relative to
the window-start event, as always) become op records for the same fold as the CPU backend's
(ops/opfold.py, device lane) and their events are released. An op counts as complete when a
`synchronize()` that began after its launch has returned (per_iteration mode: every op of the
finished iterations, no event queried) or when its end event's `query()` says so; a stream's ops
are read in order, stopping at its first incomplete op. No host wait is ever added for this.
Iteration events are read the same way every CHUNK_ITERATIONS iterations.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.ebpf.probes.base import StreamHandle
from aorta.hw_queue_eval.backends.base import Backend, DependencyLog, Stream
from aorta.hw_queue_eval.backends.priority import StreamFactory, describe, torch_priorities
from aorta.hw_queue_eval.ops.opfold import CHUNK_OPS, DEVICE, FoldedOps, LabelTable, OpFold
from aorta.hw_queue_eval.ops.records import OpRecord

if TYPE_CHECKING:
    from aorta.hw_queue_eval.results.models import Memory, QueueMapping

# PyTorch hands out streams from a pool of 32 per device and priority; asking for more aliases
# silently, so two "streams" would be one. We refuse instead of measuring the wrong thing.
MAX_DISTINCT_POOL_STREAMS = 32
CHUNK_ITERATIONS = 1024  # iteration event pairs held before they are read


class GpuStream(Stream):
    """A torch.cuda stream; `launch` runs the op asynchronously under the stream's context."""

    def __init__(self, index: int, stream: Any, backend: GpuBackend) -> None:
        self.index = index
        self.cuda_stream = stream
        self._backend = backend

    def launch(self, fn: Callable[[], Any], label: str) -> None:
        import torch

        backend = self._backend
        backend.dependencies.launched(self.index)
        with torch.cuda.stream(self.cuda_stream):
            if backend.recording and backend.op_timing:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(self.cuda_stream)
                fn()
                end.record(self.cuda_stream)
                backend.launched_op(self.index, label, start, end)
            else:
                fn()

    def wait(self, other: Stream) -> None:
        if not isinstance(other, GpuStream):
            raise TypeError("a GPU stream can only wait on another GPU stream")
        if other is not self:
            self._backend.dependencies.waited(self.index, other.index)
            self.cuda_stream.wait_stream(other.cuda_stream)  # an event recorded on `other`


def _torch_stream(device: Any, priority: int | None) -> Any:
    """A new torch stream on `device`; with a priority, hipStreamCreateWithPriority /
    cudaStreamCreateWithPriority underneath (priority 0 is the default one)."""
    import torch

    if priority is None:
        return torch.cuda.Stream(device=device)
    return torch.cuda.Stream(device=device, priority=priority)


def stream_torch_priorities(
    priorities: list[int] | None, priority_range: tuple[int, int] | None = None
) -> list[int]:
    """Per stream the torch priority to create it with ([] when no priority is asked)."""
    if priorities is None:
        return []
    if priority_range is None:
        import torch

        # a static method on torch.cuda.Stream, which torch's stubs type as an instance method
        priority_range = tuple(torch.cuda.Stream.priority_range())  # type: ignore[assignment, call-arg]
    return torch_priorities(priorities, priority_range)  # type: ignore[arg-type]


class GpuBackend(Backend):
    """torch.cuda streams on one device; per-op and per-iteration timing with events."""

    name = "gpu"

    def __init__(
        self,
        stream_count: int,
        device: str = "cuda:0",
        priorities: list[int] | None = None,
        stream_factory: StreamFactory | None = None,
    ) -> None:
        import torch

        if stream_count > MAX_DISTINCT_POOL_STREAMS:
            raise UsageError(
                f"--streams {stream_count}: PyTorch offers at most {MAX_DISTINCT_POOL_STREAMS} "
                "distinct streams per device and priority (more would alias silently); "
                f"use --streams ≤ {MAX_DISTINCT_POOL_STREAMS} on the GPU backend"
            )
        self.device = device
        self._torch_device = torch.device(device)
        torch.cuda.set_device(self._torch_device)
        self.priorities = priorities
        self.torch_priorities: list[int | None] = (
            list(stream_torch_priorities(priorities)) if priorities is not None else [None] * stream_count
        )
        factory = stream_factory or _torch_stream
        created = [factory(self._torch_device, p) for p in self.torch_priorities]
        handles = {s.cuda_stream for s in created}
        if len(handles) != stream_count:
            raise UsageError(
                f"PyTorch returned only {len(handles)} distinct streams for "
                f"--streams {stream_count}; use fewer streams"
            )
        self._streams = [GpuStream(i, s, self) for i, s in enumerate(created)]
        self._timer = factory(self._torch_device, None)
        self.recording = False
        self.op_timing = True
        self.iteration_joins = True
        self.dependencies = DependencyLog()
        self.iteration = -1
        self.stream_count = stream_count
        self._labels = LabelTable()
        self._fold = OpFold(stream_count, self._labels.names, 0, device_lane=True)
        self.fold_ns = 0
        # per stream, in launch order: (launch seq, iteration, label id, start event, end event)
        self._pending: list[deque[tuple[int, int, int, Any, Any]]] = [deque() for _ in range(stream_count)]
        self._pending_ops = 0
        self._launched = 0  # ops launched in the window; the next one's seq
        self._synced = 0  # ops launched before the last synchronize() that returned: complete
        self._iterations = self._iterations_synced = 0  # iteration event pairs recorded; complete
        self._last_end = [0] * stream_count  # per stream: end of its last op read
        self._iteration_events: deque[tuple[int, Any, Any]] = deque()  # (pair seq, start, end)
        self._iteration_ms: list[float] = []
        self._current_start: Any = None
        self._window_event: Any = None
        self._window_start_ns = 0

    @property
    def streams(self) -> list[Stream]:
        return list(self._streams)

    def torch_device(self) -> Any:
        return self._torch_device

    def synchronize(self) -> None:
        import torch

        launched, iterations = self._launched, self._iterations
        torch.cuda.synchronize(self._torch_device)  # one host wait, whatever the stream count
        self._synced, self._iterations_synced = launched, iterations

    def launched_op(self, stream: int, label: str, start: Any, end: Any) -> None:
        """Hold an op's two recorded events until they are read (GpuStream.launch)."""
        self._pending[stream].append((self._launched, self.iteration, self._labels.id(label), start, end))
        self._launched += 1
        self._pending_ops += 1

    def start_window(self) -> None:
        import torch

        self._release()
        cap = self.row_cap if self.row_cap is not None else 2**62
        self._fold = OpFold(self.stream_count, self._labels.names, cap, device_lane=True)
        self.fold_ns = 0
        self._launched = self._synced = self._iterations = self._iterations_synced = 0
        self._last_end = [0] * self.stream_count
        self._iteration_ms = []
        self._window_event = torch.cuda.Event(enable_timing=True)
        self._window_start_ns = time.monotonic_ns()
        self._window_event.record(self._timer)
        for stream in self._streams:
            stream.cuda_stream.wait_stream(self._timer)
        self.dependencies.start()
        self.recording = True

    def set_instrumentation(self, op_timing: bool, iteration_joins: bool) -> None:
        self.op_timing = op_timing
        self.iteration_joins = iteration_joins

    def begin_iteration(self, iteration: int) -> None:
        import torch

        self.iteration = iteration
        if not self.recording or not self.iteration_joins:
            return
        start = torch.cuda.Event(enable_timing=True)
        start.record(self._timer)
        for stream in self._streams:
            stream.cuda_stream.wait_stream(self._timer)
        self._current_start = start

    def end_iteration(self) -> None:
        import torch

        if not self.recording or self._current_start is None:
            return
        for stream in self._streams:
            self._timer.wait_stream(stream.cuda_stream)
        end = torch.cuda.Event(enable_timing=True)
        end.record(self._timer)
        self._iteration_events.append((self._iterations, self._current_start, end))
        self._iterations += 1
        self._current_start = None

    def fold_pending(self) -> None:
        """Read the ops that have completed into the fold once a chunk is pending, in a window
        with more ops than the row cap (a smaller one is read after it ends, as before), and the
        iteration events every CHUNK_ITERATIONS; between iterations, never waiting."""
        begin = time.perf_counter_ns()
        if self._pending_ops >= CHUNK_OPS and self._launched > self._fold.row_cap:
            self._read_ops(final=False)
        if len(self._iteration_events) >= CHUNK_ITERATIONS:
            self._read_iterations(final=False)
        self.fold_ns += time.perf_counter_ns() - begin

    def _read_ops(self, final: bool) -> None:
        """Ops whose events are complete → op records (ns from the window-start event) → the
        fold; then the lane gaps of every op no op still pending could precede (devicelane.py).

        final: after the window's last synchronize(), so every op is complete."""
        base = self._window_event
        synced = self._synced
        chunk: list[tuple[int, int, int, int, int, int]] = []
        bounds = []
        for stream, pending in enumerate(self._pending):
            while pending:
                seq, iteration, label, start, end = pending[0]
                if seq >= synced and not end.query():
                    # this op and the stream's later ones start at or after its last op read
                    bounds.append(self._last_end[stream])
                    break
                pending.popleft()  # its events are released with the tuple
                start_ns = int(base.elapsed_time(start) * 1e6)
                end_ns = int(base.elapsed_time(end) * 1e6)
                chunk.append((iteration, stream, label, 0, start_ns, end_ns))
                self._last_end[stream] = end_ns
        self._pending_ops -= len(chunk)
        self._fold.add(DEVICE, chunk)
        # ops launched from now on start after every op read so far ended
        self._fold.settle(None if final else min(bounds, default=max(self._last_end)))

    def _read_iterations(self, final: bool) -> None:
        """Iteration times of the event pairs that completed, in order (final: all)."""
        while self._iteration_events:
            seq, start, end = self._iteration_events[0]
            if not final and seq >= self._iterations_synced and not end.query():
                break
            self._iteration_events.popleft()
            self._iteration_ms.append(float(start.elapsed_time(end)))

    def stop_window(self) -> list[OpRecord]:
        self.recording = False
        self.dependencies.stop()
        self.synchronize()
        self._read_ops(final=True)
        self._read_iterations(final=True)
        return self._fold.records(0)

    def folded_ops(self) -> FoldedOps | None:
        return self._fold.statistics()

    @property
    def window_start_ns(self) -> int:
        """CLOCK_MONOTONIC ns (bpftrace's `nsecs`) right before the window-start event was
        enqueued: the host origin of the ops' times, which count from that event on the device
        (idle after warm-up's synchronize, it runs the event within its launch latency). It puts
        eBPF records (--trace-out) on the ops' clock."""
        return self._window_start_ns

    @property
    def pending_ops(self) -> int:
        """Ops whose events are held, not read yet."""
        return self._pending_ops

    def live_events(self) -> int:
        """torch.cuda.Event objects this backend holds (ops and iterations not read yet)."""
        held = 2 * self._pending_ops + 2 * len(self._iteration_events)
        return held + (self._window_event is not None) + (self._current_start is not None)

    def held_op_records(self) -> int:
        """Op records held in host memory: pending events plus what the fold holds."""
        return self._pending_ops + self._fold.held()

    def iteration_times_ms(self) -> list[float] | None:
        times = self._iteration_ms + [
            float(start.elapsed_time(end)) for _, start, end in self._iteration_events
        ]
        return times or None

    def _release(self) -> None:
        """Drop every event held (a new window, or close)."""
        for pending in self._pending:
            pending.clear()
        self._pending_ops = 0
        self._iteration_events.clear()

    def queue_mapping(self) -> QueueMapping:
        return {
            "pool_size": None,
            "stream_to_queue": None,
            "reason": "the GPU runtime assigns hardware queues (HIP: GPU_MAX_HW_QUEUES; "
            "CUDA: CUDA_DEVICE_MAX_CONNECTIONS); trace KFD queue creation to see it",
            "stream_priority": describe(self.priorities),
            "torch_stream_priority": (
                None if self.priorities is None else [p for p in self.torch_priorities if p is not None]
            ),
        }

    def stream_handles(self) -> list[StreamHandle]:
        """Stream index → the runtime's stream handle (torch `Stream.cuda_stream`, a cudaStream_t /
        hipStream_t as an int): eBPF uprobe counts per stream handle join the harness's streams."""
        return [StreamHandle(s.index, int(s.cuda_stream.cuda_stream)) for s in self._streams]

    def reset_memory_peak(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(self._torch_device)

    def memory_stats(self) -> Memory:
        import torch

        return {
            "kind": "gpu_allocator_peak",
            "peak_bytes": int(torch.cuda.max_memory_allocated(self._torch_device)),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(self._torch_device)),
            "source": "torch.cuda caching allocator peaks on the target device",
        }

    def environment(self) -> JsonObject:
        import torch

        props = torch.cuda.get_device_properties(self._torch_device)
        return {
            "device_name": props.name,
            "gpu_memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "gcn_arch": getattr(props, "gcnArchName", None),
            "visible_gpus": torch.cuda.device_count(),
            # where this GPU sits on the PCI bus: provenance reads its driver and clocks there
            **{key: getattr(props, key, None) for key in ("pci_bus_id", "pci_device_id", "pci_domain_id")},
        }

    def close(self) -> None:
        self._release()
