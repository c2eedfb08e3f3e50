"""`suite` (upstream's `run-priority`): the catalogue by priority, one resumable sweep per workload."""

from __future__ import annotations

from typing import Any

import click

from aorta.common.atomicio import OutputFolder, check_output_dir
from aorta.common.errors import ExitCode
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.commands import collaborators
from aorta.hw_queue_eval.commands._options import Progress, build_config, run_options, sweep_run_options
from aorta.hw_queue_eval.commands._output import hold_output_lock, saved_on_interrupt
from aorta.hw_queue_eval.commands.profiling import profile_flags, profile_options
from aorta.hw_queue_eval.config.run_config import parse_stream_list, parse_timeout
from aorta.hw_queue_eval.workloads.registry import PRIORITY_LEVELS, get_info, workloads_at_priority

#: upstream's default stream counts for run-priority
DEFAULT_SUITE_STREAMS = "1,2,4,8,16"


def register(group: click.Group) -> None:
    group.add_command(suite_command)
    group.add_command(suite_command, name="run-priority")  # upstream AORTA 0.3.0's name


@click.command("suite")
@click.argument("priority", metavar="|".join(PRIORITY_LEVELS))
@click.option(
    "-s", "--streams", default=DEFAULT_SUITE_STREAMS, show_default=True, help="Stream counts of every sweep."
)
@run_options
@click.option(
    "-o",
    "--output-dir",
    "output_dir",
    default="results",
    show_default=True,
    help="Folder for <workload>_sweep.json per workload and the combined index.html.",
)
@click.option("--resume", is_flag=True, help="Keep the points already done in the folder; run the rest.")
@click.option("--timeout", default=None, help="Seconds one point may run before it is stopped.")
@profile_options
def suite_command(
    priority: str,
    streams: str,
    iterations: str,
    warmup: str,
    device: str,
    size: str | None,
    sync_mode: str,
    seed: int,
    threads_per_queue: str,
    cpus: str | None,
    output_dir: str,
    resume: bool,
    timeout: str | None,
    profile: bool,
    profile_dir: str | None,
) -> None:
    """Sweep every workload of PRIORITY (P0 first … P3, or all) over the stream counts.

    Each workload gets its own sweep file (a child process per point, checkpointed, --resume);
    one HTML page in the folder shows them all. `list` shows each workload's level.
    """
    from aorta.hw_queue_eval.report.console import make_console
    from aorta.hw_queue_eval.report.html import suite_page, write_page
    from aorta.hw_queue_eval.report.tables import render_sweep
    from aorta.hw_queue_eval.sweeps.stream_sweep import analysis_of
    from aorta.hw_queue_eval.sweeps.suite import open_suite, plan_suite, run_suite

    names = workloads_at_priority(priority)
    counts = parse_stream_list(streams)
    config = build_config(  # the run options, checked once at a count the first workload takes
        names[0],
        str(get_info(names[0]).recommended_streams),
        iterations,
        warmup,
        device,
        size,
        sync_mode,
        seed,
        threads_per_queue,
        cpus,
    )
    flags = profile_flags(profile, profile_dir)
    folder = check_output_dir(output_dir, "results folder")
    entries = plan_suite(
        priority,
        counts,
        str(folder),
        sweep_run_options(config),
        flags,
        parse_timeout(timeout),
    )
    OutputFolder(folder, "results folder").close()  # made (safely) before the sweeps write into it
    for entry in entries:
        if entry.spec is not None:
            hold_output_lock(entry.spec.output, "sweep file")
    files = open_suite(entries, resume)  # a conflict in any sweep file stops here, before any work
    for file in files.values():
        for note in file.notes:
            click.echo(note, err=True)
    for entry in entries:
        if entry.skipped:
            click.echo(f"note: skipping {entry.workload}: {entry.skipped}", err=True)
    runnable = [e for e in entries if e.spec is not None]
    click.echo(
        f"Suite {priority}: {len(runnable)} workloads over {counts} streams ({config.iterations} "
        f"iterations + {config.warmup} warm-up per point, one child process each) → {folder}",
        err=True,
    )
    with Progress() as progress:

        def on_workload(entry: Any, done: int, total: int) -> None:
            progress.log(f"[{done}/{total}] {entry.workload} ({entry.priority}) → {entry.spec.output}")

        def on_point(n: int, point: JsonObject | None, done: int, total: int) -> None:
            if point is None:
                progress.log(f"  {n:>3} streams: already done (resumed)")
            elif point["status"] == "ok":
                tput = point["result"].get("throughput")
                progress.log(f"  {n:>3} streams: ok  {tput if tput is None else f'{tput:.4g}'}")
            else:
                progress.log(f"  {n:>3} streams: {point['status'].upper()}  {point.get('error')}")

        def save(state: str) -> None:
            for entry in runnable:
                file = files[entry.workload]
                if file.points:
                    file.save(state=state, analysis=analysis_of(file.points, entry.sweep.info.work_scaling))

        def message(state: str) -> str:
            return f"\n{state}: finished points kept in {folder}; continue with --resume"

        with saved_on_interrupt(save, message):
            run_suite(
                entries,
                files,
                on_workload,
                on_point,
                build_command=collaborators.current().point_command_builder(),
            )
    sweeps = []
    for entry in runnable:
        file = files[entry.workload]
        data = file.to_dict(
            state="complete", analysis=analysis_of(file.points, entry.sweep.info.work_scaling)
        )
        render_sweep(data, make_console())
        sweeps.append({**data, "priority": entry.priority})
    body, figures, notes = suite_page(
        priority, sweeps, [(e.workload, e.skipped) for e in entries if e.skipped]
    )
    from aorta import __version__

    write_page(body, figures, notes, folder, f"suite {priority}", __version__)
    click.echo(f"\nsweeps written to {folder}; open {folder / 'index.html'} in a browser")
    if any(p.get("status") != "ok" for s in sweeps for p in s["points"]):
        raise click.exceptions.Exit(ExitCode.FAILED)
