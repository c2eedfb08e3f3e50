"""Profilers: `run --profile/--profile-dir` (torch.profiler) options, and `profile` (rocprofv3,
rocprof or nsys around one `run`, argv only, no shell)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import click

from aorta.common.atomicio import OutputFolder, check_output_dir
from aorta.common.errors import ExitCode, UsageError
from aorta.hw_queue_eval.config.run_config import parse_positive_int

#: external profilers `profile` can drive, in the order it prefers them
PROFILERS = ("rocprofv3", "rocprof", "nsys")
DEFAULT_PROFILE_DIR = "profiles"  # upstream's default


def register(group: click.Group) -> None:
    group.add_command(profile_command)


def profile_options(func: Any) -> Any:
    """--profile/-p and --profile-dir of run and suite (upstream AORTA 0.3.0's names)."""
    func = click.option(
        "--profile-dir",
        "profile_dir",
        default=None,
        metavar="DIR",
        help=f"Folder for the --profile traces [default: {DEFAULT_PROFILE_DIR}].",
    )(func)
    return click.option(
        "-p",
        "--profile",
        is_flag=True,
        help="Also run the iterations once more under torch.profiler, after the measured window "
        "(the figures are not measured under it): a Chrome trace (*.pt.trace.json, for "
        "TensorBoard / Holistic Trace Analysis) in --profile-dir and a PROFILER OUTPUT block.",
    )(func)


def profile_folder(profile: bool, profile_dir: str | None) -> str | None:
    """The checked --profile folder, or None without --profile (UsageError for a lone --profile-dir)."""
    if not profile:
        if profile_dir is not None:
            raise UsageError("--profile-dir needs --profile: add --profile, or drop --profile-dir")
        return None
    return str(check_output_dir(profile_dir or DEFAULT_PROFILE_DIR, "profile folder"))


def profile_flags(profile: bool, profile_dir: str | None) -> list[str]:
    """The `run` flags that give a sweep point the same profiling (empty without --profile)."""
    folder = profile_folder(profile, profile_dir)
    return [] if folder is None else ["--profile", "--profile-dir", os.path.abspath(folder)]


def profiler_argv(tool: str, path: str, out_dir: str, name: str, command: list[str]) -> list[str]:
    """The profiler's argv around `command` (the tool at `path`, its files in `out_dir`)."""
    if tool == "rocprofv3":
        return [
            path,
            "--kernel-trace",
            "--hip-trace",
            "--output-format",
            "csv",
            "pftrace",
            "-d",
            out_dir,
            "-o",
            name,
            "--",
            *command,
        ]
    if tool == "rocprof":
        return [path, "--hip-trace", "-d", out_dir, "-o", os.path.join(out_dir, f"{name}.csv"), *command]
    return [
        path,
        "profile",
        "-t",
        "cuda,nvtx,osrt",
        "-o",
        os.path.join(out_dir, name),
        "--force-overwrite",
        "true",
        *command,
    ]


def find_profiler(wanted: str) -> tuple[str, str]:
    """(tool, path) of the external profiler to use; UsageError naming what to install."""
    tools = PROFILERS if wanted == "auto" else (wanted,)
    for tool in tools:
        path = shutil.which(tool)
        if path:
            return tool, path
    if wanted == "auto":
        raise UsageError(
            "profile needs rocprofv3 or rocprof (ROCm: install rocprofiler-sdk) or nsys (CUDA: "
            "install Nsight Systems) on PATH; for a torch.profiler trace use `run --profile`"
        )
    raise UsageError(f"--tool {wanted}: not found on PATH: install it, or use --tool auto")


@click.command("profile")
@click.argument("workload")
@click.option("-s", "--streams", default="8", show_default=True, help="Number of streams.")
@click.option("-i", "--iterations", default="20", show_default=True, help="Measured iterations.")
@click.option("-d", "--device", default="auto", show_default=True, help="As for run.")
@click.option(
    "-o",
    "--output",
    "output_dir",
    default="profiles",
    show_default=True,
    help="Folder for the profiler's files.",
)
@click.option(
    "--tool",
    type=click.Choice(["auto", *PROFILERS]),
    default="auto",
    show_default=True,
    help="Which profiler: auto takes the first found of rocprofv3, rocprof, nsys.",
)
def profile_command(
    workload: str, streams: str, iterations: str, device: str, output_dir: str, tool: str
) -> None:
    """Run WORKLOAD once under rocprofv3 / rocprof (ROCm) or nsys (CUDA); its traces go to -o."""
    from aorta.common.procs import child_environment, python_module_command
    from aorta.hw_queue_eval.workloads.registry import get_info

    info = get_info(workload)
    count = parse_positive_int(streams, "--streams")
    info.check_streams(count)
    runs = parse_positive_int(iterations, "--iterations")
    found, path = find_profiler(tool)
    folder = check_output_dir(output_dir, "profile folder")
    OutputFolder(folder, "profile folder").close()
    name = f"{workload}_{count}s"
    run = python_module_command(
        "aorta.hw_queue_eval", "run", workload, "--streams", str(count), "-i", str(runs), "-d", device
    )
    argv = profiler_argv(found, path, os.path.abspath(folder), name, run)
    click.echo(f"Profiling {workload} on {count} streams with {found} → {folder}", err=True)
    code = subprocess.run(argv, env=child_environment(), check=False).returncode
    if code != 0:
        click.echo(f"error: {found} exited with status {code}", err=True)
        raise click.exceptions.Exit(ExitCode.FAILED)
    click.echo(f"\n{found} files written to {folder} (name {name})")
