"""Shared by the run-like commands (not a command itself): their options and what they build.

`run`, `sweep` and `policy-sweep` take the same run options, GPU-control options and eBPF flags,
validated the same way (no torch here); the run options a sweep hands to every point are declared
once (`run_flag_options`, `PASSTHROUGH_FLAGS`, `passthrough_run_options`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.config.run_config import (
    DEFAULT_ITERATIONS,
    DEFAULT_SEED,
    DEFAULT_WARMUP,
    SIZES,
    SYNC_MODE_ALIASES,
    SYNC_MODES,
    RunConfig,
    check_device,
    check_seed,
    check_threads_per_queue,
    parse_positive_int,
)
from aorta.hw_queue_eval.run.cpupin import parse_cpu_list
from aorta.hw_queue_eval.workloads.registry import get_info

if TYPE_CHECKING:
    from aorta.hw_queue_eval.gpu.control import GpuRequest

#: `run` options a sweep passes through to every point: `sweep` and `policy-sweep` declare them
#: with `passthrough_run_options`, as `run` declares them (each must be one of `run_flag_options`).
PASSTHROUGH_FLAGS = (
    "ebpf_trace",
    "ebpf_memory_trace",
    "ebpf_gpu_runtime",
    "ebpf_gpu_runtime_views",
    "bpftrace",
    "state_dir",
)


def passthrough_args(values: Mapping[str, object]) -> list[str]:
    """A child `run`'s arguments for the passed-through options: an on flag as itself, a given
    value (--bpftrace PATH, --state-dir DIR) as the option and its value; off flags and unset
    values are left out."""
    args: list[str] = []
    for name, value in values.items():
        flag = f"--{name.replace('_', '-')}"
        if value is True:
            args.append(flag)
        elif isinstance(value, str):
            args += [flag, value]
    return args


def build_config(
    workload: str,
    streams: str,
    iterations: str,
    warmup: str,
    device: str,
    size: str | None,
    sync_mode: str,
    seed: int,
    threads_per_queue: str,
    cpus: str | None = None,
) -> RunConfig:
    """Validate the run options (no torch) into a RunConfig; UsageError names the bad option."""
    info = get_info(workload)
    stream_count = parse_positive_int(streams, "--streams")
    info.check_streams(stream_count)
    if size is not None and size not in SIZES:
        raise UsageError(f"unknown --size {size!r}: use one of {', '.join(SIZES)}")
    sync_mode = SYNC_MODE_ALIASES.get(sync_mode, sync_mode)
    if sync_mode not in SYNC_MODES:
        names = ", ".join((*SYNC_MODES, *SYNC_MODE_ALIASES))
        raise UsageError(f"unknown --sync-mode {sync_mode!r}: use one of {names}")
    return RunConfig(
        workload=workload,
        streams=stream_count,
        iterations=parse_positive_int(iterations, "--iterations"),
        warmup=parse_positive_int(warmup, "--warmup", zero_ok=True),
        device=check_device(device),
        size=size,
        sync_mode=sync_mode,
        seed=check_seed(seed),
        threads_per_queue=check_threads_per_queue(
            parse_positive_int(threads_per_queue, "--threads-per-queue")
        ),
        cpus=parse_cpu_list(cpus),
    )


class Progress:
    """A rich progress bar on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._tasks: dict[str, int] = {}  # phase → rich's TaskID (an int)
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            from aorta.hw_queue_eval.report.console import make_console

            self._bar = Progress(
                TextColumn("{task.description:<14}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeRemainingColumn(),
                console=make_console(stderr=True),
                transient=True,
                refresh_per_second=2,
            )
            # the bar redraws from its own thread, holding the GIL ~0.7 ms a time on this
            # 2-core machine: 2 Hz instead of rich's 10 keeps that under 0.2 % of a window

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def log(self, message: str) -> None:
        """A line on stderr above the bar (plain click output when there is no bar)."""
        if self._bar is None:
            click.echo(message, err=True)
        else:
            self._bar.console.print(message, markup=False, highlight=False)

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self._bar is None:
            return
        if phase not in self._tasks:
            self._tasks[phase] = self._bar.add_task(phase, total=total)
        self._bar.update(self._tasks[phase], completed=done)


def run_options(func: Any) -> Any:
    """Options shared by run-like commands (run; sweep and policy-sweep reuse them)."""
    options = [
        click.option(
            "-i",
            "--iterations",
            default=str(DEFAULT_ITERATIONS),
            show_default=True,
            help="Measured iterations.",
        ),
        click.option(
            "-w",
            "--warmup",
            default=str(DEFAULT_WARMUP),
            show_default=True,
            help="Warm-up iterations (not measured). 0: the window starts cold and verification "
            "checks the last measured iteration's outputs, after the window.",
        ),
        click.option(
            "-d",
            "--device",
            default="auto",
            show_default=True,
            help="auto (GPU if torch sees one, else CPU), cpu, cuda or cuda:N.",
        ),
        click.option(
            "--size",
            default=None,
            help="Size preset: small, medium or large (default: small on CPU, large on GPU).",
        ),
        click.option(
            "--sync-mode",
            default="per_iteration",
            show_default=True,
            help="per_iteration: one host wait per iteration (latency samples); "
            "end_only: one wait at the end (window time only); none: upstream AORTA's name "
            "for end_only (recorded as end_only).",
        ),
        click.option(
            "--seed",
            default=DEFAULT_SEED,
            show_default=True,
            type=int,
            help="Seed for the workload's inputs.",
        ),
        click.option(
            "--threads-per-queue",
            default="1",
            show_default=True,
            help="CPU backend: intra-op threads per worker queue.",
        ),
        click.option(
            "--cpus",
            default=None,
            metavar="LIST",
            help="Pin the host thread and the queue workers to these CPUs (e.g. 0,1 or 0-3): "
            "thread k of [host, queue 0, queue 1, …] on the k-th CPU, round-robin. Recorded as "
            "environment.cpus_pinned. Default: no pinning.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def gpu_control_options(func: Any) -> Any:
    """--lock-clocks / --power-limit for commands that run measurements (run, policy-sweep)."""
    options = [
        click.option(
            "--lock-clocks",
            "lock_clocks",
            default=None,
            metavar="LEVEL",
            help="Lock the target GPU's clocks at LEVEL 0 (lowest) … 7 (highest) for the "
            "run; the prior state is restored afterwards (needs root).",
        ),
        click.option(
            "--power-limit",
            "power_limit",
            default=None,
            metavar="WATTS",
            help="Cap the target GPU's power at WATTS for the run; the prior cap is "
            "restored afterwards (needs root).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _state_dir_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--state-dir DIR checked when the command line is read (exit 2, one line, before any work)."""
    if value is None:
        return None
    from aorta.hw_queue_eval.gpu.state import check_state_dir

    return check_state_dir(value)


def state_dir_option(func: Any) -> Any:
    """--state-dir DIR: where GPU clock/power state files are kept (run, restore; sweep and
    policy-sweep through passthrough_run_options, and pass it to every point)."""
    return click.option(
        "--state-dir",
        "state_dir",
        default=None,
        metavar="DIR",
        callback=_state_dir_value,
        help="Keep the GPU clock/power state files (what `restore` puts back) in DIR [default: "
        "/var/lib/aorta as root, else $XDG_STATE_HOME/aorta or ~/.local/state/aorta]. As root DIR "
        "and the folders above it must be ones only root can change.",
    )(func)


def gpu_request(lock_clocks: str | None, power_limit: str | None, device: str) -> GpuRequest:
    """Validate --lock-clocks/--power-limit (no torch, nothing touched); UsageError when `device`
    (checked, unresolved) can mean no GPU, so the CPU backend refuses them before torch loads."""
    from aorta.hw_queue_eval.commands import collaborators
    from aorta.hw_queue_eval.gpu.control import CPU_NOT_APPLICABLE, GpuRequest
    from aorta.hw_queue_eval.gpu.policies import validate_clock_level, validate_power_limit

    request = GpuRequest(
        clock_level=None if lock_clocks is None else validate_clock_level(lock_clocks),
        power_limit_w=None if power_limit is None else validate_power_limit(power_limit),
    )
    if not request.empty and collaborators.current().gpu_locator().no_gpu_for(device):
        raise UsageError(f"--lock-clocks/--power-limit: {CPU_NOT_APPLICABLE}")
    return request


def gpu_control_context(device: str, request: GpuRequest, state_dir: str | None) -> Any:
    """A context manager holding `request` on the GPU behind `device` (no-op when empty).

    First restores devices left changed by hard-killed processes; `state_dir` (the --state-dir
    option, None: the default) holds their state files and this one's. UsageError on the CPU backend.
    Imports torch only when a clock/power change is requested (to find the GPU's vendor).
    """
    from aorta.hw_queue_eval.commands import collaborators
    from aorta.hw_queue_eval.gpu.control import (
        CPU_NOT_APPLICABLE,
        GpuControl,
        recover_stale_states,
    )

    recover_stale_states(echo=lambda m: click.echo(m, err=True), state_dir=state_dir)
    if request.empty:
        return contextlib.nullcontext(None)
    from aorta.hw_queue_eval.backends import resolve_device

    gpus = collaborators.current().gpu_locator()
    target = gpus.target_for(resolve_device(device))
    if target is None:
        raise UsageError(f"--lock-clocks/--power-limit: {CPU_NOT_APPLICABLE}")
    return GpuControl(target, request, open_driver=gpus.driver_for, state_dir=state_dir)


TRACING_FLAGS: list[tuple[str, str, str]] = [
    (
        "--ebpf-trace",
        "ebpf_trace",
        "Trace driver/kernel queue activity with eBPF during the measurement window (needs root or "
        "sudo -n; without them the run goes on and the result says why tracing is off).",
    ),
    (
        "--ebpf-memory-trace",
        "ebpf_memory_trace",
        "Trace memory pressure with eBPF during the measurement window: GPU buffer moves, maps and "
        "evictions (amdgpu/amdkfd) and host page faults, reclaim and migrations. With --ebpf-trace "
        "both share one bpftrace process.",
    ),
    (
        "--ebpf-gpu-runtime",
        "ebpf_gpu_runtime",
        "Also put uprobes on the GPU runtime the process loaded (HIP/HSA or CUDA, NCCL/RCCL): kernel "
        "launches, copies, collectives, host syncs and cross-stream waits per stream (doorbells and "
        "call times: --ebpf-gpu-runtime-views). Implies --ebpf-trace. Opt-in: a uprobe costs about "
        "a microsecond per call (see docs/ebpf.md).",
    ),
]


def _bpftrace_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--bpftrace PATH checked when the command line is read (exit 2, one line, before any work)."""
    if value is None:
        return None
    from aorta.ebpf.session import check_bpftrace

    return check_bpftrace(value)


def _views_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--ebpf-gpu-runtime-views LIST checked when the command line is read (exit 2, one line,
    naming the allowed views); the canonical list (table order, each once) so sweeps pass it on."""
    if value is None:
        return None
    from aorta.ebpf.probes.gpu_runtime_views import parse_views

    try:
        return ",".join(parse_views(value))
    except ValueError as exc:
        raise UsageError(f"--ebpf-gpu-runtime-views: {exc}") from None


def gpu_runtime_views(text: str | None) -> tuple[str, ...] | None:
    """The views of a checked --ebpf-gpu-runtime-views value (None: the family's default set)."""
    return tuple(text.split(",")) if text else None


def gpu_runtime_views_option(func: Any) -> Any:
    """--ebpf-gpu-runtime-views LIST: which gpu_runtime views are probed."""
    return click.option(
        "--ebpf-gpu-runtime-views",
        "ebpf_gpu_runtime_views",
        default=None,
        metavar="LIST",
        callback=_views_value,
        help="Which gpu_runtime views to probe, comma-separated: launches, times, doorbells, syncs, "
        "copies, collectives, waits [default: launches,syncs,copies,collectives,waits]. A view left "
        "out is not probed (its result says so). times: call times via return probes; doorbells: "
        "HSA queues. Implies --ebpf-gpu-runtime. Costs per view: docs/ebpf.md.",
    )(func)


def bpftrace_option(func: Any) -> Any:
    """--bpftrace PATH: the bpftrace the eBPF flags start."""
    return click.option(
        "--bpftrace",
        "bpftrace",
        default=None,
        metavar="PATH",
        callback=_bpftrace_value,
        help="The bpftrace to run [default: bpftrace on PATH]. An executable file; as root one "
        "only root can change.",
    )(func)


Decorator = Callable[[Any], Any]


def run_flag_options() -> list[tuple[str, Decorator]]:
    """`run`'s eBPF flags, --ebpf-gpu-runtime-views, --bpftrace and --state-dir, in the order
    `run` lists them, as (parameter name, option decorator): the one declaration `run` and the
    passthrough share."""
    flags: list[tuple[str, Decorator]] = [
        (dest, click.option(flag, dest, is_flag=True, help=text)) for flag, dest, text in TRACING_FLAGS
    ]
    return [
        *flags,
        ("ebpf_gpu_runtime_views", gpu_runtime_views_option),
        ("bpftrace", bpftrace_option),
        ("state_dir", state_dir_option),
    ]


def _with_options(func: Any, options: list[Decorator]) -> Any:
    """`func` with `options` applied so that --help lists them in the given order."""
    for option in reversed(options):
        func = option(func)
    return func


def tracing_options(func: Any) -> Any:
    """The eBPF flags of run-like commands (one list, so every run-like command gets each flag),
    --ebpf-gpu-runtime-views, and --bpftrace, the bpftrace they start."""
    return _with_options(func, [option for name, option in run_flag_options() if name != "state_dir"])


def passthrough_run_options(func: Any) -> Any:
    """`run`'s options named in PASSTHROUGH_FLAGS, declared as `run` declares them (same flags,
    help and checks, in run's order), for a command that hands them to every point's `run`
    (sweep, policy-sweep); put it last, above the function: --help lists them after the rest.

    To pass another `run` option through, declare it in `run_flag_options` (an eBPF flag: in
    TRACING_FLAGS) and add its name to PASSTHROUGH_FLAGS."""
    options = run_flag_options()
    unknown = sorted(set(PASSTHROUGH_FLAGS) - {name for name, _ in options})
    if unknown:
        raise ValueError(f"PASSTHROUGH_FLAGS names {unknown}: not among run_flag_options()")
    return _with_options(func, [option for name, option in options if name in PASSTHROUGH_FLAGS])


def build_tracer(
    queue: bool,
    memory: bool,
    gpu_runtime: bool = False,
    timeline: bool = False,
    bpftrace: str | None = None,
    gpu_runtime_views: tuple[str, ...] | None = None,
) -> Any:
    """The tracer for these flags (None without tracing); tells on stderr when tracing is off.
    `timeline`: --trace-out was given, so the tracer keeps per-event records for it; `bpftrace`:
    the --bpftrace option; `gpu_runtime_views`: --ebpf-gpu-runtime-views (None: the default)."""
    if not (queue or memory or gpu_runtime):
        return None
    from aorta.hw_queue_eval.tracing.window_tracer import make_tracer

    tracer = make_tracer(queue, memory, gpu_runtime, timeline, bpftrace, gpu_runtime_views)
    if tracer is not None and not tracer.ready.ok:
        click.echo(f"warning: eBPF tracing is off: {tracer.ready.reason}", err=True)
    return tracer


def sweep_run_options(config: Any) -> JsonObject:
    """The run options a sweep file records and hands to each point (its --resume fingerprint)."""
    from aorta.hw_queue_eval.run.cpupin import format_cpu_list

    return {
        "iterations": config.iterations,
        "warmup": config.warmup,
        "device": config.device,
        "size": config.size,
        "sync_mode": config.sync_mode,
        "seed": config.seed,
        "threads_per_queue": config.threads_per_queue,
        # only when given: a sweep without it keeps the fingerprint --resume matches on
        **({"cpus": format_cpu_list(config.cpus)} if config.cpus else {}),
    }
