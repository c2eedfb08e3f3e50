"""Stream sweep: one child `run` per stream count, checkpointed after every point, resumable.

A crash, OOM kill or hang of a point costs that point only (`childrun.run_point`); the sweep file
(`checkpoint.CheckpointFile`, kind "sweep") is rewritten atomically after every point, so a
kill -9 of the sweep itself loses at most the point in flight. No torch import here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aorta.common.errors import UsageError
from aorta.hw_queue_eval import scaling
from aorta.hw_queue_eval.checkpoint import CheckpointFile, fingerprint, open_or_resume
from aorta.hw_queue_eval.childrun import run_point
from aorta.hw_queue_eval.config import env_knobs
from aorta.hw_queue_eval.workloads.base import WorkloadInfo

SWEEP_KIND = "sweep"


def plan_stream_counts(info: WorkloadInfo, counts: list[int]) -> tuple[list[int], list[int]]:
    """(counts the workload accepts, counts dropped as outside its range); UsageError if none left."""
    kept = [n for n in counts if info.min_streams <= n <= info.max_streams]
    dropped = [n for n in counts if n not in kept]
    if not kept:
        raise UsageError(f"none of --streams {','.join(map(str, counts))} is within "
                         f"{info.name}'s range {info.min_streams}..{info.max_streams}: "
                         "choose counts inside it")
    return kept, dropped


def trace_path_for(trace_out: str | None, workload: str, streams: int) -> str | None:
    """Per-point trace file: DIR/<workload>-s<N>.trace.json for a folder, else PREFIX-s<N>.trace.json."""
    if not trace_out:
        return None
    if trace_out.endswith(os.sep) or Path(trace_out).is_dir():
        return str(Path(trace_out) / f"{workload}-s{streams}.trace.json")
    return f"{trace_out}-s{streams}.trace.json"


@dataclass
class SweepSpec:
    """Everything a sweep needs, validated by the CLI."""

    workload: str
    info: WorkloadInfo
    stream_counts: list[int]
    dropped: list[int]
    run_options: dict[str, Any]  # option name → value, passed to every child `run`
    output: str
    timeout_s: float | None = None
    trace_out: str | None = None
    flags: list[str] = field(default_factory=list)  # passthrough flags (e.g. --ebpf-trace)
    nproc_per_node: int | None = None  # run each point under torchrun with this many ranks

    def settings(self) -> dict[str, Any]:
        """What must match for a finished point to be reused by --resume."""
        settings = {"workload": self.workload, "run_options": self.run_options,
                    "flags": sorted(self.flags), "env_knobs": env_knobs()}
        if self.nproc_per_node is not None:  # absent otherwise: older sweep files still resume
            settings["nproc_per_node"] = self.nproc_per_node
        return settings

    def header(self) -> dict[str, Any]:
        return {"workload": self.workload, "throughput_unit": self.info.throughput_unit,
                "work_scaling": self.info.work_scaling, "stream_counts": self.stream_counts,
                "dropped_stream_counts": self.dropped, "run_options": self.run_options,
                "flags": self.flags, "timeout_s": self.timeout_s,
                "nproc_per_node": self.nproc_per_node,
                "settings": self.settings(), "fingerprint": fingerprint(self.settings())}

    def child_args(self, streams: int) -> list[str]:
        args = [self.workload, "--streams", str(streams)]
        for name, value in self.run_options.items():
            if value is not None:
                args += [f"--{name.replace('_', '-')}", str(value)]
        args += self.flags
        trace = trace_path_for(self.trace_out, self.workload, streams)
        if trace:
            args += ["--trace-out", trace]
        return args


def point_key(workload: str, streams: int) -> dict[str, Any]:
    """Checkpoint key of a sweep point (compare pairs on workload and stream count, too)."""
    return {"workload": workload, "streams": streams}


def ok_results(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results of the points that finished ok."""
    return [p["result"] for p in points if p.get("status") == "ok" and p.get("result")]


def analysis_of(points: list[dict[str, Any]], work_scaling: str) -> dict[str, Any] | None:
    """Scaling analysis of the ok points, as stored in the sweep file."""
    result = scaling.analyze(ok_results(points), work_scaling)
    return None if result is None else result.to_dict()


def open_checkpoint(spec: SweepSpec, resume: bool) -> CheckpointFile:
    """A fresh sweep file, or the earlier one when resuming (same settings required)."""
    return open_or_resume(spec.output, SWEEP_KIND, spec.header(), resume)


PointCallback = Callable[[int, dict[str, Any] | None, int, int], None]


def run_sweep(spec: SweepSpec, file: CheckpointFile,
              on_point: PointCallback = lambda n, point, done, total: None) -> CheckpointFile:
    """Run every pending point, recording each one as it ends; returns the checkpoint file.

    `on_point(streams, point_or_None_if_skipped, done, total)` reports progress. KeyboardInterrupt
    propagates after the child is stopped; every finished point is already on disk.
    """
    total = len(spec.stream_counts)
    file.save(state="running", analysis=analysis_of(file.points, spec.info.work_scaling))
    for done, streams in enumerate(spec.stream_counts, start=1):
        key = point_key(spec.workload, streams)
        if file.done(key):
            on_point(streams, None, done, total)
            continue
        outcome = run_point(spec.child_args(streams), timeout_s=spec.timeout_s,
                            nproc_per_node=spec.nproc_per_node)
        point = {"key": key, **outcome.to_dict(), "result": outcome.result,
                 "trace_file": trace_path_for(spec.trace_out, spec.workload, streams)
                 if outcome.status == "ok" else None}
        others = [p for p in file.points if p.get("key") != key]
        file.record(point, state="running",
                    analysis=analysis_of([*others, point], spec.info.work_scaling))
        on_point(streams, point, done, total)
    file.save(state="complete", analysis=analysis_of(file.points, spec.info.work_scaling))
    return file
