"""Stream sweep: one child `run` per stream count (and repeat), checkpointed, resumable.

With `--repeats N` every stream count runs N times, each in a fresh child, in rounds whose order
is shuffled (seeded) so slow drift of the machine spreads over all points (as policy-sweep does).

A crash, OOM kill or hang of a point costs that point only (`childrun.run_point`); the sweep file
(`checkpoint.CheckpointFile`, kind "sweep") is rewritten atomically after every point, so a
kill -9 of the sweep itself loses at most the point in flight. No torch import here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aorta.common.errors import UsageError
from aorta.common.interrupts import commit
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis import diagnosis, scaling
from aorta.hw_queue_eval.config.run_config import env_knobs
from aorta.hw_queue_eval.sweeps.checkpoint import CheckpointFile, fingerprint, open_or_resume
from aorta.hw_queue_eval.sweeps.childrun import PointCommand, point_command, run_point
from aorta.hw_queue_eval.sweeps.repeats import conditions, interleaved_schedule
from aorta.hw_queue_eval.workloads.base import WorkloadInfo

SWEEP_KIND = "sweep"


def plan_stream_counts(info: WorkloadInfo, counts: list[int]) -> tuple[list[int], list[int]]:
    """(counts the workload accepts, counts dropped as outside its range); UsageError if none left."""
    kept = [n for n in counts if info.min_streams <= n <= info.max_streams]
    dropped = [n for n in counts if n not in kept]
    if not kept:
        raise UsageError(
            f"none of --streams {','.join(map(str, counts))} is within "
            f"{info.name}'s range {info.min_streams}..{info.max_streams}: "
            "choose counts inside it"
        )
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
    run_options: JsonObject  # option name → value, passed to every child `run`
    output: str
    timeout_s: float | None = None
    trace_out: str | None = None
    flags: list[str] = field(default_factory=list)  # passthrough flags (e.g. --ebpf-trace)
    repeats: int = 1
    nproc_per_node: int | None = None  # run each point under torchrun with this many ranks

    def settings(self) -> JsonObject:
        """What must match for a finished point to be reused by --resume."""
        settings: JsonObject = {
            "workload": self.workload,
            "run_options": self.run_options,
            "flags": sorted(self.flags),
            "env_knobs": env_knobs(),
        }
        if self.nproc_per_node is not None:  # absent otherwise: older sweep files still resume
            settings["nproc_per_node"] = self.nproc_per_node
        if self.repeats > 1:  # one-repeat sweeps keep the fingerprint they always had
            settings["repeats"] = self.repeats
        return settings

    def schedule(self) -> list[list[int]]:
        """Stream counts per round: as given for one repeat, else shuffled every round."""
        return interleaved_schedule(self.stream_counts, self.repeats, int(self.run_options.get("seed") or 0))

    def key(self, streams: int, repeat: int) -> JsonObject:
        """Checkpoint key: {workload, streams} (plus `repeat` when repeating)."""
        key = point_key(self.workload, streams)
        return {**key, "repeat": repeat} if self.repeats > 1 else key

    def header(self) -> JsonObject:
        return {
            "workload": self.workload,
            "throughput_unit": self.info.throughput_unit,
            "repeats": self.repeats,
            "schedule": self.schedule(),
            "work_scaling": self.info.work_scaling,
            "stream_counts": self.stream_counts,
            "dropped_stream_counts": self.dropped,
            "run_options": self.run_options,
            "flags": self.flags,
            "timeout_s": self.timeout_s,
            "nproc_per_node": self.nproc_per_node,
            "settings": self.settings(),
            "fingerprint": fingerprint(self.settings()),
        }

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


def point_key(workload: str, streams: int) -> JsonObject:
    """Checkpoint key of a sweep point (compare pairs on workload and stream count, too)."""
    return {"workload": workload, "streams": streams}


def ok_results(points: list[JsonObject]) -> list[JsonObject]:
    """Results of the points that finished ok."""
    return [p["result"] for p in points if p.get("status") == "ok" and p.get("result")]


def load_conditions_warning(points: list[JsonObject]) -> str | None:
    """A warning when ok points come from several sessions (--resume) under different load."""
    conds = [p.get("conditions") or {} for p in points if p.get("status") == "ok"]
    sessions = {c.get("session_pid") for c in conds if c.get("session_pid") is not None}
    loads = [c["loadavg_1m"] for c in conds if isinstance(c.get("loadavg_1m"), (int, float))]
    if len(sessions) < 2:
        return None
    cores = next((c.get("cpu_count") for c in conds if c.get("cpu_count")), None)
    load_text = (
        (f"; 1-min load {min(loads):.2f} … {max(loads):.2f}" + (f" on {cores} cores" if cores else ""))
        if loads
        else ""
    )
    differ = bool(loads) and max(loads) - min(loads) > 0.5 * (cores or 1)
    return f"points come from {len(sessions)} sessions (--resume){load_text}" + (
        ": the load differed, so throughput across these points may not be comparable; "
        "rerun the sweep in one go (or with --repeats) for a clean comparison"
        if differ
        else ""
    )


def analysis_of(points: list[JsonObject], work_scaling: str) -> JsonObject | None:
    """Scaling analysis of the ok points (repeats grouped) and its diagnosis, as stored in the
    sweep file."""
    results = ok_results(points)
    result = scaling.analyze(results, work_scaling)
    if result is None:
        return None
    analysis = result.to_dict()
    analysis["diagnosis"] = diagnosis.diagnose_sweep(results, analysis)
    mixed = load_conditions_warning(points)
    if mixed:
        analysis["warnings"] = [*analysis["warnings"], mixed]
        analysis["mixed_conditions"] = True
    return analysis


def open_checkpoint(spec: SweepSpec, resume: bool) -> CheckpointFile:
    """A fresh sweep file, or the earlier one when resuming (same settings required)."""
    return open_or_resume(spec.output, SWEEP_KIND, spec.header(), resume)


PointCallback = Callable[[int, JsonObject | None, int, int], None]


def run_sweep(
    spec: SweepSpec,
    file: CheckpointFile,
    on_point: PointCallback = lambda n, point, done, total: None,
    build_command: PointCommand = point_command,
) -> CheckpointFile:
    """Run every pending point, recording each one as it ends; returns the checkpoint file.

    `on_point(streams, point_or_None_if_skipped, done, total)` reports progress; `build_command`
    makes each point's child argv. KeyboardInterrupt propagates after the child is stopped; every
    finished point is already on disk.
    """
    plan = [(repeat, streams) for repeat, order in enumerate(spec.schedule(), start=1) for streams in order]
    total = len(plan)
    file.save(state="running", analysis=analysis_of(file.points, spec.info.work_scaling))
    for done, (repeat, streams) in enumerate(plan, start=1):
        key = spec.key(streams, repeat)
        if file.done(key):
            on_point(streams, None, done, total)
            continue
        cond = conditions()
        outcome = run_point(
            spec.child_args(streams),
            timeout_s=spec.timeout_s,
            nproc_per_node=spec.nproc_per_node,
            build_command=build_command,
        )
        point = {
            "key": key,
            **outcome.to_dict(),
            "result": outcome.result,
            "conditions": cond,
            "trace_file": trace_path_for(spec.trace_out, spec.workload, streams)
            if outcome.status == "ok"
            else None,
        }
        others = [p for p in file.points if p.get("key") != key]
        file.record(point, state="running", analysis=analysis_of([*others, point], spec.info.work_scaling))
        on_point(streams, point, done, total)
    commit()  # every point is measured: the file is completed whatever signal comes now
    file.save(state="complete", analysis=analysis_of(file.points, spec.info.work_scaling))
    return file
