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
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

GRID_MS = 1 / 64


class FakeStream:
    """torch.cuda.Stream: a clock; counts wait_stream joins."""

    waits = 0
    serial = 0

    def __init__(self, device: Any = None) -> None:
        FakeStream.serial += 1
        self.cuda_stream = FakeStream.serial
        self.t = 0.0
        DEVICE.streams.append(self)

    def wait_stream(self, other: FakeStream) -> None:
        FakeStream.waits += 1
        self.t = max(self.t, other.t)


class FakeEvent:
    """torch.cuda.Event: stamped with its stream's clock when recorded."""

    created = 0
    alive = 0

    def __init__(self, enable_timing: bool = False) -> None:
        FakeEvent.created += 1
        FakeEvent.alive += 1
        self.t: float | None = None

    def __del__(self) -> None:
        FakeEvent.alive -= 1

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream if stream is not None else DEVICE.current
        assert stream is not None, "record needs a stream"
        stream.t = max(stream.t, DEVICE.now)  # enqueued now: cannot run in the past
        self.t = DEVICE.last_recorded = stream.t

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

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Any:
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous


DEVICE = Device()


def install(monkeypatch: Any) -> Device:
    """Replace torch.cuda's stream/event API (and what the GPU backend reads) with the fake."""
    import torch

    DEVICE.reset()
    FakeEvent.created = FakeStream.waits = 0
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", DEVICE.stream)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(torch.cuda, "synchronize", DEVICE.synchronize)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = SimpleNamespace(name="fake device", total_memory=1 << 30, multi_processor_count=1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: props)
    return DEVICE
