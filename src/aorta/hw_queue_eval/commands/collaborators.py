"""What a command talks to outside its own logic, replaceable by whoever calls `cli.main`.

Production runs with the defaults: the GPU behind the resolved --device (gpu_control.DeviceGpus),
sweep points started as `python -I -m aorta.hw_queue_eval run …` (childrun.point_command), and
harness.run_benchmark. A caller of `cli.main(argv, Collaborators(...))` may pass its own — the
tests do: a fake GPU, a point that dies like an OOM kill, a rank that fails right after joining.
So production code holds no test switches, and nothing in the environment or in an input file can
select another collaborator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from aorta.hw_queue_eval.gpu.control import GpuLocator
    from aorta.hw_queue_eval.sweeps.childrun import PointCommand

#: runs one measurement, with harness.run_benchmark's signature
Benchmark = Callable[..., Any]


@dataclass(frozen=True)
class Collaborators:
    """The replaceable collaborators of one CLI invocation (None: production's own)."""

    gpus: GpuLocator | None = None
    point_command: PointCommand | None = None
    benchmark: Benchmark | None = None

    def gpu_locator(self) -> GpuLocator:
        """Which GPU a --device means and how to drive it (imports no torch by itself)."""
        if self.gpus is not None:
            return self.gpus
        from aorta.hw_queue_eval.gpu.control import DeviceGpus

        return DeviceGpus()

    def point_command_builder(self) -> PointCommand:
        """How a sweep starts one point's child process."""
        if self.point_command is not None:
            return self.point_command
        from aorta.hw_queue_eval.sweeps.childrun import point_command

        return point_command

    def benchmark_runner(self) -> Benchmark:
        """What measures one run (in this process, or on one torchrun rank)."""
        if self.benchmark is not None:
            return self.benchmark
        from aorta.hw_queue_eval.run.harness import run_benchmark

        return run_benchmark


def current() -> Collaborators:
    """The collaborators `cli.main` was given, or production's when none (or no click context)."""
    ctx = click.get_current_context(silent=True)
    found = ctx.find_object(Collaborators) if ctx is not None else None
    return found if found is not None else Collaborators()
