"""`sweep`: one workload over a list of stream counts, crash-proof and resumable; no torch here."""

from __future__ import annotations

import os
from typing import Any

import click

from aorta.common.atomicio import check_output_path
from aorta.common.errors import ExitCode, UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.commands import collaborators
from aorta.hw_queue_eval.commands._options import (
    Progress,
    build_config,
    gpu_control_context,
    gpu_control_options,
    gpu_request,
    passthrough_args,
    passthrough_run_options,
    run_options,
    sweep_run_options,
)
from aorta.hw_queue_eval.commands._output import hold_output_lock, saved_on_interrupt
from aorta.hw_queue_eval.config.run_config import parse_positive_int, parse_stream_list, parse_timeout


def register(group: click.Group) -> None:
    group.add_command(sweep_command)


def _describe(point: JsonObject, unit: str) -> str:
    streams = point["key"]["streams"]
    if "repeat" in point["key"]:
        streams = f"{streams} (repeat {point['key']['repeat']})"
    if point["status"] == "ok":
        tput = point["result"].get("throughput")
        return (
            f"  {streams:>3} streams: ok  {tput:.2f} {unit}  ({point['duration_s']:.1f} s)"
            if tput is not None
            else f"  {streams:>3} streams: ok"
        )
    return f"  {streams:>3} streams: {point['status'].upper()}  {point.get('error')}"


@click.command("sweep")
@click.argument("workload")
@click.option("-s", "--streams", required=True, help="Stream counts, e.g. 1,2,4,8,16,32.")
@run_options
@gpu_control_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Sweep file, rewritten after every point [default: <workload>_sweep.json].",
)
@click.option("--resume", is_flag=True, help="Keep the points already done in -o; run the rest.")
@click.option("--timeout", default=None, help="Seconds one point may run before it is stopped.")
@click.option(
    "--trace-out",
    default=None,
    help="Perfetto trace per point: a folder, or a prefix (PREFIX-s<N>.trace.json).",
)
@click.option(
    "--repeats",
    default="1",
    show_default=True,
    help="Run every stream count N times (fresh process each, rounds shuffled); the "
    "knee and peak then come from medians with CIs. 1 = one run per point: the "
    "verdict's confidence is 'unknown'.",
)
@click.option(
    "--nproc-per-node",
    "nproc_per_node",
    default=None,
    metavar="N",
    help="Run every point under torchrun with N ranks on this node "
    "(docs/distributed.md); the point keeps every rank's result.",
)
@passthrough_run_options  # run's --ebpf-trace, --state-dir …: given to every point
def sweep_command(
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
    resume: bool,
    timeout: str | None,
    trace_out: str | None,
    repeats: str = "1",
    nproc_per_node: str | None = None,
    **passthrough: Any,
) -> None:
    """Run WORKLOAD at each stream count in its own process; checkpoint after every point."""
    from aorta.hw_queue_eval.report.console import make_console
    from aorta.hw_queue_eval.report.tables import render_sweep
    from aorta.hw_queue_eval.sweeps.stream_sweep import (
        SweepSpec,
        analysis_of,
        open_checkpoint,
        plan_stream_counts,
        run_sweep,
        trace_path_for,
    )
    from aorta.hw_queue_eval.workloads.registry import get_info

    info = get_info(workload)
    counts, dropped = plan_stream_counts(info, parse_stream_list(streams))
    config = build_config(
        workload, str(counts[0]), iterations, warmup, device, size, sync_mode, seed, threads_per_queue, cpus
    )
    request = gpu_request(lock_clocks, power_limit, config.device)
    output = output or f"{workload}_sweep.json"
    check_output_path(output, "sweep file")
    hold_output_lock(output, "sweep file")
    flags = passthrough_args(passthrough)  # --state-dir too: each point's run reads state files
    # children run in their own private folder: a relative --trace-out means the caller's folder
    trace_out = os.path.join(os.getcwd(), trace_out) if trace_out else None
    spec = SweepSpec(
        workload=workload,
        info=info,
        stream_counts=counts,
        dropped=dropped,
        run_options=sweep_run_options(config),
        output=output,
        timeout_s=parse_timeout(timeout),
        trace_out=trace_out,
        flags=flags,
        repeats=parse_positive_int(repeats, "--repeats"),
        nproc_per_node=None
        if nproc_per_node is None
        else parse_positive_int(nproc_per_node, "--nproc-per-node"),
    )
    if spec.nproc_per_node is not None:
        from aorta.hw_queue_eval.sweeps.childrun import check_torchrun_host

        check_torchrun_host()
    if trace_out and spec.repeats > 1:
        raise UsageError("--trace-out writes one trace per stream count: use it without --repeats")
    if trace_out:
        check_output_path(trace_path_for(trace_out, workload, counts[0]) or "", "trace file")
    file = open_checkpoint(spec, resume)
    for note in file.notes:
        click.echo(note, err=True)
    if dropped:
        click.echo(
            f"note: dropped stream counts {dropped}: {workload} runs on "
            f"{info.min_streams}..{info.max_streams} streams",
            err=True,
        )
    runs = f", {spec.repeats} repeats in shuffled rounds" if spec.repeats > 1 else ""
    click.echo(
        f"Sweeping {workload} over {counts} streams ({config.iterations} iterations + "
        f"{config.warmup} warm-up each, one child process per point{runs}) → {output}",
        err=True,
    )
    # clocks/power held for the whole sweep by this process, restored on every exit path
    state_dir = passthrough.get("state_dir")
    with gpu_control_context(config.device, request, state_dir) as gpu_report, Progress() as progress:
        if gpu_report is not None:
            file.header["gpu_control"] = gpu_report  # the same dict ends as "restored"

        def on_point(n: int, point: JsonObject | None, done: int, total: int) -> None:
            progress.log(
                f"  {n:>3} streams: already done (resumed)"
                if point is None
                else _describe(point, info.throughput_unit)
            )
            progress("sweep", done, total)

        def save(state: str) -> None:
            file.save(state=state, analysis=analysis_of(file.points, info.work_scaling))

        def message(state: str) -> str:
            finished = sum(1 for p in file.points if p.get("status") == "ok")
            return f"\n{state}: {finished} finished points kept in {output}; continue with --resume"

        with saved_on_interrupt(save, message):
            run_sweep(spec, file, on_point, build_command=collaborators.current().point_command_builder())
    analysis = analysis_of(file.points, info.work_scaling)
    if gpu_report is not None:
        file.save(state="complete", analysis=analysis)  # records the GPU restore
    data = file.to_dict(state="complete", analysis=analysis)
    render_sweep(data, make_console())
    click.echo(f"\nsweep written to {output}")
    if any(p.get("status") != "ok" for p in data["points"]):
        raise click.exceptions.Exit(ExitCode.FAILED)
