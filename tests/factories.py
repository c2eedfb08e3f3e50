"""Run-result fixtures built the way a run builds them, checked against the published schema.

Every section comes from the result models (aorta.hw_queue_eval.results.models) or the producer
a run uses (metrics.summarize, metrics.unmeasured_switch_analysis, RunConfig, RunResult.to_dict),
and `run_result` refuses to return anything the schema (schema/run_result.v2.json) rejects: a
test cannot feed a reader a layout the tool never writes.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.results.models import (
    Concurrency,
    EbpfQueueSection,
    Handoffs,
    Memory,
    Metadata,
    OpIntervals,
    Ops,
    OpWaits,
    QueueMapping,
    QueueSummary,
    Stats,
    Verification,
)
from aorta.hw_queue_eval.results.run_result import RunResult, run_result_schema
from aorta.hw_queue_eval.results.validation import problem

OP_COLUMNS = ["iteration", "stream", "queue", "label", "ready_us", "start_us", "end_us"]
DEFAULT_TIMES_MS = (1.0, 1.1, 0.9, 1.05, 0.95)


class InvalidFixture(AssertionError):
    """A fixture the published schema rejects: the tool would never write it."""


def schema_problem(result: dict[str, Any]) -> str | None:
    """Why `result` is not a run result of the published schema (None: valid)."""
    return problem(result, run_result_schema())


def stats(samples: Sequence[float]) -> Stats:
    """The statistics block a run writes for these samples (latency_ms, per-label durations)."""
    summary = metrics.summarize(list(samples))
    assert summary is not None, "statistics need at least one sample"
    return summary


def queue_summary(
    source: str = "cpu_sched",
    *,
    submissions: int = 100,
    avg_us: float | None = 5.0,
    p99_us: float | None = 20.0,
    rings: Sequence[Any] = (0, 1, 2, 3),
) -> QueueSummary:
    """A queue family's `summary`: the keys every queue family reports."""
    return QueueSummary(
        source=source,
        total_submissions=submissions,
        total_dispatches=submissions,
        hw_rings_used=list(rings),
        submit_to_dispatch_avg_us=avg_us,
        submit_to_dispatch_p99_us=p99_us,
    )


def family_entry(metrics: dict[str, Any], attached: Sequence[str] = ()) -> dict[str, Any]:
    """One families.<name> entry as the engine writes it."""
    return {
        "metrics": metrics,
        "coverage": {"covered": "test"},
        "events_attached": list(attached),
        "events_missing": {},
    }


def queue_section(
    source: str = "cpu_sched",
    *,
    status: str = "ok",
    metrics: dict[str, Any] | None = None,
    other_families: dict[str, dict[str, Any]] | None = None,
    **summary: Any,
) -> EbpfQueueSection:
    """`ebpf_queue_metrics` as the engine writes it: the `source` family's summary (queue_summary
    of `summary`) at top level and under families.<source>.metrics.summary beside `metrics` (more
    of its own numbers); `other_families`: name → metrics of families that attached nothing."""
    head = queue_summary(source, **summary)
    families = {name: family_entry(fam) for name, fam in (other_families or {}).items()}
    families[source] = family_entry({"summary": head, **(metrics or {})}, ["sched:sched_switch"])
    section = EbpfQueueSection(status=status, error=None if status == "ok" else "bpftrace failed")
    section.update(head)
    section.update(lost_events=0, families=families)
    return section


def op_intervals(rows: list[list[Any]], labels: list[str]) -> OpIntervals:
    """`op_intervals` for rows of OP_COLUMNS (µs from the window start), no cross-stream waits."""
    return OpIntervals(
        columns=list(OP_COLUMNS),
        labels=list(labels),
        rows=rows,
        truncated=False,
        total_ops=len(rows),
        row_selection="every op of the window",
        waits=OpWaits(
            columns=["waiter_stream", "waiter_op", "target_stream", "target_op"],
            note="op = ordinal of the op among its stream's ops in the window",
            rows=[],
            total=0,
        ),
    )


def run_result(
    *,
    workload: str = "hetero_kernels",
    streams: int = 4,
    iteration_times_ms: Sequence[float] | None = DEFAULT_TIMES_MS,
    throughput: float | None = None,
    throughput_unit: str = "GFLOPS",
    work_per_iteration: float = 1e9,
    size: str = "small",
    backend: str = "cpu",
    cpu_count: int = 2,
    pool_size: int | None = 4,
    latency_ms: Stats | None = None,
    ebpf_queue_metrics: EbpfQueueSection | None = None,
    op_intervals: OpIntervals | None = None,
    status: str = "ok",
    **sections: Any,
) -> dict[str, Any]:
    """A schema-v2 run result of `streams` streams whose iterations took `iteration_times_ms`.

    throughput defaults to the work per mean iteration (GFLOPS); latency_ms to the statistics of
    the iteration times; `sections` replace whole top-level sections (e.g. concurrency=...).
    Raises InvalidFixture when the outcome does not validate against the published schema.
    """
    times = [float(t) for t in iteration_times_ms] if iteration_times_ms is not None else None
    if throughput is None and times:
        throughput = work_per_iteration / (statistics.fmean(times) / 1e3) / 1e9
    iterations = len(times) if times else 5
    device = "cpu" if backend == "cpu" else "cuda:0"
    config = RunConfig(workload, streams, iterations=iterations, warmup=1, device=device, size=size)
    config_dict = {**config.to_dict(), "backend": backend}
    mapping = [s % pool_size for s in range(streams)] if pool_size else None
    window_ms = sum(times) if times else 1.0
    result = RunResult(
        workload_name=workload,
        stream_count=streams,
        config=config_dict,
        environment={
            "host": "factory",
            "kernel": "6.1.0",
            "python": "3.11.2",
            "backend": backend,
            "device": device,
            "env_knobs": {},
            "cpu_count": cpu_count,
        },
        throughput=throughput,
        throughput_unit=throughput_unit,
        latency_ms=latency_ms if latency_ms is not None else (stats(times) if times else None),
        latency_note="per-iteration latency from host clock around launch + one wait for all streams",
        iteration_times_ms=times,
        iteration_times_note=None,
        total_time_ms=window_ms,
        switch_latency=metrics.unmeasured_switch_analysis("not measured in this fixture"),
        concurrency=Concurrency(
            achieved=None,
            window_ms=window_ms,
            definition="streams with an op in flight (wall clock): sum of per-stream busy time / window time",
            on_cpu_queues=None,
            on_cpu_ms=None,
            on_cpu_reason="not measured in this fixture",
        ),
        per_stream_times_ms=None,
        per_stream_op_counts=None,
        ops=Ops(
            count=len(op_intervals["rows"]) if op_intervals else 0,
            per_label={},
            ready_to_start_ms=None,
            ready_to_start_note="not measured in this fixture",
            handoffs=Handoffs(count=None, per_queue=None, reason="not measured in this fixture"),
            statistics=None,
        ),
        queue_mapping=QueueMapping(
            pool_size=pool_size,
            stream_to_queue=mapping,
            queues_created=min(streams, pool_size) if pool_size else None,
        ),
        memory=Memory(kind="cpu_rss_peak", peak_bytes=None, reason="not measured in this fixture"),
        verification=Verification(
            passed=status == "ok",
            max_rel_error=0.0,
            tolerance=1e-3,
            checked="fixture",
            outputs_of="warm-up iteration 1 (before the window)",
        ),
        metadata=Metadata(
            workload={"size": size},
            category="latency_sensitive",
            switch_sensitivity="critical",
            work_scaling="per_stream",
            work_per_iteration=work_per_iteration,
            workers=[],
            window_start_monotonic_ns=None,
        ),
        op_intervals=op_intervals,
        ebpf_queue_metrics=dict(ebpf_queue_metrics) if ebpf_queue_metrics is not None else None,
        status=status,
        error=None if status == "ok" else "verification failed",
    ).to_dict()
    unknown = set(sections) - set(result)
    if unknown:
        raise InvalidFixture(f"not sections of a run result: {sorted(unknown)}")
    result.update(sections)
    found = schema_problem(result)
    if found is not None:
        raise InvalidFixture(f"fixture does not match the published schema: {found}")
    return result
