"""Typed models of the run result's sections: the keys producers write and readers may index.

Each TypedDict is the layout of one section of schema v2 (schema/run_result.v2.json,
docs/results-schema.md). At run time they are plain dicts, so the JSON is exactly what the
producers built; the types name every documented key once, for producers, readers and the test
factory alike. Keys a section may lack are in a `total=False` subclass. Sections whose keys are
open-ended (environment, workload parameters, an eBPF family's own metrics) stay `JsonObject`
(common/jsontypes.py). No torch import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Required, TypedDict

from aorta.common.jsontypes import JsonObject


class Stats(TypedDict):
    """Statistics over samples (latency_ms, ops.ready_to_start_ms, ops.per_label values)."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    p50: float
    p95: float
    p99: float
    median: float
    iqr: float


class LaneSwitches(TypedDict):
    """switch_latency.per_lane[lane]: one lane's switches, its like-for-like overhead over ready
    gaps and its launch waits (null where readiness is unknown). Older files lack the last two."""

    switches: int
    matched_switches: int
    switch_overhead_ms: float | None
    reason: str | None
    launch_wait_gaps: int | None
    launch_wait_total_ms: float | None


class SwitchPair(TypedDict):
    """switch_latency.pairs[]: one (lane, previous op kind, next op kind) group."""

    lane: str | None
    after: str
    before: str
    matched_on: str
    switch_gaps: int
    no_switch_gaps: int
    switch_gap_median_ms: float
    no_switch_gap_median_ms: float


class GapReadiness(TypedDict):
    """switch_latency.gap_readiness: lane gaps by whether their next op was ready in time."""

    definition: str
    ready: int | None
    waited: int | None
    unknown: int | None
    ready_switches: int | None


class LaunchStarvation(TypedDict):
    """switch_latency.launch_starvation: gaps whose next op became ready after the lane freed."""

    definition: str
    cause: str
    cross_stream_waits: int | None
    gaps: int | None
    switch_gaps: int | None
    gaps_with_known_readiness: int | None
    wait_total_ms: float | None
    wait_mean_ms: float | None
    wait_p50_ms: float | None
    wait_max_ms: float | None
    share_of_lane_time: float | None
    share_definition: str
    reason: str | None


class AllGaps(TypedDict):
    """switch_latency.all_gaps: the like-for-like figure over every gap, launch waits included."""

    definition: str
    switch_overhead_ms: float | None
    spread_ms: float | None
    matched_switch_count: int | None


class UpstreamSwitch(TypedDict, total=False):
    """Upstream AORTA's switch keys, its formula (results/upstream_keys.py); files written
    before they were added lack them."""

    inter_stream_gap_ms: float | None
    intra_stream_gap_ms: float | None
    estimated_switch_overhead_ms: float | None
    inter_stream_samples: int | None
    intra_stream_samples: int | None
    upstream_keys: dict[str, str]


class _SwitchLatencyWritten(UpstreamSwitch):
    """switch_latency as a run writes it (SwitchLatency below adds what an upgrade writes)."""

    definition: str
    switch_count: int | None
    no_switch_count: int | None
    matched_switch_count: int | None
    matched_on_both_kinds: int | None
    matched_on_previous_kind: int | None
    switch_overhead_ms: float | None
    spread_ms: float | None
    spread_definition: str
    outside_spread: bool | None
    per_lane: dict[str, LaneSwitches]
    pairs: list[SwitchPair]
    reason: str | None
    gap_readiness: GapReadiness
    launch_starvation: LaunchStarvation
    all_gaps: AllGaps


class SwitchLatency(_SwitchLatencyWritten, total=False):
    """switch_latency: like-for-like switch overhead over ready gaps, the launch waits apart, or
    null figures with the reason. Files written before the split lack the last three blocks
    (readers use .get; docs/results-schema.md). The keys below only readers/upgrade.py writes,
    when it reads an older file."""

    upgrade_note: str  # how this section was recomputed from the file's op rows
    v1: JsonObject  # a v1 file's own switch section, kept as it was
    before_split: JsonObject  # a v2 section from before launch waits were split out


class _OnCpuRequired(TypedDict):
    on_cpu_queues: float | None
    on_cpu_ms: float | None
    on_cpu_reason: str | None


class OnCpu(_OnCpuRequired, total=False):
    """The on-CPU part of concurrency (queue threads on a CPU, from schedstat)."""

    on_cpu_source: str
    host_on_cpu: float | None
    host_run_queue_wait: float | None
    queue_run_queue_wait_ms: float | None
    queue_run_queue_wait_share: float | None
    cpu_wait_reason: str | None
    cpu_wait_source: str


class Concurrency(OnCpu):
    """concurrency: streams with an op in flight (wall clock), and queue threads on a CPU."""

    achieved: float | None
    window_ms: float
    definition: str


class _HandoffsRequired(TypedDict):
    count: int | None
    per_queue: dict[str, int] | None


class Handoffs(_HandoffsRequired, total=False):
    """ops.handoffs: the harness's own count of hand-offs to an idle queue (doorbell rings)."""

    reason: str
    meaning: str
    source: str


class Ops(TypedDict):
    """ops: every op of the window, per label, ready→start delays and hand-offs."""

    count: int
    per_label: dict[str, Stats | None]
    ready_to_start_ms: Stats | None
    ready_to_start_note: str | None
    handoffs: Handoffs
    statistics: JsonObject | None


class OpWaits(TypedDict):
    """op_intervals.waits: cross-stream waits (waiter op → the op it waited for)."""

    columns: list[str]
    note: str
    rows: list[list[int]]
    total: int


class StreamEdge(TypedDict, total=False):
    """One stream dependency: the consumer stream waits for the producer (`waits`: how often)."""

    producer: Required[int]
    consumer: Required[int]
    waits: int


class StreamOrder(TypedDict):
    """stream_order: observed cross-stream waits against the workload's declared dependencies."""

    source: str | None
    declared: list[StreamEdge]
    edges: list[StreamEdge] | None
    missing_synchronisation: list[StreamEdge] | None
    needless_serialisation: list[StreamEdge] | None
    note: str | None
    runtime_edges: list[StreamEdge] | None
    runtime_edges_note: str


class OpIntervals(TypedDict):
    """op_intervals: the op table (µs from window start) for reports and the trace export."""

    columns: list[str]
    labels: list[str]
    rows: list[list[Any]]
    truncated: bool
    total_ops: int
    row_selection: str
    waits: OpWaits


class _QueueMappingRequired(TypedDict):
    pool_size: int | None
    stream_to_queue: list[int] | None


class QueueMapping(_QueueMappingRequired, total=False):
    """queue_mapping: which hardware queue each stream used, where the host can see it."""

    queues_created: int | None
    source: str
    reason: str
    stream_priority: list[str] | None  # per stream high/normal/low; None: default priorities
    torch_stream_priority: list[int] | None  # GPU: the torch priority each stream was created with


class _MemoryRequired(TypedDict):
    kind: str | None  # None: the backend does not measure memory
    peak_bytes: int | None


class Memory(_MemoryRequired, total=False):
    """memory: the run's peak memory and where it was read."""

    source: str
    reason: str
    peak_reserved_bytes: int  # GPU: the caching allocator's peak reservation on the device


class ToolInfo(TypedDict):
    """tool: which aorta wrote the result."""

    name: str
    version: str
    git_commit: str | None
    git_commit_reason: str | None


class Verification(TypedDict):
    """verification: the workload's outputs against a serial recomputation."""

    passed: bool
    max_rel_error: float
    tolerance: float
    checked: str
    outputs_of: str  # which iteration was checked (older files lack it)


class Metadata(TypedDict):
    """metadata: what the workload is and which threads ran the queues."""

    workload: JsonObject
    category: str
    switch_sensitivity: str
    work_scaling: str
    work_per_iteration: float
    workers: list[JsonObject]
    window_start_monotonic_ns: int | None


class UpstreamMetadata(Metadata, total=False):
    """metadata with upstream AORTA's keys (copies of `environment` facts, upstream_keys.py)."""

    device_info: JsonObject
    rocm_info: JsonObject
    driver_info: JsonObject | None
    multi_gpu: JsonObject
    upstream_keys: dict[str, str]


class _GcWindowRequired(TypedDict):
    disabled_in_window: bool


class GcWindow(_GcWindowRequired, total=False):
    """instrumentation.gc: the automatic collector off around the window (or why not)."""

    collected_before_window: int
    collect_before_window_ms: float
    cyclic_garbage_after_window: int
    meaning: str
    reason: str


class _InstrumentationRequired(TypedDict):
    op_timing: bool
    op_fold_ms: float | None
    per_iteration_sync: bool
    instrumented_window_ms: float
    plain_window_ms: float | None
    cost_ratio: float | None
    plain_throughput: float | None
    definition: str


class Instrumentation(_InstrumentationRequired, total=False):
    """instrumentation: what the window carried and its cost against an uninstrumented window."""

    reason: str | None
    gc: GcWindow


class _QueueSummaryRequired(TypedDict):
    total_submissions: int | None
    total_dispatches: int | None
    hw_rings_used: list[Any] | None
    submit_to_dispatch_avg_us: float | None
    submit_to_dispatch_p99_us: float | None


class QueueSummary(_QueueSummaryRequired, total=False):
    """The headline figures of ebpf_queue_metrics: one family's summary, named by `source`."""

    source: str
    submit_to_dispatch_p99: JsonObject | None
    submit_to_dispatch_p99_method: str | None
    summary_reason: str


#: the summary keys every queue family reports (and the section carries as null without one)
QUEUE_SUMMARY_KEYS: tuple[str, ...] = tuple(_QueueSummaryRequired.__annotations__)


class _EbpfSectionRequired(TypedDict):
    status: str
    error: str | None


class EbpfQueueSection(_EbpfSectionRequired, total=False):
    """ebpf_queue_metrics: status and error; a traced section (status ok or error) also carries
    the QueueSummary keys at top level, the lost-event counts and each family's own numbers."""

    lost_events: int | None
    families: JsonObject
    bpftrace: JsonObject | None
    interpretation: list[str]
    warning: str


@dataclass(frozen=True)
class TracerSections:
    """What a window tracer adds to a run result: its three sections, each null when not traced."""

    ebpf_queue_metrics: JsonObject | None = None
    ebpf_memory_metrics: JsonObject | None = None
    ebpf_vs_cuda_comparison: JsonObject | None = None

    @classmethod
    def of(cls, sections: Mapping[str, JsonObject | None]) -> TracerSections:
        """The sections from a {section name: body} mapping; a name the result lacks is a bug."""
        names = {f.name for f in fields(cls)}
        unknown = set(sections) - names
        if unknown:  # a tracer bug, not user input: never a silent new key on the result
            raise RuntimeError(f"tracer returned sections the result does not have: {sorted(unknown)}")
        return cls(**sections)
