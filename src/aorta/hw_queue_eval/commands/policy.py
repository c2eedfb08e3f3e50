"""`policy-sweep` (each policy in a fresh child, checkpointed) and `restore` (after a crash)."""

from __future__ import annotations

from typing import Any

import click

from aorta.common.atomicio import check_output_path
from aorta.common.errors import AortaError, ExitCode, UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.commands import collaborators
from aorta.hw_queue_eval.commands._options import (
    build_config,
    gpu_control_options,
    gpu_request,
    passthrough_args,
    passthrough_run_options,
    run_options,
    state_dir_option,
)
from aorta.hw_queue_eval.commands._output import hold_output_lock, saved_on_interrupt
from aorta.hw_queue_eval.config.run_config import parse_positive_int, parse_timeout

#: Rounds of a policy sweep: each is one full run per policy, so more is a typo; checked before
#: the schedule (repeats × policies names) is built.
MAX_REPEATS = 10_000


def register(group: click.Group) -> None:
    group.add_command(policy_sweep_command)
    group.add_command(restore_command)


@click.command("policy-sweep")
@click.argument("workload")
@click.option("-s", "--streams", required=True, help="Number of streams, e.g. 16.")
@click.option(
    "--policies",
    default=None,
    help="Comma-separated policy names (default: baseline,priority_lc,priority_be; "
    "with --policy-file: baseline and every policy in the file).",
)
@click.option(
    "--policy-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file of extra policies (see docs/policies.md).",
)
@click.option(
    "--repeats",
    default="1",
    show_default=True,
    help="Run every policy N times, in a shuffled order each round, and aggregate.",
)
@click.option("--timeout", default=None, help="Seconds one point may run before it is stopped.")
@run_options
@gpu_control_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Checkpointed JSON (default: policy_sweep_WORKLOAD_sN.json).",
)
@click.option("--resume", is_flag=True, help="Reuse the ok points of an earlier -o file.")
@click.option(
    "--nproc-per-node",
    "nproc_per_node",
    default=None,
    metavar="N",
    help="Run every point under torchrun with N ranks on this node (docs/distributed.md).",
)
@passthrough_run_options  # run's --ebpf-trace, --state-dir …: given to every point
def policy_sweep_command(
    workload: str,
    streams: str,
    policies: str | None,
    policy_file: str | None,
    repeats: str,
    timeout: str | None,
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
    nproc_per_node: str | None = None,
    **passthrough: Any,
) -> None:
    """Run WORKLOAD under each queue policy and compare them against baseline."""
    import dataclasses

    from aorta.hw_queue_eval.backends import resolve_device
    from aorta.hw_queue_eval.gpu.control import CPU_NOT_APPLICABLE, recover_stale_states
    from aorta.hw_queue_eval.gpu.policies import resolve_policies
    from aorta.hw_queue_eval.report.console import make_console
    from aorta.hw_queue_eval.report.policy_table import render_policy_table
    from aorta.hw_queue_eval.sweeps.policy_sweep import (
        PolicySweepSpec,
        open_checkpoint,
        preflight,
        run_policy_sweep,
    )

    config = build_config(
        workload, streams, iterations, warmup, device, size, sync_mode, seed, threads_per_queue, cpus
    )
    chosen = resolve_policies(policies, policy_file)
    for policy in chosen:  # stream numbers checked against --streams before anything runs
        if policy.stream_priority:
            from aorta.hw_queue_eval.backends.priority import parse_spec

            parse_spec(policy.stream_priority, config.streams, f"policy {policy.name}: stream_priority")
    rounds = parse_positive_int(repeats, "--repeats")
    if rounds > MAX_REPEATS:
        raise UsageError(
            f"--repeats {rounds} is more than {MAX_REPEATS} rounds (each runs every policy once): use fewer"
        )
    timeout_s = parse_timeout(timeout)
    nproc = None if nproc_per_node is None else parse_positive_int(nproc_per_node, "--nproc-per-node")
    if nproc is not None:
        from aorta.hw_queue_eval.sweeps.childrun import check_torchrun_host

        check_torchrun_host()
    flags = passthrough_args(passthrough)  # --state-dir too: each point's run reads state files
    state_dir = passthrough.get("state_dir")
    base = gpu_request(lock_clocks, power_limit, config.device)
    output = output or f"policy_sweep_{config.workload}_s{config.streams}.json"
    check_output_path(output, "policy-sweep file")
    hold_output_lock(output, "policy-sweep file")

    config = dataclasses.replace(config, device=resolve_device(config.device))
    gpus = collaborators.current().gpu_locator()
    target = gpus.target_for(config.device)
    if target is None and not base.empty:
        raise UsageError(f"--lock-clocks/--power-limit: {CPU_NOT_APPLICABLE}")
    spec = PolicySweepSpec(
        policies=chosen,
        config=config,
        base=base,
        target=target,
        repeats=rounds,
        output=output,
        timeout_s=timeout_s,
        flags=flags,
        nproc_per_node=nproc,
        open_driver=gpus.driver_for,
        state_dir=state_dir,
    )
    recover_stale_states(echo=lambda m: click.echo(m, err=True), state_dir=state_dir)
    preflight(spec)  # tools present, device readable, watts in range: before any run
    file = open_checkpoint(spec, resume)
    for note in file.notes:
        click.echo(note, err=True)

    def on_start(name: str, repeat: int, done: int, total: int) -> None:
        click.echo(f"[{done}/{total}] {name} (repeat {repeat})…", err=True)

    def on_point(name: str, repeat: int, point: JsonObject | None, done: int, total: int) -> None:
        if point is None:
            click.echo(f"[{done}/{total}] {name} (repeat {repeat}): kept from {output}", err=True)
        elif point["status"] != "ok":
            click.echo(f"  {point['status']}: {point['error']}", err=True)

    def message(state: str) -> str:
        return f"\n{state}: {len(file.points)} point(s) saved in {output}; --resume continues"

    with saved_on_interrupt(lambda state: file.save(state=state), message):
        summary = run_policy_sweep(spec, file, on_point, on_start)
    render_policy_table(file.to_dict(state="complete", summary=summary), make_console())
    click.echo(f"\nresults written to {output}")
    if any(p.get("status") not in ("ok", "not_applicable") for p in file.points):
        raise click.exceptions.Exit(ExitCode.FAILED)


@click.command("restore")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Also write what was restored, skipped or failed as JSON here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print that JSON instead of text.")
@state_dir_option
def restore_command(output: str | None, as_json: bool, state_dir: str | None = None) -> None:
    """Put GPU clocks/power back from state files left by a process that was killed hard."""
    from aorta.common.atomicio import check_output_path
    from aorta.hw_queue_eval.commands._output import save_and_print_json
    from aorta.hw_queue_eval.gpu import state as gpu_state
    from aorta.hw_queue_eval.gpu.control import restore_from_file

    if output:
        check_output_path(output)
    outcomes: list[dict[str, str]] = []
    for path in gpu_state.list_state_files(state_dir):
        try:
            record = gpu_state.read_state(path)
            if gpu_state.owner_alive(record):
                outcomes.append(
                    {
                        "state_file": str(path),
                        "status": "skipped",
                        "message": f"pid {record.get('pid')} is still running and will "
                        "restore the device itself when it ends",
                    }
                )
                continue
            outcomes.append(
                {"state_file": str(path), "status": "restored", "message": restore_from_file(path, state_dir)}
            )
        except AortaError as exc:  # the state file stays: its device may still be changed
            outcomes.append({"state_file": str(path), "status": "error", "message": str(exc)})
    data = {"kind": "restore", "state_dir": str(gpu_state.state_dir(state_dir)), "outcomes": outcomes}
    if not save_and_print_json(data, output, as_json):
        if not outcomes:
            click.echo(f"nothing to restore: no state files in {data['state_dir']}")
        for item in outcomes:
            if item["status"] == "error":
                click.echo(f"error: {item['state_file']}: {item['message']}", err=True)
            elif item["status"] == "skipped":
                click.echo(f"skipped {item['state_file']}: {item['message']}")
            else:
                click.echo(item["message"])
    if any(item["status"] == "error" for item in outcomes):
        raise click.exceptions.Exit(ExitCode.DEVICE_LEFT_CHANGED)
