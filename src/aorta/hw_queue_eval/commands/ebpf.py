"""`ebpf-info` (what can be traced here, and the exact program) and `ebpf-attach` (trace a PID)."""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from aorta.common.atomicio import check_distinct_outputs, check_output_path
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.common.procs import parse_pid, process_running, process_state, thread_group_of
from aorta.hw_queue_eval.commands._options import gpu_runtime_views, tracing_options
from aorta.hw_queue_eval.commands._output import save_and_print_json
from aorta.hw_queue_eval.commands._tracers import check_views, parse_tracers, tracer_report

if TYPE_CHECKING:  # the eBPF engine loads only when a command traces
    from aorta.ebpf.probes.base import Window

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


def _tracefs_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--tracefs DIR checked when the command line is read (exit 2, one line, before any work)."""
    if value is None:
        return None
    from aorta.ebpf.tracefs import check_tracefs_root

    check_tracefs_root(value)
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
@click.option(
    "--mount",
    is_flag=True,
    help="As root, mount tracefs first when it is not mounted (as run --ebpf-trace and "
    "ebpf-attach do); without it ebpf-info only reads.",
)
@click.option(
    "--tracefs",
    "tracefs_root",
    default=None,
    metavar="DIR",
    callback=_tracefs_value,
    help="Read the tracepoint formats under DIR (a tracefs root or a copy of one: the folder "
    "holding events/) instead of this machine's tracefs; as root DIR must be one only root can change.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write JSON here.")
def ebpf_info_command(
    as_json: bool,
    show_script: bool,
    output: str | None,
    ebpf_trace: bool = False,
    ebpf_memory_trace: bool = False,
    ebpf_gpu_runtime: bool = False,
    bpftrace: str | None = None,
    pid_text: str | None = None,
    mount: bool = False,
    tracefs_root: str | None = None,
    ebpf_gpu_runtime_views: str | None = None,
) -> None:
    """What eBPF can trace on this machine (--tracefs DIR: in a recorded tracefs tree). Exit 0.

    Read-only: it never mounts tracefs unless --mount is given (run and ebpf-attach mount it)."""
    from aorta.ebpf.capabilities import full_report

    if output:
        check_output_path(output)
    if show_script:
        pid = _pid(pid_text) if pid_text else None  # bad input: exit 2 (not a finding)
        script: str | None
        problem: str | None
        try:
            script = _script(
                ebpf_trace or not ebpf_memory_trace,
                ebpf_memory_trace,
                ebpf_gpu_runtime or ebpf_gpu_runtime_views is not None,
                pid,
                mount,
                bpftrace=bpftrace,
                tracefs_root=tracefs_root,
                gpu_runtime_views=gpu_runtime_views(ebpf_gpu_runtime_views),
            )
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
    data = full_report(mount=mount, bpftrace=bpftrace, tracefs_root=tracefs_root)
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


def _script(
    queue: bool,
    memory: bool,
    gpu_runtime: bool = False,
    pid: int | None = None,
    mount: bool = False,
    bpftrace: str | None = None,
    tracefs_root: str | None = None,
    gpu_runtime_views: tuple[str, ...] | None = None,
) -> str:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.program import ProgramError
    from aorta.ebpf.session import bpftrace_path, bpftrace_version
    from aorta.ebpf.tracefs import find_tracefs

    tracefs, note = find_tracefs(mount_if_root=mount, root=tracefs_root)
    if tracefs is None:
        raise UsageError(f"cannot render the program: tracefs unavailable ({note})")
    path = bpftrace_path(bpftrace)
    version = bpftrace_version(path) if path else None
    stand_in = pid is None
    traced = pid or os.getpid()
    # a CPU-backend run registers one doorbell per queue: show the probes with one stand-in
    bells = ((traced, SHOW_DOORBELL_FD, traced, 0),) if queue and stand_in else ()
    target = TraceTarget(
        pids=(traced,), follow_children=True, thread_labels={traced: "q0"} if bells else {}, doorbells=bells
    )
    try:
        program = engine.make_program(
            queue,
            memory,
            target,
            tracefs,
            version,
            gpu_runtime=gpu_runtime,
            gpu_runtime_views=gpu_runtime_views,
        )
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


def gpu_runtime_report() -> JsonObject:
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


def _print_info(data: JsonObject) -> None:
    from aorta.hw_queue_eval.report.ebpf_info import render_ebpf_info

    render_ebpf_info(data)


@click.command("ebpf-attach")
@click.option(
    "--pid",
    "pid_text",
    default=None,
    help="Process to trace (its threads and children too). Without it (root only): every process "
    "that maps a GPU runtime library (libamdhip64, libhsa-runtime64, libcudart, libcuda, "
    "libnccl/librccl), at most --max-processes.",
)
@click.option(
    "--max-processes",
    "max_text",
    default=None,
    help="Without --pid: trace at most this many processes (default 32, at most 256).",
)
@click.option("--duration", default="30s", show_default=True, help="How long: 30s, 500ms, 2m.")
@tracing_options
@click.option(
    "--tracers",
    "tracers_text",
    default=None,
    metavar="LIST",
    help="Upstream AORTA's names, comma-separated: queue, memory, race, dma, rccl (race, dma "
    "and rccl: the gpu_runtime family's event-wait, copies and collectives views).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the sections as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON on stdout.")
@click.option(
    "--trace-out",
    type=click.Path(dir_okay=False),
    help="Also write a Perfetto trace of what the kernel saw: the queue workers' on-CPU slices and "
    "run-queue waits, doorbells and their dispatch (CPU backend), memory events.",
)
def ebpf_attach_command(
    pid_text: str | None,
    duration: str,
    output: str | None,
    as_json: bool,
    trace_out: str | None = None,
    ebpf_trace: bool = False,
    ebpf_memory_trace: bool = False,
    ebpf_gpu_runtime: bool = False,
    bpftrace: str | None = None,
    tracers_text: str | None = None,
    max_text: str | None = None,
    ebpf_gpu_runtime_views: str | None = None,
) -> None:
    """Trace a running process (threads and child processes) for a while; print and save.

    Without --pid (root only): every process that maps a GPU runtime library, up to a cap."""
    from aorta.ebpf import engine, timeline
    from aorta.ebpf.doorbells import Doorbells, find_doorbells
    from aorta.ebpf.late_runtimes import LateRuntimes
    from aorta.ebpf.late_runtimes import place as place_late_report
    from aorta.ebpf.probes.base import CollectContext, TraceTarget
    from aorta.ebpf.program import ProgramError
    from aorta.ebpf.runtime_libs import with_descendants
    from aorta.ebpf.session import SessionError
    from aorta.hw_queue_eval.report.console import make_console
    from aorta.hw_queue_eval.report.ebpf_blocks import render_queue_block
    from aorta.hw_queue_eval.report.ebpf_memory import render_memory_block

    scan = None
    if pid_text is None:
        scan = _scan_runtime_processes(max_text)
        roots = scan.pids
        pid: int | None = None
    else:
        if max_text is not None:
            raise UsageError("--max-processes bounds the scan without --pid: drop one of them")
        pid = _attach_pid(pid_text)
        roots = (pid,)
    seconds = parse_duration(duration)
    names = parse_tracers(tracers_text) if tracers_text is not None else []
    check_views(names, gpu_runtime_views(ebpf_gpu_runtime_views))
    tracers = tracer_report(names) if tracers_text is not None else None
    families = {t["family"] for t in (tracers or {}).values()}
    ebpf_trace = ebpf_trace or "queue" in families
    ebpf_memory_trace = ebpf_memory_trace or "memory" in families
    ebpf_gpu_runtime = ebpf_gpu_runtime or "gpu_runtime" in families or ebpf_gpu_runtime_views is not None
    check_distinct_outputs({"-o": output, "--trace-out": trace_out})
    if output:
        check_output_path(output)
    if trace_out:
        check_output_path(trace_out, "trace file")
    queue = ebpf_trace or ebpf_gpu_runtime or not ebpf_memory_trace
    # the GPU runtime family is always in (listed with its reason when nothing is mapped): runtime
    # libraries mapped now are probed at once, ones dlopened later from then on (late_runtimes)
    gpu_runtime = queue
    ready = engine.check_readiness(bpftrace=bpftrace)
    if not ready.ok or ready.tracefs is None:
        raise UsageError(f"eBPF tracing unavailable: {ready.reason}")
    # processes it already started count from the start (torchrun's launcher: its ranks), the
    # ones it starts later are followed by the program
    pids = tuple(with_descendants(roots))
    # a CPU-backend process's queues: their doorbells are found from /proc (doorbells.py)
    bells = find_doorbells(pids) if queue else Doorbells()
    target = TraceTarget(
        pids=pids,
        follow_children=True,
        thread_labels={w.tid: f"q{w.queue}" for w in bells.workers},
        doorbells=bells.doorbells,
        timeline_events=timeline.TIMELINE_EVENTS if trace_out else 0,
    )
    try:
        program = engine.make_program(
            queue,
            ebpf_memory_trace,
            target,
            ready.tracefs,
            ready.version,
            gpu_runtime=gpu_runtime,
            gpu_runtime_views=gpu_runtime_views(ebpf_gpu_runtime_views),
        )
        session = engine.start_session(program, ready)
    except (ProgramError, SessionError) as exc:
        raise UsageError(f"could not start tracing: {exc}") from None
    for name, mapped in (tracers or {}).items():
        if mapped["family"] == "gpu_runtime":
            state = "in this build" if mapped["in_this_build"] else "not in this build yet"
            click.echo(f"--tracers {name}: gpu_runtime family, {mapped['view']}: {state}", err=True)
    late = None
    try:
        session.window_start()
        # printed once the gate is open: what the target does from now on is in the window
        who = f"pid {pid}" if pid is not None else "pids " + ", ".join(map(str, roots))
        click.echo(f"tracing {who} (threads and children) for {seconds:g} s…", err=True)
        late = LateRuntimes(roots, program, ready, session) if gpu_runtime else None
        if late is not None:
            late.window_start()
        tick = late.poll if late is not None else None
        exited = (
            wait_for_exit(pid, seconds, tick=tick)
            if pid is not None
            else wait_for_all_exit(roots, seconds, tick=tick)
        )
        if late is not None:  # late gates close first: no late call counts outside the main window
            late.window_stop()
        session.window_stop()
        if late is not None:
            late.scan(LATE_AT_END)
            late.stop()
        out = session.stop()
    except BaseException:
        session.abort()
        if late is not None:
            late.abort()
        raise
    late_report = None
    if late is not None:
        late_report = late.report(out)
        out = late.absorb(program, out)
    window = engine.window_edges(out)
    context = CollectContext(
        workers=tuple(bells.workers),
        doorbells_traced=len(bells.doorbells),
        window=window,
        pids=tuple(target.pids),
        streams=None,
    )
    results = engine.collect_results(program, out, context)
    backend = "cpu" if bells.doorbells else None
    sections = engine.build_sections(program, out, results, ready, queue, ebpf_memory_trace, backend)
    if late_report is not None:
        place_late_report(sections, late_report)
    if "ebpf_queue_metrics" in sections:
        queue_section = sections["ebpf_queue_metrics"]
        queue_section["interpretation"] = engine.interpret_queue(queue_section, None)
        partial_queues(queue_section, bells)
        # the per-submission records serve a harness comparison, which a traced pid has not
        ((queue_section.get("families") or {}).get("cpu_sched") or {}).get("metrics", {}).pop(
            "per_submission", None
        )
    traced_ms = window.duration_ms
    data = {
        "kind": "ebpf_attach",
        "pid": pid,
        "runtime_processes": scan.report() if scan is not None else None,
        "duration_s": traced_ms / 1e3 if traced_ms is not None else None,
        "duration_meaning": (
            "the traced window as the kernel saw it (gate open → closed); it ends early when the target exits"
        ),
        "requested_duration_s": seconds,
        "process_exited_early": exited,
        "doorbells": bells.report(),
        "traced_pids": sorted(int(k) for k in (out.maps.get("@aorta_pids") or {})),
        "tracers": tracers,
        "late_runtimes": late_report,  # also in families.gpu_runtime.metrics.late_runtimes
        **sections,
    }
    if trace_out:
        write_attach_trace(trace_out, data, window)
    if not save_and_print_json(data, output, as_json):
        if scan is not None:
            click.echo(runtime_processes_text(scan.report()))
        render_queue_block(sections.get("ebpf_queue_metrics"), make_console())
        render_memory_block(sections.get("ebpf_memory_metrics"), make_console())
        click.echo(f"\n{attach_window_text(data)}")
        if output:
            click.echo(f"\nwritten to {output}")
        if trace_out:
            click.echo(f"trace written to {trace_out} (open it in https://ui.perfetto.dev)")


MAX_PROCESSES_LIMIT = 256
#: why a runtime file found by the scan after the window is not probed (the re-scans stop a
#: second before the end: a program started then would not be live before the window closes)
LATE_AT_END = "mapped in the last second of the attach (after the last re-scan): not probed"
#: how often the attach wakes while it waits, to act on the kernel's notice of a new mapping
TICK_S = 0.05


def _attach_pid(pid_text: str) -> int:
    """--pid as a live process (not a thread), or a UsageError saying what it is."""
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
    return pid


def _scan_runtime_processes(max_text: str | None) -> Any:
    """ebpf-attach without --pid: the processes that map a GPU runtime (root only, capped)."""
    from aorta.ebpf import runtime_procs

    cap = runtime_procs.MAX_PROCESSES
    if max_text is not None:
        text = max_text.strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_PROCESSES_LIMIT:
            raise UsageError(f"--max-processes {max_text!r}: give a whole number 1..{MAX_PROCESSES_LIMIT}")
        cap = int(text)
    if os.geteuid() != 0:
        raise UsageError(
            "ebpf-attach without --pid reads every process's memory maps and traces them: "
            "run it as root (sudo), or give --pid"
        )
    scan = runtime_procs.find_runtime_processes(runtime_procs.all_pids(), cap)
    if not scan.traced:
        skipped = f" ({len(scan.skipped)} skipped: {scan.skipped[0]['reason']})" if scan.skipped else ""
        raise UsageError(
            f"no process maps a GPU runtime library (libamdhip64, libhsa-runtime64, libcudart, "
            f"libcuda, libnccl/librccl) among {scan.scanned} scanned{skipped}: start the workload "
            "first, or give --pid"
        )
    return scan


def runtime_processes_text(report: JsonObject) -> str:
    """Which processes an attach without --pid traced, which it skipped and why."""
    lines = [
        f"Processes that map a GPU runtime: {len(report['traced'])} traced, "
        f"{len(report['skipped'])} skipped ({report['scanned_processes']} scanned, cap {report['cap']})"
    ]
    for entry in report["traced"]:
        lines.append(f"  traced  {entry['pid']} {entry['comm'] or '?'}: {', '.join(entry['libraries'])}")
    for entry in report["skipped"]:
        lines.append(f"  skipped {entry['pid']} {entry['comm'] or '?'}: {entry['reason']}")
    return "\n".join(lines)


def wait_for_all_exit(pids: tuple[int, ...], seconds: float, tick: Callable[[], None] | None = None) -> bool:
    """Sleep up to `seconds`, ending early once every one of `pids` has exited (True then)."""
    deadline = time.monotonic() + seconds
    while any(process_running(p) for p in pids):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if tick is not None and left > 1.0:
            tick()
        time.sleep(min(0.01, left))
    return True


def write_attach_trace(path: str, data: JsonObject, window: Window) -> None:
    """The attach window as a trace (report/trace.py): no ops, the kernel's own events, µs since
    the window opened (its CLOCK_MONOTONIC start is the origin)."""
    from aorta.common.atomicio import atomic_write_bytes
    from aorta.hw_queue_eval.report.trace import trace_chunks

    duration = window.duration_ms
    trace_input = {
        **data,
        "workload_name": (
            f"pid {data['pid']} (ebpf-attach)"
            if data.get("pid") is not None
            else "GPU runtime processes (ebpf-attach)"
        ),
        "stream_count": 0,
        "total_time_ms": duration if duration is not None else 0.0,
        "metadata": {"window_start_monotonic_ns": window.start_ns},
    }
    atomic_write_bytes(path, trace_chunks(trace_input))


def wait_for_exit(pid: int, seconds: float, tick: Callable[[], None] | None = None) -> bool:
    """Sleep up to `seconds`, waking when the process exits; True when it exited first.

    A pidfd becomes readable the moment the process exits, so the window ends at the exit, not
    at the next poll; /proc polling every 5 ms where pidfds are unavailable. `tick` (the late
    runtime watcher) runs every TICK_S while more than a second of the window is left."""
    deadline = time.monotonic() + seconds
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        while process_running(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if tick is not None and left > 1.0:
                tick()
            if fd is None:
                time.sleep(min(0.005, left))
            else:
                select.select([fd], [], [], min(left, 0.5 if tick is None else TICK_S))
        return True
    finally:
        if fd is not None:
            os.close(fd)


def partial_queues(section: JsonObject, bells: Any) -> None:
    """Totals over only some queues are not the totals: null them with the reason when a queue's
    doorbell was not found (its per-queue counts stay)."""
    if not bells.unresolved or section.get("source") != "cpu_sched":
        return
    missing = ", ".join(f"q{q}" for q in sorted(bells.unresolved))
    for key in ("total_submissions", "total_dispatches"):
        section[key] = None
    section["summary_reason"] = (
        f"doorbells of {missing} not found (see doorbells.unresolved): totals not measured; "
        "submissions_per_queue covers the queues found"
    )


def attach_window_text(data: JsonObject) -> str:
    """The traced window's length, and why it is shorter than asked when it is."""
    traced = data.get("duration_s")
    text = f"Window: {traced:.3f} s" if isinstance(traced, (int, float)) else "Window: n/a"
    if data.get("process_exited_early"):
        text += f" of the requested {data['requested_duration_s']:g} s (the target exited)"
    unresolved = (data.get("doorbells") or {}).get("unresolved") or {}
    notes = [f"note: queue {queue} not traced: {why}" for queue, why in unresolved.items()]
    return "\n".join([text, *notes])
