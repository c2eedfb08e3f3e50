"""Result schema v2: one run's measurements, saved as JSON (docs/results-schema.md).

Every number says where it came from; what was not measured is null with a reason, never 0.
No torch import here: `compare` and `report` load results without it.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from aorta.common.atomicio import atomic_write_json
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.results import upstream_keys
from aorta.hw_queue_eval.results.models import (
    Concurrency,
    Instrumentation,
    Memory,
    Metadata,
    OpIntervals,
    Ops,
    QueueMapping,
    Stats,
    StreamOrder,
    SwitchLatency,
    TracerSections,
    Verification,
)
from aorta.hw_queue_eval.results.schema import SCHEMA_VERSION, run_result_schema

RESULT_KIND = "run"


#: Keys every run result carries (docs/results-schema.md): users' scripts read them, so they stay.
REQUIRED_KEYS: tuple[str, ...] = tuple(run_result_schema()["required"])


def utc_timestamp() -> str:
    """Now, UTC, ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


@dataclass
class RunResult:
    """A run's measurements. `to_dict` gives the JSON layout of schema v2."""

    workload_name: str
    stream_count: int
    config: JsonObject
    environment: JsonObject
    throughput: float | None
    throughput_unit: str
    latency_ms: Stats | None
    latency_note: str | None
    iteration_times_ms: list[float] | None
    iteration_times_note: str | None
    total_time_ms: float
    switch_latency: SwitchLatency
    concurrency: Concurrency
    per_stream_times_ms: list[float] | None
    per_stream_op_counts: list[int] | None
    ops: Ops
    queue_mapping: QueueMapping
    memory: Memory
    verification: Verification | None
    warnings: list[str] = field(default_factory=list)
    metadata: Metadata | JsonObject = field(default_factory=dict)
    op_intervals: OpIntervals | None = None
    instrumentation: Instrumentation | None = None
    ebpf_queue_metrics: JsonObject | None = None
    ebpf_memory_metrics: JsonObject | None = None
    ebpf_vs_cuda_comparison: JsonObject | None = None
    stream_order: StreamOrder | None = None  # observed waits vs declared (analysis/stream_order)
    profiler: JsonObject | None = None  # --profile only (absent from the JSON otherwise)
    status: str = "ok"
    error: str | None = None
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    timestamp: str = field(default_factory=utc_timestamp)

    def add_tracer_sections(self, sections: TracerSections) -> None:
        """Put a window tracer's sections on their fields (each stays null when not traced)."""
        self.ebpf_queue_metrics = sections.ebpf_queue_metrics
        self.ebpf_memory_metrics = sections.ebpf_memory_metrics
        self.ebpf_vs_cuda_comparison = sections.ebpf_vs_cuda_comparison

    def to_dict(self) -> JsonObject:
        """The JSON object of schema v2 (header keys first)."""
        from aorta.hw_queue_eval.results.provenance import tool_info

        body = asdict(self)
        upstream_keys.add_queue_keys(body["ebpf_queue_metrics"])
        upstream_keys.add_memory_keys(body["ebpf_memory_metrics"])
        body["metadata"] = {**body["metadata"], **upstream_keys.metadata_keys(body["environment"])}
        if body["profiler"] is None:  # a key only runs with --profile have
            del body["profiler"]
        header = {"schema_version": SCHEMA_VERSION, "kind": RESULT_KIND, "tool": dict(tool_info())}
        return {**header, **body}


def collect_environment(backend_env: JsonObject, backend: str, device: str) -> JsonObject:
    """Host, kernel, Python, torch, device, runtime and GPU driver versions, the GPU clocks in
    effect, plus the queue env knobs."""
    from aorta.hw_queue_eval.config.run_config import env_knobs, runtime_env
    from aorta.hw_queue_eval.results.provenance import gpu_facts

    env: JsonObject = {
        "host": platform.node(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "backend": backend,
        "device": device,
        "env_knobs": env_knobs(),
        "runtime_env": runtime_env(),
        "pid": os.getpid(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda_version"] = getattr(torch.version, "cuda", None)
        env["rocm_version"] = getattr(torch.version, "hip", None)
    if backend == "cpu":
        env["device_name"] = platform.processor() or platform.machine()
    env.update(backend_env)
    env.update(gpu_facts(env))
    return env


def save_result(path: str | os.PathLike[str], result: JsonObject) -> None:
    """Write a result (or sweep) dict atomically."""
    atomic_write_json(path, result)


def validate_run_dict(data: Any) -> list[str]:
    """Problems that make `data` not a schema-v2 run result (empty list: valid)."""
    if not isinstance(data, dict):
        return ["top level is not a JSON object"]
    problems = [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in data]
    if data.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version is {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    if data.get("kind") != RESULT_KIND:
        problems.append(f"kind is {data.get('kind')!r}, expected 'run'")
    if data.get("status") not in ("ok", "failed"):
        problems.append("status must be 'ok' or 'failed'")
    lat = data.get("latency_ms")
    if lat is not None:
        for key in ("mean", "p50", "p95", "p99", "min", "max", "std"):
            if not isinstance(lat.get(key), (int, float)):
                problems.append(f"latency_ms.{key} is not a number")
    if data.get("status") == "ok":
        if not isinstance(data.get("throughput"), (int, float)):
            problems.append("throughput is not a number in an ok result")
        if not isinstance(data.get("stream_count"), int) or data.get("stream_count", 0) < 1:
            problems.append("stream_count must be a positive integer")
    return problems
