"""`run`: one workload at one stream count; prints the result blocks and writes JSON."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from aorta.common.atomicio import (
    WriteError,
    check_distinct_outputs,
    check_output_path,
    check_replaceable,
    keep_unsaved,
)
from aorta.common.errors import ExitCode, MeasurementFailed, UsageError
from aorta.common.interrupts import commit
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.exact_u import ALPHA, MIN_RUNS_TO_DETECT
from aorta.hw_queue_eval.commands import collaborators
from aorta.hw_queue_eval.commands._options import (
    Progress,
    build_config,
    build_tracer,
    gpu_control_context,
    gpu_control_options,
    gpu_request,
    gpu_runtime_views,
    run_options,
    state_dir_option,
    tracing_options,
)
from aorta.hw_queue_eval.commands.profiling import profile_folder, profile_options
from aorta.hw_queue_eval.commands.upstream_knobs import (
    collective_knobs,
    collective_options,
    overlap_knobs,
    overlap_options,
)
from aorta.hw_queue_eval.config.run_config import RunConfig, parse_positive_int

if TYPE_CHECKING:
    from aorta.hw_queue_eval.gpu.control import GpuRequest


def register(group: click.Group) -> None:
    group.add_command(run_command)


def _write_outputs(result: JsonObject, output: str | None, trace_out: str | None) -> tuple[list[str], str]:
    """Write -o and --trace-out: (what was written, "" or the one-line error). On a failed write
    (disk full) the file is kept in a private temp folder that the error names. The trace is
    encoded and written piece by piece (report/trace.trace_chunks): its memory does not grow
    with the trace."""
    from aorta.common.atomicio import atomic_write_bytes, json_text
    from aorta.hw_queue_eval.report.trace import trace_chunks

    written: list[str] = []
    for what, path, pieces in (
        ("result", output, lambda: [json_text(result).encode()]),
        ("trace", trace_out, lambda: trace_chunks(result)),
    ):
        if not path:
            continue
        try:
            atomic_write_bytes(path, pieces())
        except WriteError as exc:
            data = b"".join(pieces())
            kept = keep_unsaved(os.path.basename(path), data)
            if kept is None:  # the temp folder is full too: stdout is the last place left
                click.echo(data.decode())
                return written, (f"{exc}; the {what} was printed above as JSON (no room in the temp folder)")
            return written, f"{exc}; the {what} is kept in {kept}: move it where there is room"
        written.append(what)
    return written, ""


@click.command("run")
@click.argument("workload")
@click.option("-s", "--streams", required=True, help="Number of streams, e.g. 8.")
@run_options
@gpu_control_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON on stdout.")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Print the run in one line (throughput, iteration P50/P99, status) instead of the blocks.",
)
@click.option(
    "--trace-out",
    type=click.Path(dir_okay=False),
    help="Write a Chrome/Perfetto trace of every measured op here (ui.perfetto.dev).",
)
@click.option(
    "--force", is_flag=True, help="Replace an -o file that is not a run result (e.g. a sweep checkpoint)."
)
@click.option(
    "--op-timing/--no-op-timing",
    default=True,
    show_default=True,
    help="Time every op (GPU: a start/end event pair per op). Off: no per-op rows, "
    "no switch analysis, less instrumentation in the window.",
)
@click.option(
    "--stream-priority",
    default=None,
    metavar="SPEC",
    help="Create the streams with priorities: STREAM=LEVEL,…[,rest=LEVEL], LEVEL high, normal "
    "or low (e.g. 0=high,rest=low). GPU: torch.cuda.Stream(priority=…); CPU backend: one queue "
    "pool per level, higher served first (docs/policies.md).",
)
@click.option(
    "--repeats",
    default="1",
    show_default=True,
    help="Run N times, each in a fresh process, and keep every run's summary with the "
    f"median and its CI; compare needs ≥ 3 per side for a verdict ({MIN_RUNS_TO_DETECT} per "
    f"side to detect a change at α = {ALPHA:g}). 1 = one in-process run, as before.",
)
@tracing_options
@state_dir_option
@click.option(
    "--dist-timeout",
    default="300",
    show_default=True,
    metavar="SECONDS",
    help="Under torchrun: timeout of every collective and barrier, so a dead rank "
    "stops the others instead of hanging them.",
)
# upstream AORTA 0.3.0's flags (commands/profiling.py, commands/upstream_knobs.py)
@profile_options
@overlap_options
@collective_options
def run_command(
    workload: str,
    streams: str,
    iterations: str,
    warmup: str,
    device: str,
    size: str | None,
    sync_mode: str,
    seed: int,
    threads_per_queue: str,
    cpus: str | None,
    lock_clocks: str | None,
    power_limit: str | None,
    output: str | None,
    as_json: bool,
    trace_out: str | None,
    force: bool = False,
    op_timing: bool = True,
    stream_priority: str | None = None,
    repeats: str = "1",
    ebpf_trace: bool = False,
    ebpf_memory_trace: bool = False,
    ebpf_gpu_runtime: bool = False,
    ebpf_gpu_runtime_views: str | None = None,
    bpftrace: str | None = None,
    state_dir: str | None = None,
    dist_timeout: str = "300",
    quiet: bool = False,
    profile: bool = False,
    profile_dir: str | None = None,
    real_collectives: bool = False,
    async_op: bool = False,
    dist_backend: str | None = None,
    process_groups: str | None = None,
    **overlap: str | None,
) -> None:
    """Run WORKLOAD on N streams and measure throughput, latency and queue behaviour.

    Under torchrun every rank runs it; rank 0 prints the per-rank table and writes -o.
    """
    import dataclasses
    import json

    from aorta.hw_queue_eval.backends import resolve_device
    from aorta.hw_queue_eval.report.console import make_console, quiet_line, render_run
    from aorta.hw_queue_eval.report.ebpf_blocks import render_ebpf
    from aorta.hw_queue_eval.run.harness import run_benchmark

    config = build_config(
        workload, streams, iterations, warmup, device, size, sync_mode, seed, threads_per_queue, cpus
    )
    config = dataclasses.replace(config, op_timing=op_timing)
    ebpf_gpu_runtime = ebpf_gpu_runtime or ebpf_gpu_runtime_views is not None  # views imply it
    views = gpu_runtime_views(ebpf_gpu_runtime_views)
    from aorta.hw_queue_eval.distributed.torchrun import torchrun_env

    dist_env = torchrun_env()
    if dist_env is not None and (lock_clocks is not None or power_limit is not None):
        # before gpu_request: on any device, this is the refusal that applies
        raise UsageError(
            "under torchrun, --lock-clocks/--power-limit are not supported yet "
            "(the ranks would race on one GPU setting): set them without "
            "torchrun first (see docs/distributed.md)"
        )
    request = gpu_request(lock_clocks, power_limit, config.device)
    check_distinct_outputs({"-o": output, "--trace-out": trace_out})
    dist_timeout_s = parse_positive_int(dist_timeout, "--dist-timeout")  # checked everywhere
    explicit = click.get_current_context().get_parameter_source("dist_timeout")
    if dist_env is None and explicit is click.core.ParameterSource.COMMANDLINE:
        raise UsageError(
            "--dist-timeout applies to runs under torchrun only: drop it, or start the run with torchrun"
        )
    config = _with_upstream_knobs(
        config,
        dist_env,
        profile_folder(profile, profile_dir),
        overlap,
        (real_collectives, async_op, dist_backend, process_groups),
    )
    if config.profile_dir is not None and parse_positive_int(repeats, "--repeats") > 1:
        raise UsageError("--profile records one run: use it without --repeats")
    knob_flags = _overlap_flags(overlap)
    if stream_priority is not None:
        from aorta.hw_queue_eval.backends.priority import parse_spec

        parse_spec(stream_priority, config.streams)  # a bad spec stops here (exit 2)
        config = dataclasses.replace(config, stream_priority=stream_priority.strip())
    if dist_env is not None:
        if parse_positive_int(repeats, "--repeats") > 1:
            raise UsageError(
                "under torchrun, --repeats is not supported: repeat the torchrun "
                "command, or use sweep --nproc-per-node N --repeats R"
            )
        _run_under_torchrun(
            config,
            dist_env,
            dist_timeout_s,
            output,
            as_json,
            trace_out,
            ebpf_trace,
            ebpf_memory_trace,
            ebpf_gpu_runtime,
            bpftrace,
            views,
        )
        return
    if output:
        check_output_path(output)
        check_replaceable(output, ("run",), force)
    if trace_out and not op_timing:
        raise UsageError("--trace-out needs per-op timing: drop --no-op-timing")
    if trace_out:
        check_output_path(trace_out, "trace file")
        check_replaceable(trace_out, ("trace",), force, "trace file")
    runs = parse_positive_int(repeats, "--repeats")
    if runs > 1:
        if trace_out:
            raise UsageError("--trace-out records the ops of one run: use it without --repeats")
        flags = [
            flag
            for flag, on in (
                ("--ebpf-trace", ebpf_trace),
                ("--ebpf-memory-trace", ebpf_memory_trace),
                ("--ebpf-gpu-runtime", ebpf_gpu_runtime),
                ("--no-op-timing", not op_timing),
            )
            if on
        ] + (["--stream-priority", stream_priority] if stream_priority is not None else [])
        flags += ["--bpftrace", bpftrace] if bpftrace is not None else []
        flags += ["--state-dir", state_dir] if state_dir is not None else []
        flags += ["--ebpf-gpu-runtime-views", ebpf_gpu_runtime_views] if ebpf_gpu_runtime_views else []
        _run_repeats(config, request, runs, [*flags, *knob_flags], output, as_json, quiet, state_dir)
        return
    tracer = build_tracer(
        ebpf_trace,
        ebpf_memory_trace,
        ebpf_gpu_runtime,
        timeline=bool(trace_out),
        bpftrace=bpftrace,
        gpu_runtime_views=views,
    )
    config = dataclasses.replace(config, device=resolve_device(config.device))  # imports torch
    control = gpu_control_context(config.device, request, state_dir)
    with control as gpu_report:  # clocks/power (if asked) applied and verified before the run
        if not quiet:
            click.echo(
                f"Running {config.workload} on {config.streams} streams ({config.iterations} "
                f"iterations + {config.warmup} warm-up, device {config.device})…",
                err=True,
            )
        with Progress() as progress:
            run_benchmark = collaborators.current().benchmark_runner()
            result = run_benchmark(config, tracer=tracer, progress=progress).to_dict()
    if gpu_report is not None:
        result["gpu_control"] = gpu_report
        click.echo(
            f"GPU control: {gpu_report['device']}: in effect "
            f"{gpu_report.get('in_effect')}, then {gpu_report['status']}",
            err=True,
        )
    commit()  # the run is over: a Ctrl+C from here on would claim "nothing written" next to a file
    written, unsaved = _write_outputs(result, output, trace_out)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    elif quiet:
        click.echo(quiet_line(result))
    else:
        render_run(result, make_console())
        render_ebpf(result, make_console())
        _echo_profile(result)
        if "result" in written:
            click.echo(f"\nresult written to {output}")
        if "trace" in written:
            click.echo(f"trace written to {trace_out} (open it in https://ui.perfetto.dev)")
    if unsaved:
        raise UsageError(unsaved)
    if result["status"] != "ok":
        raise click.exceptions.Exit(ExitCode.FAILED)


def _with_upstream_knobs(
    config: RunConfig,
    dist_env: Any,
    profile_dir: str | None,
    overlap: dict[str, str | None],
    collective: tuple[bool, bool, str | None, str | None],
) -> RunConfig:
    """The config with upstream's --profile, workload knobs and collective flags checked in."""
    import dataclasses

    options = overlap_knobs(config.workload, config.streams, overlap)
    dist_options, backend = collective_knobs(
        config.workload, None if dist_env is None else dist_env.world_size, *collective
    )
    return dataclasses.replace(
        config,
        profile_dir=profile_dir,
        rank=None if dist_env is None else dist_env.rank,
        workload_options={**options, **dist_options},
        dist_backend=backend,
    )


def _overlap_flags(overlap: dict[str, str | None]) -> list[str]:
    """The knob flags again, for the child runs of --repeats (each checked already)."""
    return [
        arg
        for name, value in overlap.items()
        if value is not None
        for arg in (f"--{name.replace('_', '-')}", value)
    ]


def _echo_profile(result: JsonObject) -> None:
    """The PROFILER OUTPUT block of a --profile run (nothing without one)."""
    from aorta.hw_queue_eval.report.profiler_view import profiler_lines

    for line in profiler_lines(result):
        click.echo(line)


def _run_repeats(
    config: RunConfig,
    request: GpuRequest,
    runs: int,
    flags: list[str],
    output: str | None,
    as_json: bool,
    quiet: bool = False,
    state_dir: str | None = None,
) -> None:
    """`run --repeats N`: N fresh child runs back to back, one result with every repeat
    (`state_dir`: the --state-dir option, for the clocks/power this process holds)."""
    import json

    from aorta.hw_queue_eval.report.console import make_console, quiet_line, render_run
    from aorta.hw_queue_eval.report.ebpf_blocks import render_ebpf
    from aorta.hw_queue_eval.report.repeats_view import render_repeats
    from aorta.hw_queue_eval.results.run_result import save_result
    from aorta.hw_queue_eval.sweeps.policy_sweep import child_run_args
    from aorta.hw_queue_eval.sweeps.repeats import RepeatOutcome, run_repeated

    if not quiet:
        click.echo(
            f"Running {config.workload} on {config.streams} streams {runs} times, each in a "
            f"fresh process ({config.iterations} iterations + {config.warmup} warm-up)…",
            err=True,
        )

    def on_repeat(outcome: RepeatOutcome) -> None:
        point = outcome.point
        tput = (point.result or {}).get("throughput")
        text = (
            f"{tput:.4g} {(point.result or {}).get('throughput_unit')}"
            if tput is not None
            else f"{point.status}: {point.error}"
        )
        if not quiet:
            click.echo(f"  repeat {outcome.repeat}/{runs}: {text} ({point.duration_s:.1f} s)", err=True)

    with gpu_control_context(config.device, request, state_dir) as gpu_report:
        result, outcomes = run_repeated(child_run_args(config, flags), runs, on_repeat=on_repeat)
    if result is None:
        first = outcomes[0]
        raise MeasurementFailed(
            f"every repeat failed (repeat 1 {first.point.status}: {first.point.error}); nothing written"
        )
    if gpu_report is not None:
        result["gpu_control"] = gpu_report
    commit()
    if output:
        save_result(output, result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    elif quiet:
        click.echo(
            quiet_line(result) + f" (the median-throughput run of {result['repeats']['ok']}/{runs} ok)"
        )
    else:
        render_run(result, make_console())
        render_ebpf(result, make_console())
        render_repeats(result, make_console())
        if output:
            click.echo(f"\nresult written to {output}")
    if result["status"] != "ok" or result["repeats"]["ok"] < runs:
        raise click.exceptions.Exit(ExitCode.FAILED)


def _run_under_torchrun(
    config: RunConfig,
    dist_env: Any,
    timeout_s: int,
    output: str | None,
    as_json: bool,
    trace_out: str | None,
    ebpf_trace: bool = False,
    ebpf_memory_trace: bool = False,
    ebpf_gpu_runtime: bool = False,
    bpftrace: str | None = None,
    gpu_runtime_views: tuple[str, ...] | None = None,
) -> None:
    """One rank of a torchrun job; rank 0 prints the table and alone writes -o/--trace-out.

    --ebpf-trace / --ebpf-memory-trace / --ebpf-gpu-runtime: local rank 0 of each node runs the
    node's one bpftrace for every local rank (distributed/node_tracer.py); each rank gets its own
    sections."""
    import json

    from aorta.hw_queue_eval.distributed.torchrun import format_rank_table, run_distributed
    from aorta.hw_queue_eval.report.ebpf_blocks import rank_ebpf_lines
    from aorta.hw_queue_eval.results.run_result import save_result

    lead = dist_env.rank == 0
    if lead and output:
        check_output_path(output)
    if lead and trace_out:
        check_output_path(trace_out, "trace file")
    if lead:
        click.echo(
            f"Running {config.workload} on {config.streams} streams on each of "
            f"{dist_env.world_size} ranks ({config.iterations} iterations + "
            f"{config.warmup} warm-up)…",
            err=True,
        )
    tracer = None
    if ebpf_trace or ebpf_memory_trace or ebpf_gpu_runtime:
        from aorta.hw_queue_eval.distributed.node_tracer import NodeTracer

        tracer = NodeTracer(
            dist_env,
            timeout_s,
            queue=ebpf_trace,
            memory=ebpf_memory_trace,
            gpu_runtime=ebpf_gpu_runtime,
            bpftrace=bpftrace,
            gpu_runtime_views=gpu_runtime_views,
        )
        if dist_env.local_rank == 0 and not tracer.ready.ok:
            click.echo(f"warning: eBPF tracing is off: {tracer.ready.reason}", err=True)
    combined = run_distributed(
        config, dist_env, timeout_s, tracer=tracer, benchmark=collaborators.current().benchmark_runner()
    )
    if combined is None:
        return  # not rank 0: rank 0 reports for everyone
    commit()
    if output:
        save_result(output, combined)
    if trace_out:
        from aorta.common.atomicio import atomic_write_bytes
        from aorta.hw_queue_eval.report.trace import trace_chunks

        atomic_write_bytes(trace_out, trace_chunks(combined))  # rank 0's ops
    if as_json:
        click.echo(json.dumps(combined, indent=2))
    else:
        for line in [*format_rank_table(combined), *rank_ebpf_lines(combined)]:
            click.echo(line)
        _echo_profile(combined)
        if output:
            click.echo(f"\nresult written to {output} (every rank's result under distributed.rank_results)")
    if combined["status"] != "ok":
        raise click.exceptions.Exit(ExitCode.FAILED)
