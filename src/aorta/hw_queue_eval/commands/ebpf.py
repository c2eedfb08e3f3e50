"""`ebpf-info` (what can be traced here, and the exact program) and `ebpf-attach` (trace a PID)."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import click

from aorta.common.atomicio import check_output_path
from aorta.common.errors import UsageError
from aorta.common.procs import parse_pid, process_running, process_state, thread_group_of
from aorta.hw_queue_eval.commands._options import tracing_options
from aorta.hw_queue_eval.commands._output import save_and_print_json

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def register(group: click.Group) -> None:
    group.add_command(ebpf_info_command)
    group.add_command(ebpf_attach_command)


def parse_duration(text: str) -> float:
    """'30s', '500ms', '2m' or plain seconds → seconds (> 0); UsageError otherwise."""
    match = _DURATION_RE.match(text or "")
    if not match:
        raise UsageError(f"--duration {text!r} is not a duration: use e.g. 30s, 500ms or 2m")
    value = float(match.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]
    if value <= 0:
        raise UsageError(f"--duration must be > 0, got {text!r}")
    return value


@click.command("ebpf-info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--show-script",
    is_flag=True,
    help="Print the exact bpftrace program a run with the given flags would load here.",
)
@tracing_options
@click.option(
    "--pid",
    "pid_text",
    default=None,
    help="With --show-script --ebpf-gpu-runtime: render the uprobes for the GPU runtime "
    "libraries this process has mapped.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write JSON here.")
def ebpf_info_command(
    as_json: bool,
    show_script: bool,
    output: str | None,
    ebpf_trace: bool = False,
    ebpf_memory_trace: bool = False,
    ebpf_gpu_runtime: bool = False,
    pid_text: str | None = None,
) -> None:
    """What eBPF can trace on this machine (AORTA_TRACEFS overrides the tracefs root). Exit 0."""
    from aorta.ebpf.capabilities import full_report

    if output:
        check_output_path(output)
    if show_script:
        pid = _pid(pid_text) if pid_text else None  # bad input: exit 2 (not a finding)
        try:
            script = _script(ebpf_trace or not ebpf_memory_trace, ebpf_memory_trace, ebpf_gpu_runtime, pid)
        except UsageError as exc:  # ebpf-info reports what it finds and exits 0
            script, problem = None, str(exc)
            click.echo(f"ebpf-info: {exc}", err=True)
        else:
            problem = None
        data = {
            "kind": "ebpf_script",
            "queue": ebpf_trace or not ebpf_memory_trace,
            "memory": ebpf_memory_trace,
            "program": script,
            "error": problem,
        }
        if not save_and_print_json(data, output, as_json) and script is not None:
            click.echo(script, nl=False)
        return
    data = full_report()
    data["gpu_runtime"] = gpu_runtime_report()
    if save_and_print_json(data, output, as_json):
        return
    _print_info(data)


SHOW_DOORBELL_FD = 3  # stand-in doorbell fd in --show-script output


def _pid(text: str) -> int:
    """A live process id from the command line (UsageError otherwise)."""
    try:
        pid = int(text)
    except ValueError:
        raise UsageError(f"--pid must be a process id (integer), got {text!r}") from None
    if pid <= 0 or not os.path.isdir(f"/proc/{pid}"):
        raise UsageError(f"no process with pid {pid}: check `ps -p {pid}`")
    return pid


def _script(queue: bool, memory: bool, gpu_runtime: bool = False, pid: int | None = None) -> str:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.program import ProgramError
    from aorta.ebpf.session import bpftrace_path, bpftrace_version
    from aorta.ebpf.tracefs import find_tracefs

    tracefs, note = find_tracefs(mount_if_root=True)
    if tracefs is None:
        raise UsageError(f"cannot render the program: tracefs unavailable ({note})")
    path = bpftrace_path()
    version = bpftrace_version(path) if path else None
    stand_in = pid is None
    traced = pid or os.getpid()
    # a CPU-backend run registers one doorbell per queue: show the probes with one stand-in
    bells = ((traced, SHOW_DOORBELL_FD, traced, 0),) if queue and stand_in else ()
    target = TraceTarget(
        pids=(traced,), follow_children=True, thread_labels={traced: "q0"} if bells else {}, doorbells=bells
    )
    try:
        program = engine.make_program(queue, memory, target, tracefs, version, gpu_runtime=gpu_runtime)
    except ProgramError as exc:
        raise UsageError(f"cannot render the program: {exc}") from None
    head = [
        f"// tracefs: {tracefs.root}; bpftrace {'.'.join(map(str, version)) if version else '?'}"
        + (f"; traced process {pid}" if not stand_in else f"; pid {traced} stands for the traced process")
        + (
            f"; fd {SHOW_DOORBELL_FD} and tid {traced} for queue 0's doorbell and worker "
            "(a CPU-backend run registers one per queue)"
            if bells
            else ""
        )
    ]
    for family, missing in program.missing.items():
        for event, why in missing.items():
            head.append(f"// {family}: not attached {event}: {why}")
    return "\n".join(head) + "\n" + program.text


def gpu_runtime_report() -> dict[str, Any]:
    """What the opt-in gpu_runtime family would probe (symbols listed; libraries found per run)."""
    from aorta.ebpf.probes.gpu_runtime_apis import APIS
    from aorta.ebpf.runtime_libs import RUNTIME_LIBS
    from aorta.ebpf.uprobes import handshake_library

    return {
        "flag": "--ebpf-gpu-runtime (ebpf-attach: automatic when a runtime library is mapped)",
        "libraries": {k: p.pattern for k, p in RUNTIME_LIBS.items()},
        "symbols": {k: [a.name for a in APIS if a.lib == k] for k in RUNTIME_LIBS},
        "uprobe_handshake_library": handshake_library(),
        "available": handshake_library() is not None,
    }


def _print_info(data: dict[str, Any]) -> None:
    from aorta.hw_queue_eval.report.ebpf_info import render_ebpf_info

    render_ebpf_info(data)


@click.command("ebpf-attach")
@click.option("--pid", "pid_text", required=True, help="Process to trace (its threads and children too).")
@click.option("--duration", default="30s", show_default=True, help="How long: 30s, 500ms, 2m.")
@tracing_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the sections as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON on stdout.")
def ebpf_attach_command(
    pid_text: str,
    duration: str,
    output: str | None,
    as_json: bool,
    ebpf_trace: bool = False,
    ebpf_memory_trace: bool = False,
    ebpf_gpu_runtime: bool = False,
) -> None:
    """Trace a running process (threads and child processes) for a while; print and save."""
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.program import ProgramError
    from aorta.ebpf.runtime_libs import runtime_libraries, with_descendants
    from aorta.ebpf.session import SessionError
    from aorta.hw_queue_eval.report.console import make_console
    from aorta.hw_queue_eval.report.ebpf_blocks import render_queue_block
    from aorta.hw_queue_eval.report.ebpf_memory import render_memory_block

    try:
        pid = int(pid_text)
    except ValueError:
        raise UsageError(f"--pid must be a process id (integer), got {pid_text!r}") from None
    if parse_pid(str(pid)) is None or not process_running(pid):
        state = "has exited (a zombie)" if process_state(pid) == "Z" else "does not exist"
        raise UsageError(f"process {pid} {state}: check `ps -p {pid}`")
    group = thread_group_of(pid)
    if group is not None and group != pid:
        raise UsageError(
            f"{pid} is a thread of process {group}, not a process: use --pid {group} "
            "(its threads are traced with it)"
        )
    seconds = parse_duration(duration)
    if output:
        check_output_path(output)
    queue = ebpf_trace or ebpf_gpu_runtime or not ebpf_memory_trace
    # the GPU runtime family joins by itself when the process (or a child) mapped a runtime library
    gpu_runtime = queue and (ebpf_gpu_runtime or bool(runtime_libraries(with_descendants((pid,)))))
    ready = engine.check_readiness()
    if not ready.ok or ready.tracefs is None:
        raise UsageError(f"eBPF tracing unavailable: {ready.reason}")
    # processes it already started count from the start (torchrun's launcher: its ranks), the
    # ones it starts later are followed by the program
    target = TraceTarget(pids=tuple(with_descendants((pid,))), follow_children=True)
    try:
        program = engine.make_program(
            queue, ebpf_memory_trace, target, ready.tracefs, ready.version, gpu_runtime=gpu_runtime
        )
        session = engine.start_session(program, ready)
    except (ProgramError, SessionError) as exc:
        raise UsageError(f"could not start tracing: {exc}") from None
    click.echo(f"tracing pid {pid} (threads and children) for {seconds:g} s…", err=True)
    try:
        session.window_start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and process_running(pid):
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        session.window_stop()
        out = session.stop()
    except BaseException:
        session.abort()
        raise
    context = {"workers": [], "window": engine.window_info(out), "pids": list(target.pids), "streams": None}
    results = engine.collect_results(program, out, context)
    sections = engine.build_sections(program, out, results, ready, queue, ebpf_memory_trace)
    if "ebpf_queue_metrics" in sections:
        sections["ebpf_queue_metrics"]["interpretation"] = engine.interpret_queue(
            sections["ebpf_queue_metrics"], None
        )
    data = {
        "kind": "ebpf_attach",
        "pid": pid,
        "duration_s": seconds,
        "process_exited_early": not process_running(pid),
        "traced_pids": sorted(int(k) for k in (out.maps.get("@aorta_pids") or {})),
        **sections,
    }
    if not save_and_print_json(data, output, as_json):
        render_queue_block(sections.get("ebpf_queue_metrics"), make_console())
        render_memory_block(sections.get("ebpf_memory_metrics"), make_console())
        if output:
            click.echo(f"\nwritten to {output}")
