"""Harness: warm-up, verification, one measurement window, tracer hooks, Result assembly.

The window's wall time spans every stream (it ends after one final host wait for all of them).
In `per_iteration` mode each iteration ends with one host wait for all streams (not one per
stream), and on GPU the iteration time comes from events that join every stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.backends import Backend, create_backend, resolve_device
from aorta.hw_queue_eval.backends.base import HandoffTotals, SubmissionRecord
from aorta.hw_queue_eval.backends.priority import parse_spec
from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.ops.opfold import ROW_SELECTION, OpWindow
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.results.models import (
    Concurrency,
    Handoffs,
    Instrumentation,
    Metadata,
    OnCpu,
    OpIntervals,
    Ops,
    OpWaits,
    Stats,
    TracerSections,
    Verification,
)
from aorta.hw_queue_eval.results.run_result import RunResult, collect_environment
from aorta.hw_queue_eval.run import oncpu
from aorta.hw_queue_eval.run.cpupin import Pinning
from aorta.hw_queue_eval.run.gcwindow import QuietGc
from aorta.hw_queue_eval.run.stream_order import runtime_edges, stream_order
from aorta.hw_queue_eval.tracing.window_context import WindowContext
from aorta.hw_queue_eval.workloads.base import UNIT_SCALE, VerifyResult, Workload
from aorta.hw_queue_eval.workloads.registry import get_workload_class

MAX_STORED_OPS = 200_000
ProgressFn = Callable[[str, int, int], None]


class WindowTracer(Protocol):
    """What the harness needs from a kernel tracer (aorta.ebpf implements it).

    `prepare` attaches (blocking until every probe is live) before warm-up; `window_start` and
    `window_stop` bracket exactly the measurement window; `finish` returns the result's tracer
    sections (TracerSections) and never raises for tracer problems (it reports them inside).
    """

    def prepare(self, backend: Backend, workload: Workload) -> None: ...

    def window_start(self) -> None: ...

    def window_stop(self) -> None: ...

    def finish(self, context: WindowContext) -> TracerSections: ...

    def abort(self) -> None: ...


def default_size(device: str) -> str:
    """CPU → small (the README command finishes in well under a minute on 2 cores); GPU → large."""
    return "small" if device == "cpu" else "large"


def _noop_progress(phase: str, done: int, total: int) -> None:
    return None


def compact_ops(
    ops: list[OpRecord],
    waits: list[tuple[int, int, int, int]] | None = None,
    total_ops: int | None = None,
    total_waits: int | None = None,
) -> OpIntervals:
    """Op intervals as a compact table (µs from window start) for reports and trace export.

    `ops` are sorted by start; the first MAX_STORED_OPS become rows. `total_ops` counts every op
    of the window where `ops` holds only the first ones (a folded run). `waits` (DependencyLog
    rows) are kept beside the table so the trace can draw each cross-stream wait as an arrow from
    the op waited for to the op that waited.
    """
    total = len(ops) if total_ops is None else total_ops
    wait_rows = (waits or [])[:MAX_STORED_OPS]
    labels: list[str] = []
    index: dict[str, int] = {}
    rows = []
    for op in ops[:MAX_STORED_OPS]:
        if op.label not in index:
            index[op.label] = len(labels)
            labels.append(op.label)
        rows.append(
            [
                op.iteration,
                op.stream,
                op.queue,
                index[op.label],
                None if op.ready_ns is None else round(op.ready_ns / 1e3, 3),
                round(op.start_ns / 1e3, 3),
                round(op.end_ns / 1e3, 3),
            ]
        )
    return OpIntervals(
        columns=["iteration", "stream", "queue", "label", "ready_us", "start_us", "end_us"],
        labels=labels,
        rows=rows,
        truncated=total > len(rows),
        total_ops=total,
        row_selection=ROW_SELECTION,
        waits=OpWaits(
            columns=["waiter_stream", "waiter_op", "target_stream", "target_op"],
            note="op = ordinal of the op among its stream's ops in the window",
            rows=[list(w) for w in wait_rows],
            total=len(waits or []) if total_waits is None else total_waits,
        ),
    )


def _handoffs(totals: HandoffTotals | None) -> Handoffs:
    """The harness's own count of hand-offs to an idle queue (doorbell rings) in the window."""
    if totals is None:
        return Handoffs(
            count=None,
            per_queue=None,
            reason="this backend's hand-offs are not visible to the host (user-mode queues)",
        )
    per_queue = {str(q): n for q, n in totals.per_queue.items() if n}
    return Handoffs(
        count=totals.count,
        per_queue=per_queue,
        meaning="hand-offs of work to an idle queue: one doorbell (eventfd) write each",
        source="harness",
    )


def run_benchmark(
    config: RunConfig,
    tracer: WindowTracer | None = None,
    progress: ProgressFn = _noop_progress,
    barrier: Callable[[], None] | None = None,
) -> RunResult:
    """Run `config` once and return its RunResult (status ok, or failed verification noted).

    `barrier` (torchrun: a process-group barrier) is called before warm-up and right before the
    window starts, so every rank warms up and measures at the same time.
    """
    device = resolve_device(config.device)
    workload_cls = get_workload_class(config.workload)
    workload_cls.INFO.check_streams(config.streams)
    size = config.size or default_size(device)
    backend = create_backend(
        device,
        config.streams,
        threads_per_queue=config.threads_per_queue,
        priorities=parse_spec(config.stream_priority, config.streams) if config.stream_priority else None,
    )
    pinning = None
    try:
        if config.cpus is not None:  # --cpus: host and queue workers, before any iteration
            pinning = Pinning(config.cpus, [w.tid for w in backend.workers() if w.tid])
        result = _run_on_backend(config, backend, workload_cls, size, tracer, progress, barrier)
        result.environment["cpus_pinned"] = pinning.report() if pinning is not None else None
        return result
    except BaseException:
        if tracer is not None:
            tracer.abort()
        raise
    finally:
        if pinning is not None:
            pinning.restore()
        backend.close()


def _run_on_backend(
    config: RunConfig,
    backend: Backend,
    workload_cls: type[Workload],
    size: str,
    tracer: WindowTracer | None,
    progress: ProgressFn,
    barrier: Callable[[], None] | None = None,
) -> RunResult:
    workload = workload_cls(
        config.streams, size, backend.torch_device(), config.seed, options=config.workload_options
    )
    workload.setup()
    backend.reset_memory_peak()
    if tracer is not None:
        progress("attach tracer", 0, 1)
        tracer.prepare(backend, workload)

    quiet_gc = QuietGc()
    try:
        return _warm_up_and_measure(config, backend, workload, size, tracer, progress, barrier, quiet_gc)
    finally:
        quiet_gc.abort()  # no-op once stop() has reported


def _warm_up_and_measure(
    config: RunConfig,
    backend: Backend,
    workload: Workload,
    size: str,
    tracer: WindowTracer | None,
    progress: ProgressFn,
    barrier: Callable[[], None] | None,
    quiet_gc: QuietGc,
) -> RunResult:
    """Warm-up, verification, the measured window(s); automatic GC off from the last warm-up
    iteration on."""
    streams = backend.streams
    if barrier is not None:
        barrier()
    verification = None
    for w in range(config.warmup):
        if w == config.warmup - 1:
            # one full collection, then none until the window is over (gcwindow.py); one warm-up
            # iteration follows it: a collection right before the window made the first measured
            # iteration 5.6 ms (tiny_kernel_stress 16) and 8.6 ms (hetero_kernels 8) slower, vs
            # ~1 ms with an iteration between. Earlier warm-up runs with the collector as usual,
            # so a JIT's garbage from its first iteration is freed as it would be anyway.
            quiet_gc.start()
        backend.begin_iteration(-1 - w)
        workload.run_iteration(streams)
        backend.end_iteration()
        backend.synchronize()
        progress("warm-up", w + 1, config.warmup)
        if verification is None:
            # on the first iteration's outputs, so the warm-up iterations after it re-warm what
            # the host-side recomputation disturbed: a window started right after verification
            # had its first iteration 0.5–2.5 ms (tiny_kernel_stress 16) and 3.6–9.7 ms
            # (hetero_kernels 8) slower than the rest, up to 5 % of the window (docs/metrics.md)
            verification = workload.verify()
    if config.warmup == 0:  # -w 0: a cold window; verified on its last iteration, after it
        quiet_gc.start()

    per_iteration = config.sync_mode == "per_iteration"
    backend.set_instrumentation(op_timing=config.op_timing, iteration_joins=per_iteration)
    host_times: list[float] = []
    if barrier is not None:
        barrier()
    worker_tids = [w.tid for w in backend.workers() if w.tid]
    cpu_start = oncpu.snapshot(worker_tids)
    wait_start = oncpu.wait_snapshot(worker_tids, threading.get_native_id())
    backend.row_cap = MAX_STORED_OPS
    backend.start_window()
    if tracer is not None:
        _quiesce(backend)
        tracer.window_start()
    window_start = time.perf_counter_ns()
    for i in range(config.iterations):
        t0 = time.perf_counter_ns()
        backend.begin_iteration(i)
        workload.run_iteration(streams)
        backend.end_iteration()
        if per_iteration:
            backend.synchronize()
            host_times.append((time.perf_counter_ns() - t0) / 1e6)
        backend.fold_pending()  # bounded memory; outside the iteration's own time
        progress("measure", i + 1, config.iterations)
    backend.synchronize()
    window_ns = time.perf_counter_ns() - window_start
    if tracer is not None:  # the gate closes first: the host's /proc reads below are not traced
        _quiesce(backend)
        tracer.window_stop()
    cpu_stop = oncpu.snapshot(worker_tids) if cpu_start is not None else None  # workers idle now
    wait_stop = oncpu.wait_snapshot(worker_tids, threading.get_native_id()) if wait_start else None
    ops = backend.stop_window() if config.record_ops and config.op_timing else []
    if verification is None:
        verification = workload.verify()
    folded = backend.folded_ops() if ops else None
    device_times = backend.iteration_times_ms()
    on_cpu = oncpu.on_cpu_concurrency(cpu_start, cpu_stop, window_ns / 1e6)
    on_cpu.update(oncpu.cpu_wait(wait_start, wait_stop, window_ns / 1e6))  # type: ignore[typeddict-item]
    instrumentation = _instrumentation(config, backend, workload, window_ns, per_iteration, progress)
    instrumentation["gc"] = quiet_gc.stop()
    measured = Measured(
        window=OpWindow(ops, folded),
        window_ns=window_ns,
        per_iteration=per_iteration,
        host_times=host_times,
        device_times=device_times,
        verification=verification,
        submissions=backend.submissions(),
        on_cpu=on_cpu,
        instrumentation=instrumentation,
    )
    result = _assemble(config, backend, workload, size, measured, tracer)
    if config.profile_dir is not None:  # after every figure is taken: the profiler slows ops
        result.profiler = profiled_window(config, config.profile_dir, backend, workload, progress)
    return result


def profiled_window(
    config: RunConfig, profile_dir: str, backend: Backend, workload: Workload, progress: ProgressFn
) -> Any:
    """--profile: the same iterations once more under torch.profiler (run/profiling.py)."""
    from aorta.hw_queue_eval.run.profiling import profile_window, trace_name

    backend.set_instrumentation(op_timing=False, iteration_joins=False)
    streams = backend.streams
    offset = 2 * config.iterations  # after the measured and the uninstrumented windows' indices

    def run_one(i: int) -> None:
        backend.begin_iteration(offset + i)
        workload.run_iteration(streams)
        backend.end_iteration()
        progress("profile", i + 1, config.iterations)

    return profile_window(
        config.iterations,
        run_one,
        backend.synchronize,
        backend.name,
        profile_dir,
        trace_name(config.workload, config.streams, config.rank),
    )


def measure_instrumentation(config: RunConfig, backend: Backend) -> bool:
    """Whether to run the uninstrumented window: asked for, or by default on GPU only."""
    if config.instrumentation_cost is not None:
        return config.instrumentation_cost
    return backend.name == "gpu"


def plain_window_ns(config: RunConfig, backend: Backend, workload: Workload, progress: ProgressFn) -> int:
    """Wall time of the same iterations with no op timing, no per-iteration joins or host
    waits: one host wait at the end (the instrumentation-free baseline of this run)."""
    backend.set_instrumentation(op_timing=False, iteration_joins=False)
    streams = backend.streams
    start = time.perf_counter_ns()
    for i in range(config.iterations):
        backend.begin_iteration(config.iterations + i)
        workload.run_iteration(streams)
        backend.end_iteration()
        progress("uninstrumented", i + 1, config.iterations)
    backend.synchronize()
    return time.perf_counter_ns() - start


def _instrumentation(
    config: RunConfig,
    backend: Backend,
    workload: Workload,
    window_ns: int,
    per_iteration: bool,
    progress: ProgressFn,
) -> Instrumentation:
    """What the measured window carried, and its cost against an uninstrumented window."""
    fold_ns = getattr(backend, "fold_ns", None)
    info = Instrumentation(
        op_timing=config.op_timing,
        op_fold_ms=None if fold_ns is None else fold_ns / 1e6,
        per_iteration_sync=per_iteration,
        instrumented_window_ms=window_ns / 1e6,
        plain_window_ms=None,
        cost_ratio=None,
        plain_throughput=None,
        definition=(
            "cost_ratio = instrumented window / uninstrumented window - 1, same "
            "iterations, same process, the uninstrumented window right after"
        ),
    )
    if not measure_instrumentation(config, backend):
        info["reason"] = (
            "not measured on the CPU backend by default (its per-op clock reads "
            "cannot be switched off); on GPU it is"
        )
        return info
    plain_ns = plain_window_ns(config, backend, workload, progress)
    work = workload.work_per_iteration() * config.iterations
    info["plain_window_ms"] = plain_ns / 1e6
    info["cost_ratio"] = window_ns / plain_ns - 1 if plain_ns > 0 else None
    info["plain_throughput"] = metrics.throughput(
        work, plain_ns / 1e9, UNIT_SCALE[workload.throughput_unit()]
    )
    info["reason"] = None
    return info


def _verified_iteration(config: RunConfig) -> str:
    """Which iteration's outputs verification checked (the first warm-up one, unless -w 0)."""
    if config.warmup:
        return "warm-up iteration 1 (before the window)"
    return f"measured iteration {config.iterations} (-w 0: after the window)"


@dataclass
class Measured:
    """What the measured window gave, as `_warm_up_and_measure` took it, for `_assemble`."""

    window: OpWindow
    window_ns: int
    per_iteration: bool
    host_times: list[float]
    device_times: list[float] | None
    verification: VerifyResult
    submissions: list[SubmissionRecord] | None
    on_cpu: OnCpu
    instrumentation: Instrumentation


class Latency(NamedTuple):
    """latency_ms, iteration_times_ms and their notes, and the stability warning (or None)."""

    latency: Stats | None
    latency_note: str
    iteration_times: list[float] | None
    iteration_note: str | None
    warning: str | None


def latency_section(
    per_iteration: bool, host_times: list[float], device_times: list[float] | None
) -> Latency:
    """Per-iteration latency from device events when the backend has them, else from the host
    clock; none in end_only mode (the window time alone is measured)."""
    if not per_iteration:
        note = (
            "sync-mode end_only: iterations are not synchronised "
            "individually, so only the window time is measured"
        )
        return Latency(None, note, None, note, None)
    if device_times:
        samples, source = device_times, "device events joining every stream"
    else:
        samples, source = host_times, "host clock around launch + one wait for all streams"
    latency = metrics.summarize(samples)
    return Latency(
        latency, f"per-iteration latency from {source}", samples, None, metrics.stability_warning(latency)
    )


def run_warnings(
    latency_warning: str | None, counts: list[int] | None, verification: VerifyResult
) -> list[str]:
    """The result's warnings, in order: unstable latency, streams idle in the window, a failed
    verification."""
    warnings = [latency_warning] if latency_warning else []
    idle_streams = [s for s, c in enumerate(counts or []) if c == 0]
    if idle_streams:
        warnings.append(f"streams without work in the window: {idle_streams}")
    if not verification.passed:
        warnings.append(
            f"verification FAILED: max relative error {verification.max_rel_error:.3g}"
            f" > {verification.tolerance:g}"
        )
    return warnings


def config_section(config: RunConfig, device: str, size: str, backend_name: str) -> JsonObject:
    """The run's config as recorded: the options, with the device, size and backend resolved."""
    config_dict = config.to_dict()
    config_dict.update({"device": device, "size": size, "backend": backend_name})
    return config_dict


def concurrency_section(busy: list[float] | None, window_ms: float, on_cpu: OnCpu) -> Concurrency:
    """Streams with an op in flight (sum of per-stream busy time / window time; None without
    per-op times), and the queue threads' on-CPU figures."""
    return Concurrency(
        achieved=metrics.achieved_concurrency(busy, window_ms) if busy else None,
        window_ms=window_ms,
        definition=("streams with an op in flight (wall clock): sum of per-stream busy time / window time"),
        **on_cpu,
    )


def ops_section(
    window: OpWindow, delays: Stats | None, op_timing: bool, handoffs: HandoffTotals | None
) -> Ops:
    """Every op of the window (counted, per label), ready→start delays or why there are none,
    and the hand-offs to idle queues."""
    return Ops(
        count=window.total,
        per_label=window.per_label(),
        ready_to_start_ms=delays,
        ready_to_start_note=(
            None
            if delays
            else "per-op timing off (--no-op-timing)"
            if not op_timing
            else "the backend cannot observe when an op became ready"
        ),
        handoffs=_handoffs(handoffs),
        statistics=window.statistics_note() if window.rows else None,
    )


def verification_section(verification: VerifyResult, config: RunConfig) -> Verification:
    """The workload's check of its outputs, and which iteration's outputs it checked."""
    return Verification(
        passed=verification.passed,
        max_rel_error=verification.max_rel_error,
        tolerance=verification.tolerance,
        checked=verification.checked,
        outputs_of=_verified_iteration(config),
    )


def metadata_section(workload: Workload, workers: list[Any], window_start_ns: int | None) -> Metadata:
    """What the workload is (its catalogue entry and parameters) and which threads ran the queues."""
    info = workload.INFO
    return Metadata(
        workload=workload.describe(),
        category=info.category,
        switch_sensitivity=info.switch_sensitivity,
        work_scaling=info.work_scaling,
        work_per_iteration=workload.work_per_iteration(),
        workers=[w.__dict__ for w in workers],
        window_start_monotonic_ns=window_start_ns,
    )


def _assemble(
    config: RunConfig,
    backend: Backend,
    workload: Workload,
    size: str,
    measured: Measured,
    tracer: WindowTracer | None,
) -> RunResult:
    """The RunResult of the window: each section from its builder, then the tracer's sections."""
    window, verification, submissions = measured.window, measured.verification, measured.submissions
    window_ms = measured.window_ns / 1e6
    handoffs = backend.handoff_totals() if submissions is not None else None
    latency = latency_section(measured.per_iteration, measured.host_times, measured.device_times)
    work = workload.work_per_iteration() * config.iterations
    tput = metrics.throughput(work, measured.window_ns / 1e9, UNIT_SCALE[workload.throughput_unit()])
    ops = window.rows
    busy = window.per_stream_busy_ms(config.streams)
    counts = window.per_stream_op_counts(config.streams)
    delays = window.ready_to_start_ms()
    result = RunResult(
        workload_name=workload.INFO.name,
        stream_count=config.streams,
        config=config_section(config, backend.device, size, backend.name),
        environment=collect_environment(backend.environment(), backend.name, backend.device),
        throughput=tput,
        throughput_unit=workload.throughput_unit(),
        latency_ms=latency.latency,
        latency_note=latency.latency_note,
        iteration_times_ms=latency.iteration_times,
        iteration_times_note=latency.iteration_note,
        total_time_ms=window_ms,
        switch_latency=(
            window.switch_analysis(window_ms, backend.window_wait_count())
            if config.op_timing
            else metrics.unmeasured_switch_analysis("per-op timing off (--no-op-timing)")
        ),
        instrumentation=measured.instrumentation,
        concurrency=concurrency_section(busy, window_ms, measured.on_cpu),
        per_stream_times_ms=busy,
        per_stream_op_counts=counts,
        ops=ops_section(window, delays, config.op_timing, handoffs),
        queue_mapping=backend.queue_mapping(),
        memory=backend.memory_stats(),
        verification=verification_section(verification, config),
        warnings=run_warnings(latency.warning, counts, verification),
        metadata=metadata_section(workload, backend.workers(), getattr(backend, "window_start_ns", None)),
        op_intervals=(
            compact_ops(ops, backend.window_waits(), window.total, backend.window_wait_count())
            if ops
            else None
        ),
        stream_order=stream_order(workload.declared_edges(), backend.window_edges()),
        status="ok" if verification.passed else "failed",
        error=None if verification.passed else "verification failed",
    )
    if tracer is not None:
        result.add_tracer_sections(
            tracer.finish(
                WindowContext(
                    backend=backend,
                    stream_count=result.stream_count,
                    warnings=result.warnings,
                    ops=ops,
                    folded=window.folded,  # every op's figures when `ops` holds only the first
                    submissions=submissions,
                    handoff_totals=handoffs,
                    collectives=workload.collective_facts(),
                )
            )
        )
        result.stream_order = runtime_edges(result.stream_order, result.ebpf_queue_metrics)
    return result


def _quiesce(backend: Any) -> None:
    """Let the queue workers fall asleep before a tracer edge (backends that have no workers
    to wait for skip it): the edge then cuts no worker's on-CPU slice."""
    wait_idle = getattr(backend, "wait_idle", None)
    if callable(wait_idle):
        wait_idle()
