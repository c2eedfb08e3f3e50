"""GPU backend: N distinct torch.cuda streams on ONE device (ROCm HIP or CUDA).

With op timing on, every op is bracketed by timing events on its own stream. In per_iteration
mode, iteration time is measured by events on a separate timer stream that every worker stream
waits for at the start and that waits for every worker stream at the end, so the measured span
covers all streams without a host sync per stream. In end_only mode there are no per-iteration
joins, so iterations may overlap. `set_instrumentation` switches both (the harness measures what
they cost against an uninstrumented window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.backends.base import Backend, DependencyLog, OpRecord, Stream

# PyTorch hands out streams from a pool of 32 per device and priority; asking for more aliases
# silently, so two "streams" would be one. We refuse instead of measuring the wrong thing.
MAX_DISTINCT_POOL_STREAMS = 32


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
                backend.pending.append((backend.iteration, self.index, label, start, end))
            else:
                fn()

    def wait(self, other: Stream) -> None:
        if not isinstance(other, GpuStream):
            raise TypeError("a GPU stream can only wait on another GPU stream")
        if other is not self:
            self._backend.dependencies.waited(self.index, other.index)
            self.cuda_stream.wait_stream(other.cuda_stream)  # an event recorded on `other`


class GpuBackend(Backend):
    """torch.cuda streams on one device; per-op and per-iteration timing with events."""

    name = "gpu"

    def __init__(self, stream_count: int, device: str = "cuda:0") -> None:
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
        created = [torch.cuda.Stream(device=self._torch_device) for _ in range(stream_count)]
        handles = {s.cuda_stream for s in created}
        if len(handles) != stream_count:
            raise UsageError(
                f"PyTorch returned only {len(handles)} distinct streams for "
                f"--streams {stream_count}; use fewer streams"
            )
        self._streams = [GpuStream(i, s, self) for i, s in enumerate(created)]
        self._timer = torch.cuda.Stream(device=self._torch_device)
        self.recording = False
        self.op_timing = True
        self.iteration_joins = True
        self.dependencies = DependencyLog()
        self.iteration = -1
        self.pending: list[tuple[int, int, str, Any, Any]] = []
        self._iteration_events: list[tuple[Any, Any]] = []
        self._current_start: Any = None
        self._window_event: Any = None

    @property
    def streams(self) -> list[Stream]:
        return list(self._streams)

    def torch_device(self) -> Any:
        return self._torch_device

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self._torch_device)  # one host wait, whatever the stream count

    def start_window(self) -> None:
        import torch

        self.pending.clear()
        self._iteration_events.clear()
        self._window_event = torch.cuda.Event(enable_timing=True)
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
        self._iteration_events.append((self._current_start, end))
        self._current_start = None

    def stop_window(self) -> list[OpRecord]:
        self.recording = False
        self.dependencies.stop()
        self.synchronize()
        base = self._window_event
        ops = []
        for iteration, stream, label, start, end in self.pending:
            start_ns = int(base.elapsed_time(start) * 1e6)
            end_ns = int(base.elapsed_time(end) * 1e6)
            ops.append(OpRecord(iteration, stream, None, label, None, start_ns, end_ns))
        self.pending.clear()
        ops.sort(key=lambda op: (op.start_ns, op.stream))
        return ops

    def iteration_times_ms(self) -> list[float] | None:
        if not self._iteration_events:
            return None
        return [float(start.elapsed_time(end)) for start, end in self._iteration_events]

    def queue_mapping(self) -> dict[str, Any]:
        return {
            "pool_size": None,
            "stream_to_queue": None,
            "reason": "the GPU runtime assigns hardware queues (HIP: GPU_MAX_HW_QUEUES; "
            "CUDA: CUDA_DEVICE_MAX_CONNECTIONS); trace KFD queue creation to see it",
        }

    def stream_handles(self) -> list[dict[str, Any]]:
        """Stream index → the runtime's stream handle (torch `Stream.cuda_stream`, a cudaStream_t /
        hipStream_t as an int): eBPF uprobe counts per stream handle join the harness's streams."""
        return [{"stream": s.index, "handle": int(s.cuda_stream.cuda_stream)} for s in self._streams]

    def reset_memory_peak(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(self._torch_device)

    def memory_stats(self) -> dict[str, Any]:
        import torch

        return {
            "kind": "gpu_allocator_peak",
            "peak_bytes": int(torch.cuda.max_memory_allocated(self._torch_device)),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(self._torch_device)),
            "source": "torch.cuda caching allocator peaks on the target device",
        }

    def environment(self) -> dict[str, Any]:
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
        self.pending.clear()
