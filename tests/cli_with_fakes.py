"""Test entry point: aorta's CLI with some collaborators replaced through `cli.main`'s seam.

    python tests/cli_with_fakes.py [--fake-gpu VENDOR:INDEX] [--crash-at-streams N[,N…]]
                                   [--fail-rank R] -- COMMAND ARGS…

--fake-gpu          clock/power control acts on that GPU through its vendor's command-line tool
                    (fake_smi.py's nvidia-smi/rocm-smi first on PATH), even on the CPU backend.
--crash-at-streams  a sweep point with that stream count starts a child that SIGKILLs itself at
                    once, as an OOM kill would.
--fail-rank         under torchrun (run this file as its script), that rank raises right after
                    joining the process group.

Production code has none of these switches: they live here, and reach aorta only as the
`Collaborators` a caller of `cli.main` may pass.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from aorta.hw_queue_eval.cli import main
from aorta.hw_queue_eval.commands.collaborators import Collaborators
from aorta.hw_queue_eval.gpu.control import GpuTarget
from aorta.hw_queue_eval.gpu.drivers import make_driver
from aorta.hw_queue_eval.gpu.drivers.base import GpuDriver
from aorta.hw_queue_eval.sweeps.childrun import point_command

ENTRY = os.path.abspath(__file__)
SELF_KILL = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


class FakeGpu:
    """A GpuLocator for one stand-in GPU driven by its vendor's tool found on PATH."""

    def __init__(self, vendor: str, index: int) -> None:
        self.vendor, self.index = vendor, index

    def target_for(self, resolved_device: str) -> GpuTarget | None:
        return GpuTarget(self.vendor, self.index, simulated=True)

    def driver_for(self, target: GpuTarget) -> GpuDriver:
        return make_driver(target.vendor, target.index, allow_library=False)


def crashing_points(streams: set[str]) -> Any:
    """A point command whose children for `streams` die of SIGKILL before measuring anything."""

    def build(run_args: Sequence[str], out_path: str, nproc_per_node: int | None) -> list[str]:
        args = list(run_args)
        if args[args.index("--streams") + 1] in streams:
            return [sys.executable, "-I", "-c", SELF_KILL]
        return point_command(run_args, out_path, nproc_per_node)

    return build


def failing_rank(rank: str) -> Any:
    """A benchmark that raises on torchrun rank `rank` (after the process group is joined)."""
    from aorta.hw_queue_eval.run.harness import run_benchmark

    def benchmark(*args: Any, **kwargs: Any) -> Any:
        if os.environ.get("RANK") == rank:
            raise RuntimeError(f"injected failure (rank {rank})")
        return run_benchmark(*args, **kwargs)

    return benchmark


def parse(argv: list[str]) -> tuple[Collaborators, list[str]]:
    """(collaborators from the options before `--`, the CLI's own argv after it)."""
    split = argv.index("--")
    options, rest = argv[:split], argv[split + 1 :]
    given: dict[str, Any] = {}
    for flag, value in zip(options[::2], options[1::2], strict=True):
        if flag == "--fake-gpu":
            vendor, index = value.split(":")
            given["gpus"] = FakeGpu(vendor, int(index))
        elif flag == "--crash-at-streams":
            given["point_command"] = crashing_points(set(value.split(",")))
        elif flag == "--fail-rank":
            given["benchmark"] = failing_rank(value)
        else:
            raise SystemExit(f"cli_with_fakes: unknown option {flag}")
    return Collaborators(**given), rest


if __name__ == "__main__":
    collaborators, args = parse(sys.argv[1:])
    main(args, collaborators)
