"""A fake of the torch.cuda stream/event API with a small device model (tests only, no GPU).

Each stream has a clock (ms). An event recorded on a stream is stamped with the stream's clock;
an op run inside `torch.cuda.stream(s)` (`Device.run`) advances that stream's clock by its
duration, so a stream runs its ops in order while streams overlap. `wait_stream` joins clocks.
The device has a `now`: an event is complete (`query()`) once its time is ≤ now, and work
enqueued later cannot start before now (the device does not run work before it is launched).
`torch.cuda.synchronize` moves now past everything enqueued. `elapsed_time` on an event that is
not complete raises, as CUDA's does (cudaErrorNotReady).

Times on a grid of 1/64 ms (15,625 ns) are exact in binary floats, so the ns the backend computes
from them can be recomputed by hand.

Opt-in (`install(monkeypatch, RealCudart(path))`): the stream operations also call the real
libcudart.so.12 with the fake handles, as torch would (RealCudart), so a uprobe on it sees a run.
With `install_distributed(monkeypatch, runtime, nccl_path)` torch.distributed is a world of one
NCCL rank whose collectives call the real libnccl on the current stream (FakeDistributed).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

GRID_MS = 1 / 64


class FakeStream:
    """torch.cuda.Stream: a clock; counts wait_stream joins."""

    waits = 0
    serial = 0

    def __init__(self, device: Any = None) -> None:
        FakeStream.serial += 1
        runtime = DEVICE.runtime
        self.cuda_stream = FakeStream.serial if runtime is None else runtime.new_stream(FakeStream.serial)
        self.t = 0.0
        DEVICE.streams.append(self)

    def wait_stream(self, other: FakeStream) -> None:
        FakeStream.waits += 1
        if DEVICE.runtime is None:
            self.t = max(self.t, other.t)
            return
        event = FakeEvent()  # torch: self.wait_event(other.record_event())
        event.record(other)
        self.wait_event(event)

    def wait_event(self, event: FakeEvent) -> None:
        self.t = max(self.t, event.t or 0.0)
        if DEVICE.runtime is not None:
            DEVICE.runtime.call("cudaStreamWaitEvent", self.cuda_stream, event.handle)


class FakeEvent:
    """torch.cuda.Event: stamped with its stream's clock when recorded."""

    created = 0
    alive = 0

    def __init__(self, enable_timing: bool = False) -> None:
        FakeEvent.created += 1
        FakeEvent.alive += 1
        runtime = DEVICE.runtime
        self.handle = FakeEvent.created if runtime is None else runtime.event_handle(FakeEvent.created)
        self.t: float | None = None

    def __del__(self) -> None:
        FakeEvent.alive -= 1

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream if stream is not None else DEVICE.current
        assert stream is not None, "record needs a stream"
        stream.t = max(stream.t, DEVICE.now)  # enqueued now: cannot run in the past
        self.t = DEVICE.last_recorded = stream.t
        if DEVICE.runtime is not None:
            DEVICE.runtime.call("cudaEventRecord", stream.cuda_stream, self.handle)

    def query(self) -> bool:
        DEVICE.queries += 1
        return self.done()

    def done(self) -> bool:
        """Complete (what query() says, without counting a query)."""
        return self.t is not None and self.t <= DEVICE.now

    def elapsed_time(self, other: FakeEvent) -> float:
        if not (self.done() and other.done()):
            raise RuntimeError("CUDA error: device not ready")
        DEVICE.elapsed_calls += 1
        return other.t - self.t  # type: ignore[operator]


class Device:
    """The fake device: stream clocks, now, and a log of every op run (the ground truth)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.now = 0.0
        self.streams: list[FakeStream] = []
        self.current: FakeStream | None = None
        self.log: list[tuple[int, float, float]] = []  # (stream handle, start ms, end ms)
        self.last_recorded = 0.0  # time of the last event recorded
        self.syncs = 0
        self.queries = 0
        self.elapsed_calls = 0
        self.runtime: RealCudart | None = None

    def run(self, duration_ms: float) -> None:
        """An op's kernel on the current stream: busy for `duration_ms` from the stream's clock."""
        stream = self.current
        assert stream is not None, "an op must run inside torch.cuda.stream(...)"
        start = max(stream.t, self.now)
        stream.t = start + duration_ms
        self.log.append((stream.cuda_stream, start, stream.t))

    def idle(self, stream: FakeStream, gap_ms: float) -> None:
        """Leave a gap on `stream` before its next op."""
        stream.t = max(stream.t, self.now) + gap_ms

    def in_flight(self, since: int = 0) -> int:
        """Ops of the log from index `since` on that have not ended by now."""
        return sum(1 for _, _, end in self.log[since:] if end > self.now)

    def latest(self) -> float:
        """The time everything enqueued so far is done."""
        return max((s.t for s in self.streams), default=0.0)

    def advance(self, now: float) -> None:
        """Let the device progress to `now` (never backwards)."""
        self.now = max(self.now, now)

    def synchronize(self, device: Any = None) -> None:
        self.syncs += 1
        self.advance(self.latest())
        if self.runtime is not None:
            self.runtime.call("cudaDeviceSynchronize")
            time.sleep(self.runtime.sync_block_s)  # the host blocks until the device is done

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Any:
        previous, self.current = self.current, stream
        try:
            if self.runtime is None:
                yield
            else:
                with self.runtime.kernel_of_op(stream.cuda_stream):
                    yield
        finally:
            self.current = previous


class RealCudart:
    """The real libcudart.so.12 called the way torch calls it for the fake's stream operations:
    an op run in `torch.cuda.stream(s)` launches one kernel on s (cudaLaunchKernel at the op's
    first torch call, between its timing events), `Event.record(s)` is cudaEventRecord,
    `wait_stream` a record on the other stream and cudaStreamWaitEvent, `synchronize`
    cudaDeviceSynchronize. Without a GPU every call fails early, after its entry uprobe fired.

    `window` holds the calls made while `recording` is on (the ground truth of a traced window),
    `streams` every stream handle in creation order; handles fall as streams are created, so
    handle order is not creation order. A device sync also blocks the calling thread for
    `sync_block_s`, as a real one does while the GPU finishes: one voluntary context switch of
    the harness thread per sync, which its eBPF thread track must show."""

    sync_block_s = 0.0005

    def __init__(self, path: Path) -> None:
        import vendor_driver  # the calls with the library's own signatures

        self.driver = vendor_driver
        self.lib = ctypes.CDLL(str(path))
        self.recording = False
        self.window: list[Any] = []  # vendor_driver.Call, one per call (n = 1)
        self.streams: list[int] = []

    def new_stream(self, serial: int) -> int:
        """The handle of the `serial`-th stream created (vendor_driver.s: distinct, nonzero,
        page-aligned like real ones)."""
        self.streams.append(self.driver.s(64 - serial))
        return self.streams[-1]

    def event_handle(self, serial: int) -> int:
        """The `serial`-th event's handle (vendor_driver.e)."""
        return int(self.driver.e(serial))

    def call(
        self, api: str, stream: int = 0, event: int = 0, size: int = 0, kind: int = 0, lib: Any = None
    ) -> None:
        """One call of `api` into the real library (`lib`: another one, e.g. libnccl), logged
        while recording; size, kind: a collective's element count and ncclDataType_t."""
        made = self.driver.Call(api, 1, stream, size=size, kind=kind, event=event)
        self.driver.call(self.lib if lib is None else lib, made)
        if self.recording:
            self.window.append(made)

    def kernel_of_op(self, stream: int) -> Any:
        """A torch function mode for one op's body: its first torch call launches its kernel."""
        return _one_kernel_mode()(self, stream)


@functools.cache
def _one_kernel_mode() -> type:
    """The TorchFunctionMode class of RealCudart.kernel_of_op (torch imported on first use)."""
    from torch.overrides import TorchFunctionMode

    class OneKernel(TorchFunctionMode):
        """One op's body: its first torch call launches the op's kernel on `stream`."""

        def __init__(self, runtime: RealCudart, stream: int) -> None:
            super().__init__()
            self.runtime, self.stream, self.launched = runtime, stream, False

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not self.launched:
                self.launched = True
                self.runtime.call("cudaLaunchKernel", self.stream)
            return func(*args, **(kwargs or {}))

    return OneKernel


# torch dtype name → ncclDataType_t (nccl.h)
NCCL_DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "int64": 4,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}


class FakeDistributed:
    """torch.distributed as one NCCL rank (world size 1): each collective does what it computes
    over one rank (a copy) and calls the real libnccl once on the current fake stream, with the
    count and datatype c10d passes (NCCL's count semantics: the tensor for all-reduce, the send
    buffer for all-gather, the receive buffer for reduce-scatter), as torch 2.x does for a
    collective with async_op=False (it runs on the current stream). Without a GPU the call fails
    early (NULL communicator), after its entry uprobe fired; the runtime logs it."""

    def __init__(self, runtime: RealCudart, path: Path) -> None:
        self.runtime = runtime
        self.lib = ctypes.CDLL(str(path))

    def _nccl(self, api: str, tensor: Any) -> None:
        stream = DEVICE.current
        assert stream is not None, "a collective must run inside torch.cuda.stream(...)"
        dtype = NCCL_DTYPES[str(tensor.dtype).removeprefix("torch.")]
        self.runtime.call(api, stream.cuda_stream, size=tensor.numel(), kind=dtype, lib=self.lib)

    def all_reduce(self, tensor: Any, group: Any = None, async_op: bool = False) -> None:
        self._nccl("ncclAllReduce", tensor)

    def all_gather_into_tensor(self, out: Any, shard: Any, group: Any = None, async_op: bool = False) -> None:
        out.copy_(shard.view_as(out))
        self._nccl("ncclAllGather", shard)

    def reduce_scatter_tensor(self, out: Any, inp: Any, group: Any = None, async_op: bool = False) -> None:
        out.copy_(inp.view_as(out))
        self._nccl("ncclReduceScatter", out)


DEVICE = Device()


def install(monkeypatch: Any, runtime: RealCudart | None = None) -> Device:
    """Replace torch.cuda's stream/event API (and what the GPU backend reads) with the fake;
    `runtime`: its stream operations also call the real libcudart (RealCudart)."""
    import torch

    DEVICE.reset()
    DEVICE.runtime = runtime
    FakeEvent.created = FakeStream.waits = FakeStream.serial = 0
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", DEVICE.stream)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(torch.cuda, "synchronize", DEVICE.synchronize)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    props = SimpleNamespace(name="fake device", total_memory=1 << 30, multi_processor_count=1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: props)
    return DEVICE


def patch_process_group(monkeypatch: Any, world_size: int, ops: dict[str, Any]) -> None:
    """torch.distributed as an initialised NCCL group of `world_size` ranks seen from rank 0, its
    collectives (name → callable) replaced by `ops`."""
    import torch.distributed as dist

    for name, value in (
        ("is_available", lambda: True),
        ("is_initialized", lambda: True),
        ("get_rank", lambda group=None: 0),
        ("get_world_size", lambda group=None: world_size),
        ("get_backend", lambda group=None: "nccl"),
        *ops.items(),
    ):
        monkeypatch.setattr(dist, name, value)


def install_distributed(monkeypatch: Any, runtime: RealCudart, nccl_path: Path) -> FakeDistributed:
    """torch.distributed initialised as one NCCL rank whose collectives call the real libnccl
    (FakeDistributed); after `install(monkeypatch, runtime)`."""
    fake = FakeDistributed(runtime, nccl_path)
    patch_process_group(
        monkeypatch,
        1,
        {
            "all_reduce": fake.all_reduce,
            "all_gather_into_tensor": fake.all_gather_into_tensor,
            "reduce_scatter_tensor": fake.reduce_scatter_tensor,
        },
    )
    return fake
