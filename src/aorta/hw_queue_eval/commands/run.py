"""`run`: one workload at one stream count; prints the result blocks and writes JSON."""

from __future__ import annotations

import sys
from typing import Any

import click

from aorta.common.atomicio import check_output_path
from aorta.common.errors import UsageError
from aorta.hw_queue_eval.config import (
    DEFAULT_ITERATIONS,
    DEFAULT_SEED,
    DEFAULT_WARMUP,
    SIZES,
    SYNC_MODES,
    RunConfig,
    parse_positive_int,
)
from aorta.hw_queue_eval.workloads.registry import get_info


def register(group: click.Group) -> None:
    group.add_command(run_command)


def build_config(workload: str, streams: str, iterations: str, warmup: str, device: str,
                 size: str | None, sync_mode: str, seed: int, threads_per_queue: str) -> RunConfig:
    """Validate the run options (no torch) into a RunConfig; UsageError names the bad option."""
    info = get_info(workload)
    stream_count = parse_positive_int(streams, "--streams")
    info.check_streams(stream_count)
    if size is not None and size not in SIZES:
        raise UsageError(f"unknown --size {size!r}: use one of {', '.join(SIZES)}")
    if sync_mode not in SYNC_MODES:
        raise UsageError(f"unknown --sync-mode {sync_mode!r}: use one of {', '.join(SYNC_MODES)}")
    return RunConfig(workload=workload, streams=stream_count,
                     iterations=parse_positive_int(iterations, "--iterations"),
                     warmup=parse_positive_int(warmup, "--warmup"),
                     device=device, size=size, sync_mode=sync_mode, seed=seed,
                     threads_per_queue=parse_positive_int(threads_per_queue,
                                                          "--threads-per-queue"))


class _Progress:
    """A rich progress bar on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            from aorta.hw_queue_eval.report.console import make_console

            self._bar = Progress(TextColumn("{task.description:<14}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"),
                                 TimeRemainingColumn(), console=make_console(stderr=True),
                                 transient=True)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self._bar is None:
            return
        if phase not in self._tasks:
            self._tasks[phase] = self._bar.add_task(phase, total=total)
        self._bar.update(self._tasks[phase], completed=done)


def run_options(func: Any) -> Any:
    """Options shared by run-like commands (run; sweep and policy-sweep reuse them)."""
    options = [
        click.option("-i", "--iterations", default=str(DEFAULT_ITERATIONS), show_default=True,
                     help="Measured iterations."),
        click.option("-w", "--warmup", default=str(DEFAULT_WARMUP), show_default=True,
                     help="Warm-up iterations (not measured)."),
        click.option("-d", "--device", default="auto", show_default=True,
                     help="auto (GPU if torch sees one, else CPU), cpu, cuda or cuda:N."),
        click.option("--size", default=None,
                     help="Size preset: small, medium or large (default: small on CPU, large on GPU)."),
        click.option("--sync-mode", default="per_iteration", show_default=True,
                     help="per_iteration: one host wait per iteration (latency samples); "
                          "end_only: one wait at the end (window time only)."),
        click.option("--seed", default=DEFAULT_SEED, show_default=True, type=int,
                     help="Seed for the workload's inputs."),
        click.option("--threads-per-queue", default="1", show_default=True,
                     help="CPU backend: intra-op threads per worker queue."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


TRACING_FLAGS: list[tuple[str, str, str]] = [
    ("--ebpf-trace", "ebpf_trace",
     "Trace driver/kernel queue activity with eBPF during the measurement window (needs root or "
     "sudo -n; without them the run goes on and the result says why tracing is off)."),
    ("--ebpf-memory-trace", "ebpf_memory_trace",
     "Trace memory pressure with eBPF during the measurement window: GPU buffer moves, maps and "
     "evictions (amdgpu/amdkfd) and host page faults, reclaim and migrations. With --ebpf-trace "
     "both share one bpftrace process."),
]


def tracing_options(func: Any) -> Any:
    """The eBPF flags of run-like commands (one list: issue 4 appends --ebpf-memory-trace)."""
    for flag, dest, text in reversed(TRACING_FLAGS):
        func = click.option(flag, dest, is_flag=True, help=text)(func)
    return func


def build_tracer(queue: bool, memory: bool) -> Any:
    """The tracer for these flags (None without tracing); tells on stderr when tracing is off."""
    if not (queue or memory):
        return None
    from aorta.hw_queue_eval.ebpf_tracer import make_tracer

    tracer = make_tracer(queue, memory)
    if tracer is not None and not tracer.ready.ok:
        click.echo(f"warning: eBPF tracing is off: {tracer.ready.reason}", err=True)
    return tracer


@click.command("run")
@click.argument("workload")
@click.option("-s", "--streams", required=True, help="Number of streams, e.g. 8.")
@run_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON on stdout.")
@tracing_options
def run_command(workload: str, streams: str, iterations: str, warmup: str, device: str,
                size: str | None, sync_mode: str, seed: int, threads_per_queue: str,
                output: str | None, as_json: bool, ebpf_trace: bool = False,
                ebpf_memory_trace: bool = False) -> None:
    """Run WORKLOAD on N streams and measure throughput, latency and queue behaviour."""
    import dataclasses
    import json

    from aorta.hw_queue_eval.backends import resolve_device
    from aorta.hw_queue_eval.harness import run_benchmark
    from aorta.hw_queue_eval.report.console import make_console, render_run
    from aorta.hw_queue_eval.report.ebpf_blocks import render_ebpf
    from aorta.hw_queue_eval.results import save_result

    config = build_config(workload, streams, iterations, warmup, device, size, sync_mode, seed,
                          threads_per_queue)
    if output:
        check_output_path(output)
    tracer = build_tracer(ebpf_trace, ebpf_memory_trace)
    config = dataclasses.replace(config, device=resolve_device(config.device))  # imports torch
    click.echo(f"Running {config.workload} on {config.streams} streams "
               f"({config.iterations} iterations + {config.warmup} warm-up, device {config.device})…",
               err=True)
    with _Progress() as progress:
        result = run_benchmark(config, tracer=tracer, progress=progress).to_dict()
    if output:
        save_result(output, result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        render_run(result, make_console())
        render_ebpf(result, make_console())
        if output:
            click.echo(f"\nresult written to {output}")
    if result["status"] != "ok":
        raise click.exceptions.Exit(1)
