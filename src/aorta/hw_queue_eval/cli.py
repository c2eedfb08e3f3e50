"""Command line: parse, validate, call, render. No measurement logic, no torch import at start-up.

Each command lives in `commands/` (one module per command family); this module only builds the
group and maps errors to exit codes (aorta.common.errors.ExitCode, docs/troubleshooting.md): an
AortaError → one line and its code (2 bad input, 3 a GPU may be left changed, 1 nothing measured);
click usage errors → one line, exit 2; Ctrl+C → exit 130; SIGTERM → exit 143; nothing
half-written in any case; a signal once the command has ended changes nothing (common/interrupts.py).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from aorta import __version__
from aorta.common.controls import visible_streams
from aorta.common.errors import AortaError, ExitCode, Terminated
from aorta.common.interrupts import INTERRUPTED_LINE, catch_terminate, commit
from aorta.hw_queue_eval.commands.collaborators import Collaborators

COMMAND_MODULES = (
    "aorta.hw_queue_eval.commands.catalog",
    "aorta.hw_queue_eval.commands.run",
    "aorta.hw_queue_eval.commands.sweep",
    "aorta.hw_queue_eval.commands.compare",
    "aorta.hw_queue_eval.commands.report",
    "aorta.hw_queue_eval.commands.policy",
    "aorta.hw_queue_eval.commands.ebpf",
    "aorta.hw_queue_eval.commands.suite",
    "aorta.hw_queue_eval.commands.profiling",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(
    __version__, "--version", prog_name="aorta.hw_queue_eval", message="%(prog)s %(version)s"
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Measure how GPU hardware queues behave as work spreads over 1..N streams.

    Backends: the GPU (torch.cuda: ROCm HIP or CUDA) when torch sees one, else the CPU backend
    (threaded streams over a pool of worker "hardware queues"). Kernel-level tracing with eBPF.
    """
    if ctx.invoked_subcommand in USES_LIBRARY_CACHES:
        from aorta.common.caches import use_private_caches

        use_private_caches()


#: commands that load torch or matplotlib, or start processes that do: private caches first (caches.py)
USES_LIBRARY_CACHES = frozenset(
    {"run", "sweep", "policy-sweep", "info", "report", "suite", "run-priority", "profile"}
)


def _register_commands() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(cli)


#: Options (and arguments) whose empty value would silently mean "the default" (or the current
#: folder), or fail deep inside (`report ''`).
NON_EMPTY_OPTIONS = (
    "output",
    "output_dir",
    "trace_out",
    "device",
    "policy_file",
    "baseline",
    "base",
    "tests",
    "pid",
    "duration",
    "policies",
    "result_file",
    "workload",
    "profile_dir",
)


def _non_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Refuse `-o ''`, `-d ''`, `--trace-out ''` …: an empty string is never a usable value."""
    values = value if isinstance(value, tuple) else (value,)
    if any(isinstance(v, str) and not v.strip() for v in values):
        if isinstance(param, click.Argument):
            raise click.BadParameter("is empty: give a value", ctx, param)
        raise click.BadParameter("is empty: give a value or leave the option out", ctx, param)
    return value


def _guard_empty_values() -> None:
    for command in cli.commands.values():
        for param in command.params:
            if param.name in NON_EMPTY_OPTIONS and param.callback is None:  # options and arguments
                param.callback = _non_empty


_register_commands()
_guard_empty_values()


def main(argv: list[str] | None = None, collaborators: Collaborators | None = None) -> None:
    """Entry point: run the click group and turn every failure into a clear exit code.

    `collaborators` replaces what the commands talk to (a GPU, a sweep point's child, the
    benchmark); None is production's own (commands/collaborators.py). However the command ends,
    SIGINT/SIGTERM are ignored from then on (`interrupts.commit`): a second Ctrl+C while the
    first one's line is printed, or one during the interpreter's shutdown, cannot change the
    exit code or print a traceback.
    """
    catch_terminate()
    try:
        with visible_streams():  # no control character from a file or a child reaches the terminal
            code = _run_command(argv, collaborators)
    except KeyboardInterrupt:  # a second Ctrl+C while the first one's ending was printed
        code = ExitCode.INTERRUPTED
    except Terminated:
        code = ExitCode.TERMINATED
    finally:
        commit()
    sys.exit(code)


def _run_command(argv: list[str] | None, collaborators: Collaborators | None) -> int | str | None:
    """The command's exit code (or SystemExit's argument), every failure mapped to its code."""
    try:
        # standalone_mode=False returns the code of a `click.exceptions.Exit` instead of exiting
        code = cli.main(
            args=argv,
            prog_name="python -m aorta.hw_queue_eval",
            standalone_mode=False,
            obj=collaborators or Collaborators(),
        )
    except AortaError as exc:
        commit()
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except click.UsageError as exc:
        commit()
        if type(exc).__name__.startswith("NoArgsIsHelp"):  # click ≥ 8.2: bare command → help
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            return ExitCode.OK
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        return ExitCode.USAGE
    except click.ClickException as exc:
        commit()
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except (KeyboardInterrupt, click.exceptions.Abort):
        commit()
        click.echo(f"\n{INTERRUPTED_LINE}", err=True)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except RuntimeError as exc:
        if "can't start new thread" not in str(exc):
            raise
        commit()
        click.echo(
            "error: cannot start another thread (the process or memory limit is reached): "
            "use fewer --streams or --threads-per-queue, or raise the limit (ulimit -u; "
            "containers: --ulimit nproc=N / --pids-limit)",
            err=True,
        )
        return ExitCode.USAGE
    except SystemExit as exc:
        return exc.code
    return code if isinstance(code, int) else 0
