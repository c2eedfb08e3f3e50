"""Test entry point: aorta's CLI with some collaborators replaced through `cli.main`'s seam.

    python tests/cli_with_fakes.py [--fake-gpu VENDOR:INDEX] [--crash-at-streams N[,N…]]
                                   [--fail-rank R] -- COMMAND ARGS…

--fake-gpu          clock/power control acts on that GPU through its vendor's command-line tool
                    (fake_smi.py's nvidia-smi/rocm-smi first on PATH), even on the CPU backend.
--crash-at-streams  a sweep point with that stream count starts a child that SIGKILLs itself at
                    once, as an OOM kill would.
--fail-rank         under torchrun (run this file as its script), that rank raises right after
                    joining the process group.
--host-delay-us N   the host spins N µs before every launch on a CPU-backend stream (a known
                    per-launch host delay: the run is host launch-bound).
--points-host-delay-us N
                    a sweep's points run through this file with --host-delay-us N.
--fresh-memory-kib N
                    every op launched on a CPU-backend stream first maps and writes N KiB of fresh
                    anonymous memory (unmapped after): a workload that touches new memory inside
                    the measurement window, so a memory limit makes it reclaim there.
--points-fresh-memory-kib N
                    a sweep's points run through this file with --fresh-memory-kib N.
--copy-delay-us N   every host↔device copy op (label *_copy) on a CPU-backend stream holds one
                    shared "copy engine" and sleeps N µs before copying: a throttled copy path
                    that more streams cannot widen.
--points-copy-delay-us N
                    a sweep's points run through this file with --copy-delay-us N.
--collective-delay-us N
                    under torchrun, rank 1 sleeps N µs (an op of its own, "late_rank") before every
                    collective op (label all_reduce, all_gather …) on a CPU-backend stream: it
                    enters each collective late, and its peers wait for it inside.
--points-collective-delay-us N
                    a sweep's points run through this file with --collective-delay-us N (through
                    torchrun when the sweep has --nproc-per-node).
--extra-waits 1     every launch on CPU-backend stream k > 0 first waits on stream k-1's last op
                    (a dependency no workload declares: needless serialisation).
--points-extra-waits 1
                    a sweep's points run through this file with --extra-waits 1.
--fake-cuda-runtime LOG
                    the GPU backend (-d cuda:0) runs on tests/fake_cuda.py's device, whose stream
                    operations call the real libcudart.so.12 (tests/vendor_libs.py) as torch
                    would; the workload's tensors stay on the CPU. LOG gets JSON: "streams",
                    every stream handle in creation order, and "window", the calls made inside
                    the tracer's window as rows [api, stream, event].
--fake-cuda-nccl LOG
                    as --fake-cuda-runtime, and torch.distributed is one NCCL rank whose
                    collectives call the real libnccl.so.2 on the current stream
                    (fake_cuda.FakeDistributed); LOG also gets "collectives", the NCCL calls made
                    inside the window as rows [api, stream, count, datatype].

Production code has none of these switches: they live here, and reach aorta only as the
`Collaborators` a caller of `cli.main` may pass.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from aorta.hw_queue_eval.cli import main
from aorta.hw_queue_eval.commands.collaborators import Collaborators
from aorta.hw_queue_eval.gpu.control import GpuTarget
from aorta.hw_queue_eval.gpu.drivers import make_driver
from aorta.hw_queue_eval.gpu.drivers.base import GpuDriver
from aorta.hw_queue_eval.sweeps.childrun import point_command, under_torchrun

ENTRY = os.path.abspath(__file__)
SELF_KILL = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"


class FakeGpu:
    """A GpuLocator for one stand-in GPU driven by its vendor's tool found on PATH."""

    def __init__(self, vendor: str, index: int) -> None:
        self.vendor, self.index = vendor, index

    def no_gpu_for(self, device: str) -> bool:
        return False  # the stand-in GPU is there whatever the device

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


def delayed_launches(delay_us: int) -> Any:
    """harness.run_benchmark with every CPU-backend launch preceded by a `delay_us` host spin."""
    from aorta.hw_queue_eval.backends.cpu import CpuStream
    from aorta.hw_queue_eval.run.harness import run_benchmark

    launch = CpuStream.launch

    def delayed(self: CpuStream, fn: Any, label: str) -> None:
        end = time.monotonic_ns() + delay_us * 1000
        while time.monotonic_ns() < end:
            pass
        launch(self, fn, label)

    CpuStream.launch = delayed  # type: ignore[method-assign]
    return run_benchmark


def fresh_memory_launches(kib: int) -> Any:
    """harness.run_benchmark with every CPU-backend op preceded, on its queue thread, by writing
    `kib` KiB of freshly mapped anonymous memory (every page faulted in, then unmapped)."""
    from aorta.hw_queue_eval.backends.cpu import CpuStream
    from aorta.hw_queue_eval.run.harness import run_benchmark

    launch = CpuStream.launch
    size = max(kib, 4) * 1024
    ones = b"\x01" * size

    def touching(self: CpuStream, fn: Any, label: str) -> None:
        def op() -> Any:
            with mmap.mmap(-1, size) as fresh:
                fresh.write(ones)
            return fn()

        launch(self, op, label)

    CpuStream.launch = touching  # type: ignore[method-assign]
    return run_benchmark


def throttled_copies(delay_us: int) -> Any:
    """harness.run_benchmark with every CPU-backend copy op (label *_copy) run on one shared copy
    engine that first sleeps `delay_us` (no CPU used): copies serialise, whatever the streams."""
    from aorta.hw_queue_eval.backends.cpu import CpuStream
    from aorta.hw_queue_eval.run.harness import run_benchmark
    from aorta.hw_queue_eval.workloads.transfer import is_copy_label

    launch = CpuStream.launch
    engine = threading.Lock()

    def throttled(self: CpuStream, fn: Any, label: str) -> None:
        if not is_copy_label(label):
            launch(self, fn, label)
            return

        def op() -> Any:
            with engine:
                time.sleep(delay_us / 1e6)
                return fn()

        launch(self, op, label)

    CpuStream.launch = throttled  # type: ignore[method-assign]
    return run_benchmark


def delayed_collectives(delay_us: int) -> Any:
    """harness.run_benchmark with every collective op of torchrun rank 1 (on a CPU-backend stream)
    preceded on its stream by a `delay_us` sleep op: a late rank (a straggler's longer compute),
    that every peer waits for inside the collective."""
    from aorta.hw_queue_eval.backends.cpu import CpuStream
    from aorta.hw_queue_eval.run.harness import run_benchmark
    from aorta.hw_queue_eval.workloads.collectives import is_collective_label

    if os.environ.get("RANK") != "1":
        return run_benchmark
    launch = CpuStream.launch

    def late(self: CpuStream, fn: Any, label: str) -> None:
        if is_collective_label(label):
            launch(self, lambda: time.sleep(delay_us / 1e6), "late_rank")
        launch(self, fn, label)

    CpuStream.launch = late  # type: ignore[method-assign]
    return run_benchmark


def serialised_launches() -> Any:
    """harness.run_benchmark with every launch on CPU stream k > 0 waiting on stream k-1 first."""
    from aorta.hw_queue_eval.backends.cpu import CpuStream
    from aorta.hw_queue_eval.run.harness import run_benchmark

    launch = CpuStream.launch

    def serialised(self: CpuStream, fn: Any, label: str) -> None:
        if self.index > 0:
            self.wait(self._backend._streams[self.index - 1])
        launch(self, fn, label)

    CpuStream.launch = serialised  # type: ignore[method-assign]
    return run_benchmark


def dropped_join_waits() -> Any:
    """harness.run_benchmark with stream 0 never waiting on the last stream: the removed
    dependency (graph_subgraphs' join then misses its last branch: a race)."""
    from aorta.hw_queue_eval.backends.cpu import CpuStream
    from aorta.hw_queue_eval.run.harness import run_benchmark

    wait = CpuStream.wait

    def dropping(self: CpuStream, other: Any) -> None:
        if self.index == 0 and other.index == len(self._backend._streams) - 1:
            return
        wait(self, other)

    CpuStream.wait = dropping  # type: ignore[method-assign]
    return run_benchmark


def real_cudart_runs(log_path: str, nccl: bool = False) -> Any:
    """harness.run_benchmark on the GPU backend over the fake device whose stream operations call
    the real libcudart (fake_cuda.RealCudart), tensors on the CPU (a CPU build of torch has no CUDA
    tensors); installed now, before `run` resolves its device. Each run writes the stream handles
    and the calls made between the tracer's window_start and window_stop to `log_path`: the
    ground truth. `nccl`: torch.distributed is one rank calling the real libnccl (loaded now, so
    the tracer finds it mapped)."""
    import json

    import pytest
    import torch

    import fake_cuda
    import vendor_libs
    from aorta.hw_queue_eval.backends.gpu import GpuBackend
    from aorta.hw_queue_eval.run.harness import run_benchmark

    library = vendor_libs.library("cudart")
    if library is None:
        raise SystemExit("cli_with_fakes: the real libcudart is not fetched (python tests/vendor_libs.py)")
    runtime = fake_cuda.RealCudart(library)
    patch = pytest.MonkeyPatch()  # never undone: this process only runs the one command
    fake_cuda.install(patch, runtime)
    patch.setattr(GpuBackend, "torch_device", lambda self: torch.device("cpu"))
    if nccl:
        nccl_library = vendor_libs.library("nccl")
        if nccl_library is None:
            raise SystemExit("cli_with_fakes: the real libnccl is not fetched (python tests/vendor_libs.py)")
        fake_cuda.install_distributed(patch, runtime, nccl_library)

    def benchmark(config: Any, tracer: Any = None, **kwargs: Any) -> Any:
        if tracer is not None:
            log_inside_window(tracer, runtime)
        result = run_benchmark(config, tracer=tracer, **kwargs)
        with open(log_path, "w") as log:
            calls = [[c.api, c.stream, c.event] for c in runtime.window]
            colls = [[c.api, c.stream, c.size, c.kind] for c in runtime.window if c.api.startswith("nccl")]
            json.dump({"streams": runtime.streams, "window": calls, "collectives": colls}, log)
        return result

    return benchmark


def log_inside_window(tracer: Any, runtime: Any) -> None:
    """`runtime` records its calls from the moment the tracer's window opened until it closes."""
    start, stop = tracer.window_start, tracer.window_stop

    def started() -> None:
        start()
        runtime.recording = True

    def stopping() -> None:
        runtime.recording = False
        stop()

    tracer.window_start, tracer.window_stop = started, stopping


def faked_points(flag: str, value: str) -> Any:
    """A point command whose children run through this file with `flag value`."""

    def build(run_args: Sequence[str], out_path: str, nproc_per_node: int | None) -> list[str]:
        command = [sys.executable, "-I", ENTRY, flag, value, "--", "run", *run_args, "-o", out_path]
        return command if nproc_per_node is None else under_torchrun(command, nproc_per_node)

    return build


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
        elif flag == "--host-delay-us":
            given["benchmark"] = delayed_launches(int(value))
        elif flag == "--points-host-delay-us":
            given["point_command"] = faked_points("--host-delay-us", str(int(value)))
        elif flag == "--fresh-memory-kib":
            given["benchmark"] = fresh_memory_launches(int(value))
        elif flag == "--points-fresh-memory-kib":
            given["point_command"] = faked_points("--fresh-memory-kib", str(int(value)))
        elif flag == "--copy-delay-us":
            given["benchmark"] = throttled_copies(int(value))
        elif flag == "--points-copy-delay-us":
            given["point_command"] = faked_points("--copy-delay-us", str(int(value)))
        elif flag == "--collective-delay-us":
            given["benchmark"] = delayed_collectives(int(value))
        elif flag == "--points-collective-delay-us":
            given["point_command"] = faked_points("--collective-delay-us", str(int(value)))
        elif flag == "--extra-waits":
            given["benchmark"] = serialised_launches()
        elif flag == "--points-extra-waits":
            given["point_command"] = faked_points("--extra-waits", "1")
        elif flag == "--dropped-join-wait":
            given["benchmark"] = dropped_join_waits()
        elif flag == "--fake-cuda-runtime":
            given["benchmark"] = real_cudart_runs(value)
        elif flag == "--fake-cuda-nccl":
            given["benchmark"] = real_cudart_runs(value, nccl=True)
        elif flag == "--points-dropped-join-wait":
            given["point_command"] = faked_points("--dropped-join-wait", "1")
        else:
            raise SystemExit(f"cli_with_fakes: unknown option {flag}")
    return Collaborators(**given), rest


if __name__ == "__main__":
    collaborators, args = parse(sys.argv[1:])
    main(args, collaborators)
