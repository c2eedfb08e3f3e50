"""CPU backend: streams served by a pool of worker threads that model hardware queues.

Streams map onto queues the way HIP maps streams onto HSA queues: a new queue per stream until
the pool (GPU_MAX_HW_QUEUES, default 4) is full, then the least-used queue is shared. A queue runs
its ops strictly in enqueue order, so streams sharing a queue serialise (head-of-line blocking), as
on the hardware, and holds at most MAX_QUEUED_TASKS (a launch onto a full one waits for room).
Each worker records every op's ready/start/end on CLOCK_MONOTONIC (the clock bpftrace's `nsecs`
uses) and registers its thread id so kernel events can be attributed.

Submissions are a kernel-visible event (docs/ebpf.md): each queue has a doorbell, an eventfd that
only the host writes, exactly once each time it hands work to an idle queue; an idle worker blocks
reading it. The harness records every ring (before/after the write) and when the worker began the
work it was handed, so the kernel's count of doorbell writes and the harness's count of hand-offs
are the same set, one submission each.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.backends.base import (
    Backend,
    DependencyLog,
    HandoffTotals,
    Stream,
    SubmissionRecord,
    WorkerInfo,
)
from aorta.hw_queue_eval.backends.priority import describe
from aorta.hw_queue_eval.config.run_config import hw_queue_pool_size
from aorta.hw_queue_eval.ops.opfold import CHUNK_OPS, FoldedOps, LabelTable, OpFold
from aorta.hw_queue_eval.ops.records import OpRecord

if TYPE_CHECKING:
    from aorta.hw_queue_eval.results.models import Memory, QueueMapping

_OP, _WAIT, _MARK, _STOP = 0, 1, 2, 3
_KIND_NAMES = ("op", "wait", "marker", "stop")
_PR_SET_NAME = 15
# Rings kept per queue with their times: at least the eBPF per-queue record cap
# (aorta.ebpf.probes.cpu_sched.per_queue_cap, ≤ PER_SUBMISSION_CAP), beyond it only counted.
MAX_KEPT_RINGS = 16384
# Tasks a queue holds before a launch waits for room, like a hardware queue's ring of packets:
# without it `--sync-mode end_only` (no host wait until the end) queued every op of the window
# with its closure, and memory grew with the op count (1.7 GB at 4 M ops, docs/metrics.md).
MAX_QUEUED_TASKS = 4096


class _Task:
    """One entry in a hardware queue: an op, a wait on another stream's task, or a marker."""

    __slots__ = ("done_ns", "enqueue_ns", "fn", "iteration", "kind", "label", "stream", "target", "waiter")

    def __init__(
        self,
        kind: int,
        stream: int,
        fn: Callable[[], Any] | None = None,
        label: int = -1,
        iteration: int = -1,
        target: _Task | None = None,
    ) -> None:
        self.kind = kind
        self.stream = stream
        self.fn = fn
        self.label = label
        self.iteration = iteration
        self.target = target
        self.enqueue_ns = time.monotonic_ns()
        self.done_ns: int | None = None
        self.waiter: threading.Event | None = None

    def finish(self, now_ns: int) -> None:
        """Mark done, then wake a waiter. Order matters: see `_wait_for`."""
        self.done_ns = now_ns
        waiter = self.waiter
        if waiter is not None:
            waiter.set()


_WAITER_LOCK = threading.Lock()


def _wait_for(task: _Task) -> int:
    """Block until `task` is done; return its completion time.

    The waiter publishes `waiter` before re-reading `done_ns`, the worker publishes `done_ns`
    before reading `waiter`; under the GIL one of the two sides always sees the other, so no lost
    wake-up. Several threads may wait for one task (every expert waits for the gate): the lock
    makes them share one Event, else a second Event could replace the first and the first
    waiter would never be woken.
    """
    if task.done_ns is None:
        with _WAITER_LOCK:
            if task.waiter is None:
                task.waiter = threading.Event()
            waiter = task.waiter
        if task.done_ns is None:
            waiter.wait()
    assert task.done_ns is not None
    return task.done_ns


def _set_thread_name(name: str) -> None:
    """Name the OS thread (visible as `comm` to the kernel and to eBPF); best effort."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _sleeping(tid: int) -> bool:
    """Whether thread `tid` of this process is asleep (state S in /proc/self/task/TID/stat)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] == "S"
    except (OSError, IndexError):
        return True  # gone: nothing of it can run in the window


def _waits_on(tid: int, fd: int) -> bool:
    """Whether thread `tid` of this process is blocked in a syscall on `fd` (its doorbell read):
    /proc/self/task/TID/syscall names the syscall and its first argument. State S alone is not
    enough: a worker that has set its idle flag also sleeps while it waits for the GIL, and then
    runs the tail of its loop (tens to hundreds of us under load) after a window edge."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as fh:
            fields = fh.read().split()
    except OSError:
        return _sleeping(tid)  # gone, or a kernel without the file: the thread state decides
    if len(fields) < 2 or fields[0] in ("running", "-1"):
        return False
    return int(fields[1], 16) == fd and _sleeping(tid)


class _HardwareQueue:
    """One worker thread draining a FIFO of tasks; woken only through its doorbell."""

    def __init__(self, index: int, backend: CpuBackend, rank: int = 0) -> None:
        self.index = index
        self.backend = backend
        self.rank = rank  # stream priority of its streams (backends/priority.py LEVELS)
        self.pending_ops = 0  # ops put and not finished (counted only with priorities, under gate)
        self.blocked = False  # in a wait on another stream (its ops cannot run; under gate)
        self.streams: list[int] = []
        self.tid: int | None = None
        self.torch_threads: int | None = None  # intra-op threads torch reports inside the worker
        self.doorbell = os.eventfd(0, os.EFD_CLOEXEC)
        self._tasks: deque[_Task] = deque()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when the worker empties a full FIFO
        self._idle = False  # set by the worker (under the lock) right before it waits on the doorbell
        self._ready = threading.Event()
        # per op a tuple of WORDS ints (opfold); full chunks wait in `full` for the host's fold
        self.records: list[tuple[int, ...]] = []
        self.full: deque[list[tuple[int, ...]]] = deque()
        # per ring in the window (the first MAX_KEPT_RINGS): (ring_ns, rung_ns) by the host;
        # (start_ns, kind) by the worker; every ring and wake is counted
        self.rings: list[tuple[int, int]] = []
        self.wakes: list[tuple[int, int]] = []
        self.ring_count = 0
        self.wake_count = 0
        self.wake_kinds = [0] * len(_KIND_NAMES)
        self._stream_ready_ns: dict[int, int] = {}
        self._thread = threading.Thread(target=self._run, name=f"aorta-hwq{index}", daemon=True)
        self._thread.start()
        self._ready.wait()

    def put(self, task: _Task) -> None:
        """Append a task, first waiting for room if MAX_QUEUED_TASKS are queued; ring the doorbell
        when the queue was idle (that is one submission).

        A full FIFO has a busy worker (it went idle only on an empty one, and the first task after
        that rang it), and every task in it can finish without the host: waits name earlier work."""
        gate = self.backend.gate
        if gate is not None and task.kind == _OP:
            # counted (and stamped) under the gate before the worker can see it: a lower-priority
            # worker that starts after this stamp has seen the count (docs/policies.md)
            with gate:
                self.pending_ops += 1
                task.enqueue_ns = time.monotonic_ns()
        with self._lock:
            while len(self._tasks) >= MAX_QUEUED_TASKS:
                self._room.wait()
            self._tasks.append(task)
            ring, self._idle = self._idle, False
        if ring:
            recording = self.backend.recording
            before = time.monotonic_ns()
            os.eventfd_write(self.doorbell, 1)
            if recording:
                rung = time.monotonic_ns()
                self.ring_count += 1
                if self.ring_count <= MAX_KEPT_RINGS:
                    self.rings.append((before, rung))

    def stop(self) -> None:
        """End the worker: STOP goes last in its FIFO and the doorbell rings whatever `_idle`
        says. A Ctrl+C landing between a put's `_idle = False` and its ring leaves the worker
        asleep on a doorbell nobody rang; a put here would then not ring either."""
        with self._lock:
            self._tasks.append(_Task(_STOP, -1))
            self._idle = False
        os.eventfd_write(self.doorbell, 1)  # an extra ring to a busy worker is never read: it stops
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            os.close(self.doorbell)

    def _run(self) -> None:
        import torch

        self.tid = threading.get_native_id()
        _set_thread_name(f"aorta-hwq{self.index}")
        # OpenMP's thread count is a per-thread setting: without this each worker would start
        # its own team of intra-op threads and concurrency would no longer be the queue count.
        torch.set_num_threads(self.backend.threads_per_queue)
        self.torch_threads = torch.get_num_threads()
        self._ready.set()
        self._drain()

    def _drain(self) -> None:
        """The worker loop. An op runs inline here (no call per op beyond the op itself): the
        Python steps per op are GIL time every other thread waits for (docs/metrics.md)."""
        backend = self.backend
        stream_ready = self._stream_ready_ns
        now = time.monotonic_ns
        woken = False
        gate = backend.gate
        # queues served before this one (higher stream priority); empty without priorities
        above = [q for q in backend.queues_by_rank if q.rank > self.rank] if gate is not None else []
        while True:
            with self._lock:
                batch = list(self._tasks)
                self._tasks.clear()
                self._idle = not batch
                if len(batch) >= MAX_QUEUED_TASKS:  # the host may be waiting for room
                    self._room.notify()
            if not batch:
                # exactly one ring per idle period: the read consumes it (counter is 1)
                os.eventfd_read(self.doorbell)
                woken = True
                continue
            for task in batch:
                kind = task.kind
                if kind == _OP:
                    stream = task.stream
                    ready = stream_ready.get(stream, 0)
                    if task.enqueue_ns > ready:
                        ready = task.enqueue_ns
                    if above:  # served after every higher-priority queue that has an op it can run
                        with gate:  # type: ignore[union-attr]
                            while any(q.pending_ops and not q.blocked for q in above):
                                gate.wait()  # type: ignore[union-attr]
                            start = now()  # under the gate: ordered against `put`'s stamp
                    else:
                        start = now()
                    if backend.error is None and not backend.closing:
                        try:
                            task.fn()  # type: ignore[misc]
                        except BaseException as exc:  # reported by synchronize() on the host
                            backend.error = exc
                    end = now()
                    stream_ready[stream] = end
                    if gate is not None:
                        with gate:
                            self.pending_ops -= 1
                            gate.notify_all()
                    if backend.recording:
                        records = self.records
                        records.append((task.iteration, stream, task.label, ready, start, end))
                        if len(records) >= CHUNK_OPS:  # a full chunk goes to the host's fold
                            self.full.append(records)
                            self.records = []
                    task.done_ns = end  # _Task.finish inline (one call less per op): done first,
                    waiter = task.waiter  # then the waiter, the order `_wait_for` relies on
                    if waiter is not None:
                        waiter.set()
                elif kind == _STOP:
                    return
                else:
                    start = self._execute_sync(task)
                if woken:  # the first task of a hand-off: when the worker began it
                    woken = False
                    if backend.recording:
                        self.wake_count += 1
                        self.wake_kinds[kind] += 1
                        if self.wake_count <= MAX_KEPT_RINGS:
                            self.wakes.append((start, kind))

    def _execute_sync(self, task: _Task) -> int:
        """Run a wait or a marker; return when it began (CLOCK_MONOTONIC ns)."""
        start = time.monotonic_ns()
        if task.kind == _WAIT:
            gate = self.backend.gate
            if gate is not None:  # while it waits, lower-priority queues are not held back by it
                with gate:
                    self.blocked = True
                    gate.notify_all()
            satisfied = _wait_for(task.target)  # type: ignore[arg-type]
            if gate is not None:
                with gate:
                    self.blocked = False
            previous = self._stream_ready_ns.get(task.stream, 0)
            self._stream_ready_ns[task.stream] = max(previous, satisfied, task.enqueue_ns)
        task.finish(time.monotonic_ns())  # a wait (once satisfied) or a marker
        return start

    def take_chunks(self) -> list[list[tuple[int, ...]]]:
        """The full chunks of op records waiting for the fold, oldest first."""
        chunks = []
        while self.full:
            chunks.append(self.full.popleft())
        return chunks

    def submissions(self) -> list[SubmissionRecord]:
        """The window's kept rings paired with the worker's wake-ups (one read per ring, in order)."""
        return [
            SubmissionRecord(self.index, seq, ring, rung, start, _KIND_NAMES[kind])
            for seq, ((ring, rung), (start, kind)) in enumerate(zip(self.rings, self.wakes, strict=False))
        ]


class CpuStream(Stream):
    """A stream on the CPU backend: ops go to its hardware queue in order."""

    def __init__(self, index: int, queue: _HardwareQueue, backend: CpuBackend) -> None:
        self.index = index
        self.queue = queue
        self._backend = backend
        self._last: _Task | None = None

    def launch(self, fn: Callable[[], Any], label: str) -> None:
        # the host's steps per op hold the GIL every queue thread waits for: a known label costs
        # no method call (docs/sweep-compare-report.md, "Python steps per op")
        backend = self._backend
        label_id = backend.known_labels.get(label)
        if label_id is None:
            label_id = backend.label_id(label)
        task = _Task(_OP, self.index, fn, label_id, backend.iteration)
        backend.dependencies.launched(self.index)
        self._last = task
        self.queue.put(task)

    def wait(self, other: Stream) -> None:
        if not isinstance(other, CpuStream):
            raise TypeError("a CPU stream can only wait on another CPU stream")
        target = other._last
        if target is None or other is self:
            return
        task = _Task(_WAIT, self.index, target=target)
        self._backend.dependencies.waited(self.index, other.index)
        self._last = task
        self.queue.put(task)


def assign_queues(stream_count: int, pool_size: int) -> list[int]:
    """HIP-like mapping: new queue per stream until the pool is full, then the least-used one.

    Ties go to the lowest queue index, so the mapping is deterministic.
    """
    loads = [0] * min(stream_count, pool_size)
    mapping: list[int] = []
    for stream in range(stream_count):
        if stream < pool_size:
            queue = stream
        else:
            queue = min(range(len(loads)), key=lambda q: (loads[q], q))
        loads[queue] += 1
        mapping.append(queue)
    return mapping


class CpuBackend(Backend):
    """Threaded streams over a pool of worker 'hardware queues'."""

    name = "cpu"

    def __init__(
        self,
        stream_count: int,
        pool_size: int | None = None,
        threads_per_queue: int = 1,
        priorities: list[int] | None = None,
    ) -> None:
        import torch

        self.device = "cpu"
        self.pool_size = pool_size if pool_size is not None else hw_queue_pool_size()
        self.threads_per_queue = threads_per_queue
        torch.set_num_threads(threads_per_queue)
        self.error: BaseException | None = None
        self.closing = False  # set by close(): queued ops are skipped so workers stop quickly
        self.recording = False
        self.iteration = -1
        self._window_start_ns = 0
        self.dependencies = DependencyLog()
        self.stream_count = stream_count
        self._label_table = LabelTable()  # workers record a label's id, not the string
        self.labels = self._label_table.names
        self.known_labels = self._label_table.known  # label -> id (host thread only)
        self._fold = OpFold(stream_count, self.labels, 0)
        self.fold_ns = 0
        if priorities is not None and len(priorities) != stream_count:
            raise ValueError("one priority per stream")
        self.priorities = priorities
        # with several levels: one pool per level (HIP/ROCclr keep a queue pool per priority) and
        # the gate through which lower-priority workers let higher-priority queues go first
        ranks = priorities if priorities is not None else [0] * stream_count
        levels = sorted(set(ranks), reverse=True)
        self.gate: threading.Condition | None = threading.Condition() if len(levels) > 1 else None
        self._mapping = [0] * stream_count
        queue_ranks: list[int] = []
        for level in levels:
            members = [s for s in range(stream_count) if ranks[s] == level]
            offset = len(queue_ranks)
            local = assign_queues(len(members), self.pool_size)
            for stream, slot in zip(members, local, strict=True):
                self._mapping[stream] = offset + slot
            queue_ranks += [level] * (max(local) + 1)
        self.queues_by_rank: list[_HardwareQueue] = []
        self._queues = []
        for i, rank in enumerate(queue_ranks):
            self._queues.append(_HardwareQueue(i, self, rank))
            self.queues_by_rank.append(self._queues[-1])
        self._streams = []
        for index, queue_index in enumerate(self._mapping):
            queue = self._queues[queue_index]
            queue.streams.append(index)
            self._streams.append(CpuStream(index, queue, self))
        self._closed = False

    @property
    def streams(self) -> list[Stream]:
        return list(self._streams)

    def synchronize(self) -> None:
        markers = []
        for queue in self._queues:
            marker = _Task(_MARK, -1)
            queue.put(marker)
            markers.append(marker)
        for marker in markers:
            _wait_for(marker)
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def label_id(self, label: str) -> int:
        """The id workers record for `label` (host thread only)."""
        return self._label_table.id(label)

    def start_window(self) -> None:
        for queue in self._queues:
            queue.records = []
            queue.full.clear()
            queue.rings.clear()
            queue.wakes.clear()
            queue.ring_count = queue.wake_count = 0
            queue.wake_kinds = [0] * len(_KIND_NAMES)
        cap = self.row_cap if self.row_cap is not None else 2**62
        self._fold = OpFold(self.stream_count, self.labels, cap)
        self.fold_ns = 0
        self._window_start_ns = time.monotonic_ns()
        self.dependencies.start()
        self.recording = True

    def begin_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    def end_iteration(self) -> None:
        """Nothing to join: the host measures iteration time around synchronize()."""

    def fold_pending(self) -> None:
        """Fold the op chunks the workers handed over (host thread, between iterations).

        Under the row cap this only stores them; past it, each is converted and folded."""
        begin = time.perf_counter_ns()
        for queue in self._queues:
            for chunk in queue.take_chunks():
                self._fold.add(queue.index, chunk)
        self.fold_ns += time.perf_counter_ns() - begin

    def stop_window(self) -> list[OpRecord]:
        self.recording = False
        self.dependencies.stop()
        for queue in self._queues:  # the workers are idle (after synchronize)
            for chunk in queue.take_chunks():
                self._fold.add(queue.index, chunk)
            records, queue.records = queue.records, []
            self._fold.add(queue.index, records)
        return self._fold.records(self._window_start_ns)

    def folded_ops(self) -> FoldedOps | None:
        return self._fold.statistics()

    def handoff_totals(self) -> HandoffTotals:
        """Every hand-off of the window counted, also those beyond the MAX_KEPT_RINGS kept."""
        per_queue = {q.index: min(q.ring_count, q.wake_count) for q in self._queues}
        if all(max(q.ring_count, q.wake_count) <= MAX_KEPT_RINGS for q in self._queues):
            kinds = Counter(s.first_kind for s in self.submissions())
        else:
            kinds = Counter(
                {name: sum(q.wake_kinds[k] for q in self._queues) for k, name in enumerate(_KIND_NAMES)}
            )
        return HandoffTotals(
            count=sum(per_queue.values()),
            per_queue=per_queue,
            first_task_kinds={k: v for k, v in kinds.items() if v},
            kept=sum(min(len(q.rings), len(q.wakes)) for q in self._queues),
        )

    def submissions(self) -> list[SubmissionRecord]:
        """Every doorbell ring of the window (call after stop_window), per queue in ring order."""
        return [s for queue in self._queues for s in queue.submissions()]

    @property
    def window_start_ns(self) -> int:
        """CLOCK_MONOTONIC ns of the window start (shared with bpftrace `nsecs`)."""
        return self._window_start_ns

    def iteration_times_ms(self) -> list[float] | None:
        return None

    def queue_mapping(self) -> QueueMapping:
        return {
            "pool_size": self.pool_size,
            "queues_created": len(self._queues),
            "stream_to_queue": list(self._mapping),
            "source": "cpu backend: HIP-like pool (GPU_MAX_HW_QUEUES)",
            "stream_priority": describe(self.priorities),
        }

    def wait_idle(self, timeout_s: float = 0.5) -> bool:
        """Wait until every worker sleeps on its doorbell (idle flag set, blocked reading it): after
        synchronize() a worker still runs its loop's tail, which an edge of the traced window
        would otherwise cut through (eBPF slices vs /proc on-CPU counters). False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(q._idle and _waits_on(q.tid, q.doorbell) for q in self._queues if q.tid):
                return True
            time.sleep(50e-6)
        return False

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(q.tid or 0, q.index, tuple(q.streams), q.doorbell) for q in self._queues]

    def reset_memory_peak(self) -> None:
        # Writing 5 to clear_refs resets VmHWM (peak RSS) for this process (Linux ≥ 4.0).
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")

    def memory_stats(self) -> Memory:
        peak = None
        with contextlib.suppress(OSError), open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
        if peak is None:
            return {"kind": "cpu_rss_peak", "peak_bytes": None, "reason": "/proc/self/status has no VmHWM"}
        return {
            "kind": "cpu_rss_peak",
            "peak_bytes": peak,
            "source": "VmHWM of this process, reset before warm-up",
        }

    def environment(self) -> JsonObject:
        """The settings that decide how the queue threads share the CPUs (docs/metrics.md)."""
        import torch

        return {
            "cpu_count": os.cpu_count(),
            "cpus_allowed": len(os.sched_getaffinity(0)),
            "threads_per_queue": self.threads_per_queue,
            "queue_pool_size": self.pool_size,
            "torch_intra_op_threads": {
                "host": torch.get_num_threads(),
                "queues": [q.torch_threads for q in self._queues],
            },
            "torch_interop_threads": torch.get_num_interop_threads(),
            "gil_switch_interval_s": sys.getswitchinterval(),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.closing = True
        for queue in self._queues:
            queue.stop()
