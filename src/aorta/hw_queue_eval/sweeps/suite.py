"""Suite (`run-priority`): the catalogue by priority level, one stream sweep per workload.

Each workload's sweep is an ordinary `stream_sweep` run (child per point, checkpoint after every
point, `--resume`) written to `<folder>/<workload>_sweep.json`; this module only plans which
workloads run at which stream counts and walks them in priority order. No torch import here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.sweeps.checkpoint import CheckpointFile
from aorta.hw_queue_eval.sweeps.childrun import PointCommand, point_command
from aorta.hw_queue_eval.sweeps.stream_sweep import SweepSpec, open_checkpoint, run_sweep
from aorta.hw_queue_eval.workloads.registry import get_info, priority_of, workloads_at_priority


@dataclass
class SuiteEntry:
    """One workload of the suite: its sweep, or why it is skipped (no stream count in range)."""

    workload: str
    priority: str | None
    spec: SweepSpec | None
    skipped: str | None = None

    @property
    def sweep(self) -> SweepSpec:
        """The spec of a runnable entry (one that is not skipped)."""
        if self.spec is None:
            raise ValueError(f"{self.workload} is skipped: {self.skipped}")
        return self.spec


def sweep_file_for(folder: str, workload: str) -> str:
    """Where a workload's sweep goes inside the suite folder."""
    return os.path.join(folder, f"{workload}_sweep.json")


def plan_suite(
    level: str,
    counts: list[int],
    folder: str,
    run_options: JsonObject,
    flags: list[str],
    timeout_s: float | None = None,
) -> list[SuiteEntry]:
    """One entry per workload of `level` in priority order; counts outside a workload's range are
    dropped for it, and a workload with none left is skipped (said in its entry)."""
    entries = []
    for name in workloads_at_priority(level):
        info = get_info(name)
        kept = [n for n in counts if info.min_streams <= n <= info.max_streams]
        dropped = [n for n in counts if n not in kept]
        if not kept:
            entries.append(
                SuiteEntry(
                    name,
                    priority_of(name),
                    None,
                    f"none of the stream counts is within its range {info.min_streams}..{info.max_streams}",
                )
            )
            continue
        spec = SweepSpec(
            workload=name,
            info=info,
            stream_counts=kept,
            dropped=dropped,
            run_options=run_options,
            output=sweep_file_for(folder, name),
            timeout_s=timeout_s,
            flags=list(flags),
        )
        entries.append(SuiteEntry(name, priority_of(name), spec))
    return entries


def open_suite(entries: list[SuiteEntry], resume: bool) -> dict[str, CheckpointFile]:
    """Every sweep file opened (or resumed) before the first point runs, so a conflict in any of
    them stops the suite before any work."""
    return {e.workload: open_checkpoint(e.spec, resume) for e in entries if e.spec is not None}


WorkloadCallback = Callable[[SuiteEntry, int, int], None]


def run_suite(
    entries: list[SuiteEntry],
    files: dict[str, CheckpointFile],
    on_workload: WorkloadCallback = lambda entry, done, total: None,
    on_point: Callable[..., None] = lambda n, point, done, total: None,
    build_command: PointCommand = point_command,
) -> dict[str, CheckpointFile]:
    """Run each workload's sweep in order (the stream sweep's own loop); returns the files."""
    runnable = [(e, e.spec) for e in entries if e.spec is not None]
    for done, (entry, spec) in enumerate(runnable, start=1):
        on_workload(entry, done, len(runnable))
        run_sweep(spec, files[entry.workload], on_point, build_command=build_command)
    return files
