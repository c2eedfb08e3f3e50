"""`list` and `info`: what can run here. Neither imports torch."""

from __future__ import annotations

import os

import click

from aorta import __version__
from aorta.common.atomicio import atomic_write_json, check_output_path
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.commands._output import save_and_print_json
from aorta.hw_queue_eval.config.run_config import env_knobs, hw_queue_pool_size, parse_positive_int
from aorta.hw_queue_eval.gpu.devnodes import gpu_devices_seen_by_kernel
from aorta.hw_queue_eval.workloads.registry import (
    CATEGORIES,
    SENSITIVITIES,
    get_workload_class,
    list_workloads,
    priority_of,
)


def register(group: click.Group) -> None:
    group.add_command(list_command)
    group.add_command(info_command)


@click.command("list")
@click.option("-c", "--category", type=click.Choice(CATEGORIES), help="Only this category.")
@click.option(
    "--sensitivity", type=click.Choice(SENSITIVITIES), help="Only workloads with this switch sensitivity."
)
@click.option(
    "-v", "--verbose", is_flag=True, help="Show what each workload models and which stream plays which role."
)
@click.option(
    "-s",
    "--streams",
    "streams",
    default=None,
    help="With -v: show stream roles at this count (default: each one's recommended).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write JSON here.")
def list_command(
    category: str | None, sensitivity: str | None, verbose: bool, streams: str | None, output: str | None
) -> None:
    """List workloads by category: stream limits, throughput unit, run-priority level (P0..P3)."""
    if output:
        check_output_path(output)
    count = None if streams is None else parse_positive_int(streams, "--streams")
    infos = list_workloads(category, sensitivity)
    current = None
    for info in infos:
        if info.category != current:
            current = info.category
            click.echo(f"\n{current}:")
        click.echo(
            f"  {info.name:<22} streams {info.min_streams}-{info.max_streams} "
            f"(rec. {info.recommended_streams:>2})  switch {info.switch_sensitivity:<8} "
            f"{info.throughput_unit:<12} {priority_of(info.name) or '-'}"
        )
        if verbose:
            for line in verbose_lines(info.name, count):
                click.echo(f"      {line}")
    if output:
        atomic_write_json(
            output,
            {
                "kind": "workload_list",
                "workloads": [
                    {
                        **info.__dict__,
                        "priority": priority_of(info.name),
                        "models": get_workload_class(info.name).MODELS,
                    }
                    for info in infos
                ],
            },
        )


def format_streams(indices: list[int]) -> str:
    """[0, 1, 2, 5] → '0-2, 5' (compact, for role lines)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def verbose_lines(name: str, streams: int | None) -> list[str]:
    """What `name` models and its stream roles at `streams` (its recommended count if None or
    outside its range), wrapped for `list -v`."""
    import textwrap

    cls = get_workload_class(name)
    info = cls.INFO
    count = (
        streams
        if streams is not None and info.min_streams <= streams <= info.max_streams
        else info.recommended_streams
    )
    roles = "; ".join(
        f"{role}: {format_streams(idx)}" for role, idx in cls.stream_roles(count).items() if idx
    )
    note = "" if streams is None or count == streams else f" ({streams} is outside its range)"
    text = (cls.MODELS or info.description) + f" Work per iteration: {info.work_scaling}."
    return [*textwrap.wrap(text, 90), f"at {count} streams{note}: {roles}"]


def _package_version(name: str) -> str | None:
    """An installed package's version without importing it (torch takes seconds); `info` only:
    importlib.metadata itself costs ~25 ms here, so nothing on the other commands' path uses it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _which(program: str) -> str | None:
    """shutil.which, imported here: shutil is not needed by `list` or `--help`."""
    import shutil

    return shutil.which(program)


def tracing_readiness() -> JsonObject:
    """Short tracing summary for `info` (details: `ebpf-info`)."""
    from aorta.ebpf.capabilities import readiness_summary

    return readiness_summary()


def collect_info() -> JsonObject:
    torch_version = _package_version("torch")
    gpus = gpu_devices_seen_by_kernel()
    has_gpu = gpus["amd_kfd"] or bool(gpus["nvidia_devices"])
    cpu_build = torch_version is not None and "+cpu" in torch_version
    if has_gpu and not cpu_build:
        backend = "gpu (if torch sees the device at run time), else cpu"
    else:
        backend = "cpu"
    return {
        "aorta": __version__,
        "python": ".".join(map(str, __import__("sys").version_info[:3])),
        "torch": torch_version,
        "numpy": _package_version("numpy"),
        "kernel": os.uname().release,
        "gpus_seen_by_kernel": gpus,
        "default_backend": backend,
        "queue_pool_size": hw_queue_pool_size(),
        "env_knobs": env_knobs(),
        "cpu_count": os.cpu_count(),
        "bpftrace": _which("bpftrace"),
        "tracing": tracing_readiness(),
    }


@click.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write JSON here.")
def info_command(as_json: bool, output: str | None) -> None:
    """Versions, devices, the backend `run` would use, queue knobs, tracing readiness."""
    if output:
        check_output_path(output)
    data = collect_info()
    if save_and_print_json(data, output, as_json):
        return
    click.echo(
        f"aorta {data['aorta']}  python {data['python']}  torch {data['torch']}  numpy {data['numpy']}"
    )
    click.echo(f"kernel {data['kernel']}, {data['cpu_count']} CPUs")
    gpus = data["gpus_seen_by_kernel"]
    click.echo(
        f"GPUs seen by the kernel: AMD KFD {'yes' if gpus['amd_kfd'] else 'no'} "
        f"{gpus['amd_gpu_nodes'] or ''}; NVIDIA {gpus['nvidia_devices'] or 'none'}"
    )
    click.echo(f"default backend: {data['default_backend']}")
    click.echo(f"hardware-queue pool: {data['queue_pool_size']} (GPU_MAX_HW_QUEUES)")
    click.echo(
        "queue env knobs: "
        + ", ".join(f"{k}={v if v is not None else '(unset)'}" for k, v in data["env_knobs"].items())
    )
    tracing = data["tracing"]
    click.echo(f"tracing: {tracing['verdict']}")
    for line in tracing.get("details", []):
        click.echo(f"  {line}")
