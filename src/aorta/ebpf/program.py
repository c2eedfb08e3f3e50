"""Assemble ONE bpftrace program from every requested probe family (pure text; nothing runs).

Layout: BEGIN (traced pids, family maps) → first handshake probe, which is also the window gate →
child follower → every family's tracepoint probes → [uprobe handshake 3 → families' uprobes →
uprobe handshake 4] → second handshake probe → END. bpftrace attaches probes of one kind in
declaration order in one direction (0.17: tracepoints forward, then uprobes backward), so whichever
of two handshake probes is attached last, once *both* have answered a PING every probe of their
kind between them is live. That is the readiness handshake; BEGIN is not (bpftrace runs BEGIN
before attaching the other probes). uprobes get their own pair (see `uprobes.py`). The gate shares
the first handshake probe (one BPF program fewer to load and attach, issue 24): it is live once
that probe answers.

Owner guard: the program exits by itself when the process that started it exits (a
`sched_process_exit` probe on its pid, inside the handshake, so it is live before the owner can
see "ready"), and when no handshake completed within OWNER_WATCHDOG_S (the owner died while
probes were attaching). So a hard-killed owner never leaves a tracer running, even under sudo,
where the parent-death signal does not reach bpftrace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aorta.ebpf import marker, uprobes
from aorta.ebpf.probes.base import (
    BpftraceDialect,
    ProbeCode,
    ProbeFamily,
    RenderContext,
    TraceTarget,
    WindowEdges,
)
from aorta.ebpf.tracefs import Tracefs

NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
GATE_MAP = "@aorta_gate"  # the window's start (nsecs) while it is open, 0 otherwise
GATE = f"{GATE_MAP} != 0"
WINDOW_START_MAP = "@aorta_window_start_ns"
WINDOW_STOP_MAP = "@aorta_window_stop_ns"
PIDS_MAP = "@aorta_pids"
READY_TEXT = "aorta_ready"
CLOSED_TEXT = "aorta_closed"  # printed when the gate closes: everything before it was delivered
HANDSHAKE_IDS = (1, 2)
UPROBE_HANDSHAKE_IDS = (3, 4)
BORN_MAP = "@aorta_born_ns"
OWNER_WATCHDOG_S = 180  # longer than any attach timeout the engine waits for
ENGINE_PREFIX = "aorta_"


class ProgramError(Exception):
    """The program cannot be built on this machine (no marker syscall tracepoint, bad input)."""


@dataclass
class Program:
    """The text bpftrace will load, plus what each family attached or could not."""

    text: str
    token: int
    families: list[ProbeFamily]
    used_events: dict[str, list[str]] = field(default_factory=dict)
    missing: dict[str, dict[str, str]] = field(default_factory=dict)
    marker_event: str = ""
    probe_blocks: int = 0
    target: TraceTarget | None = None
    handshake_ids: tuple[int, ...] = HANDSHAKE_IDS  # printf ids that must all answer a PING
    uprobe_ping: bool = False  # the tracer must also call the uprobe handshake function
    exits_on_marker: bool = False  # the gate calls exit() on marker.EXIT (see TraceSession.stop)


def validate_target(target: TraceTarget) -> None:
    """Pids and thread ids must be positive ints: they are pasted into bpftrace code."""
    for value in (*target.pids, *target.thread_labels):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ProgramError(f"invalid pid/tid {value!r}: must be a positive integer")
    for bell in target.doorbells:
        if (
            len(bell) != 4
            or any(isinstance(v, bool) or not isinstance(v, int) for v in bell)
            or bell[0] <= 0
            or bell[1] < 0
            or bell[2] <= 0
            or bell[3] < 0
        ):
            raise ProgramError(f"invalid doorbell {bell!r}: (pid > 0, fd >= 0, tid > 0, queue >= 0)")
    if not isinstance(target.rank_keys, bool):
        raise ProgramError(f"invalid rank_keys {target.rank_keys!r}: must be a bool")
    keep = target.timeline_events
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ProgramError(f"invalid timeline_events {keep!r}: must be an integer >= 0")
    ranks = target.window_ranks
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ProgramError(f"invalid window_ranks {ranks!r}: must be a positive integer")


def validate_family(family: ProbeFamily) -> None:
    """Family names become map prefixes: letters, digits, underscore; `aorta_` is the engine's."""
    if (
        not NAME_RE.match(family.name or "")
        or family.name.startswith(ENGINE_PREFIX)
        or family.name == "aorta"
    ):
        raise ProgramError(f"invalid probe family name {family.name!r}")
    if family.section not in ("queue", "memory"):
        raise ProgramError(f"family {family.name}: section must be 'queue' or 'memory'")


def render_context(
    tracefs: Tracefs, dialect: BpftraceDialect, target: TraceTarget, probe: marker.MarkerProbe | None = None
) -> RenderContext:
    """The context families render with: pid filter over @aorta_pids, gate over @aorta_gate, and
    the window markers' probe (`probe`) for families that act at the window's edges."""
    pid_filter = f"{PIDS_MAP}[pid]" if target.pids else "1"
    # a node program's @aorta_pids holds each traced process's rank key (slot + 1), else 1
    rank = f"{PIDS_MAP}[pid]" if target.rank_keys and target.pids else None
    edges = (
        None
        if probe is None
        else WindowEdges(
            attach=probe.attach,
            event=probe.event,
            match=probe.match_expr,
            opens=f"{probe.command_expr} == {marker.WINDOW_START}",
            closes=f"{probe.command_expr} == {marker.WINDOW_STOP}",
        )
    )
    return RenderContext(
        tracefs=tracefs,
        dialect=dialect,
        target=target,
        pid_filter=pid_filter,
        gate=GATE,
        rank=rank,
        edges=edges,
    )


def _ping_answer(ident: int) -> str:
    return f'printf("{READY_TEXT} {ident}\\n"); @aorta_ready_{ident} = 1;'


def _handshake_block(probe: marker.MarkerProbe, ident: int) -> str:
    return (
        f"{probe.attach}\n/{probe.match_expr} && {probe.command_expr} == {marker.PING}/\n"
        f"{{\n  {_ping_answer(ident)}\n}}"
    )


def _owner_guard_blocks(ctx: RenderContext, owner_pid: int) -> list[str]:
    """exit() when the owner's main thread exits, or when no handshake completed in time."""
    blocks = []
    if ctx.event("sched", "sched_process_exit") is not None:
        blocks.append(f"tracepoint:sched:sched_process_exit\n/tid == {int(owner_pid)}/\n{{\n  exit();\n}}")
    unready = " || ".join(f"@aorta_ready_{i} == 0" for i in HANDSHAKE_IDS)
    blocks.append(
        f"interval:s:5\n/({unready}) && nsecs - {BORN_MAP} > "
        f"{OWNER_WATCHDOG_S * 1_000_000_000}/\n{{\n  exit();\n}}"
    )
    return blocks


def _gate_block(probe: marker.MarkerProbe, ranks: int = 1) -> str:
    """The window gate, which also answers the first handshake PING (one probe, not two)."""
    cmd = probe.command_expr
    ping = (
        f"  if ({cmd} == {marker.PING}) {{ {_ping_answer(HANDSHAKE_IDS[0])} }}\n"
        f"  if ({cmd} == {marker.EXIT}) {{ exit(); }}\n"
    )
    stop = (
        f"  if ({cmd} == {marker.WINDOW_STOP}) {{ {GATE_MAP} = 0; {WINDOW_STOP_MAP} = nsecs; "
        f'printf("{CLOSED_TEXT}\\n"); }}\n}}'
    )
    if ranks == 1:
        return (
            f"{probe.attach}\n/{probe.match_expr}/\n{{\n{ping}"
            f"  if ({cmd} == {marker.WINDOW_START}) {{ $t = nsecs; {WINDOW_START_MAP} = $t; "
            f"{GATE_MAP} = $t; }}\n{stop}"
        )
    # several processes (a node's torchrun ranks) share the gate: the first start opens it (later
    # starts leave it alone); the one stop comes from the rank whose window ends last (user space
    # counts the stops atomically in the torchrun store: a map counter here would race)
    return (
        f"{probe.attach}\n/{probe.match_expr}/\n{{\n{ping}"
        f"  if ({cmd} == {marker.WINDOW_START} && {WINDOW_START_MAP} == 0) {{ $t = nsecs; "
        f"{WINDOW_START_MAP} = $t; {GATE_MAP} = $t; }}\n{stop}"
    )


def _follow_children_block(ctx: RenderContext) -> str | None:
    fmt = ctx.event("sched", "sched_process_fork")
    if fmt is None or not fmt.has("child_pid"):
        return None
    # Runs in the parent: `pid` is the parent's tgid. A new thread's tid lands in the map too,
    # which is harmless (it is never a tgid of another process). The child inherits the
    # parent's value: its rank key in a node program, 1 otherwise.
    return (
        f"tracepoint:sched:sched_process_fork\n/{PIDS_MAP}[pid]/\n{{\n"
        f"  {PIDS_MAP}[{ctx.dialect.arg('child_pid')}] = {PIDS_MAP}[pid];\n}}"
    )


def build_program(
    families: list[ProbeFamily],
    target: TraceTarget,
    tracefs: Tracefs,
    dialect: BpftraceDialect,
    token: int,
    owner_pid: int | None = None,
) -> Program:
    """Render every family against `tracefs` into one program; raise ProgramError if impossible.

    `owner_pid`: the process that will start bpftrace; the program exits when it exits.
    """
    validate_target(target)
    if owner_pid is not None and (
        isinstance(owner_pid, bool) or not isinstance(owner_pid, int) or owner_pid <= 0
    ):
        raise ProgramError(f"invalid owner pid {owner_pid!r}: must be a positive integer")
    probe = marker.marker_probe(tracefs, dialect, token)
    if probe is None:
        raise ProgramError(
            "no syscall tracepoint for the window marker (syscalls:sys_enter_prctl "
            "or raw_syscalls:sys_enter): kernel built without CONFIG_FTRACE_SYSCALLS"
        )
    ctx = render_context(tracefs, dialect, target, probe)
    program = Program(
        text="",
        token=token,
        families=list(families),
        marker_event=probe.event,
        target=target,
        exits_on_marker=True,
    )
    begin = [
        f"  {PIDS_MAP}[{p}] = {slot + 1 if target.rank_keys else 1};" for slot, p in enumerate(target.pids)
    ]
    blocks: list[str] = [_gate_block(probe, target.window_ranks)]  # also handshake probe 1
    if owner_pid is not None:
        begin.append(f"  {BORN_MAP} = nsecs;")
        blocks.extend(_owner_guard_blocks(ctx, owner_pid))
    if target.pids and target.follow_children:
        follow = _follow_children_block(ctx)
        if follow:
            blocks.append(follow)
    end: list[str] = []
    user_blocks: list[str] = []
    for family in families:
        validate_family(family)
        try:
            code = family.render(ctx)
            _check_maps(family, code)
            _check_tracepoints(family, code)
            family_user = [b for b in code.probes if uprobes.is_uprobe_block(b)]
            if family_user and uprobes.handshake_block(token, 0) is None:
                raise ProgramError("no C library mapped here for the uprobe readiness handshake")
        except Exception as exc:  # a family bug lowers coverage; it never stops the others
            program.missing[family.name] = {"*": f"render failed: {type(exc).__name__}: {exc}"}
            program.used_events[family.name] = []
            continue
        program.used_events[family.name] = list(code.used_events)
        program.missing[family.name] = dict(code.missing)
        begin.extend(f"  {line}" for line in code.begin)
        blocks.extend(b for b in code.probes if b not in family_user)
        user_blocks.extend(family_user)
        end.extend(f"  {line}" for line in code.end)
    if user_blocks:  # bracketed by their own handshake (bpftrace attaches them after tracepoints)
        blocks.append(uprobes.handshake_block(token, UPROBE_HANDSHAKE_IDS[0]) or "")
        blocks.extend(user_blocks)
        blocks.append(uprobes.handshake_block(token, UPROBE_HANDSHAKE_IDS[1]) or "")
        program.handshake_ids = HANDSHAKE_IDS + UPROBE_HANDSHAKE_IDS
        program.uprobe_ping = True
    blocks.append(_handshake_block(probe, HANDSHAKE_IDS[1]))
    header = (
        f"// aorta: one program for families {', '.join(f.name for f in families) or '(none)'}\n"
        f"// window gate: prctl({marker.MAGIC:#x}, cmd, {token}) via {probe.event}"
    )
    parts = [header, "BEGIN\n{\n" + "\n".join(begin or [f"  {GATE_MAP} = 0;"]) + "\n}"]
    parts.extend(blocks)
    parts.append("END\n{\n" + "\n".join(end or [f"  {GATE_MAP} = 0;"]) + "\n}")
    program.text = "\n\n".join(parts) + "\n"
    program.probe_blocks = len(blocks)
    return program


_MAP_RE = re.compile(r"@([A-Za-z0-9_]+)")


def _check_tracepoints(family: ProbeFamily, code: ProbeCode) -> None:
    """Tracepoints only, or uprobes for families that declare `uses_uprobes`: the handshake
    covers both (declaration-order attach within each kind is checked by a test)."""
    user_ok = bool(getattr(family, "uses_uprobes", False))
    for block in code.probes:
        head = block.lstrip().splitlines()[0] if block.strip() else ""
        kinds = {uprobes.attach_kind(a) for a in head.split(",")}
        if kinds == {"tracepoint"} or (user_ok and kinds == {"uprobe"}):
            continue
        raise ProgramError(
            f"family {family.name}: probe {head!r} is not a tracepoint "
            + ("or a well-formed uprobe" if user_ok else "")
            + " (the readiness handshake covers tracepoints"
            + (" and uprobes)" if user_ok else " only)")
        )


def _check_maps(family: ProbeFamily, code: ProbeCode) -> None:
    """Every map a family writes must carry its prefix (the engine routes printed maps by it)."""
    text = "\n".join([*code.probes, *code.begin, *code.end])
    for name in _MAP_RE.findall(text):
        if not (name.startswith(f"{family.name}_") or name.startswith(ENGINE_PREFIX)):
            raise ProgramError(f"family {family.name} uses map @{name} without its prefix @{family.name}_")
