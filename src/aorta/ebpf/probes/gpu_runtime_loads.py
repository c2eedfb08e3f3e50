"""When a traced process mapped each executable file, as the kernel saw it (late runtimes' clock).

A runtime library dlopened after attach is probed by a later program (`aorta.ebpf.late_runtimes`);
the calls made before that program's uprobes counted are lost. To say when the library was
mapped, the gpu_runtime family adds to the main program two syscall tracepoints that record every
executable file mapping of a traced process (mmap with PROT_EXEC of a file; anonymous memory is
left out): (pid, start address, length) → CLOCK_MONOTONIC ns at mmap's return, the clock of
bpftrace's `nsecs` and of `time.monotonic_ns()`. User space later matches a runtime library's
executable segment in /proc/PID/maps with the record whose range covers its start. Numbers only:
no file name is read in BPF, nothing read from a process becomes program text.

The dynamic loader maps a library's executable segment once per load (inside dlopen, before its
relocations and constructors run), so the probes fire a few times per library loaded and never
per GPU call: off the hot path. For every other process on the machine each mmap costs one map
lookup. At most MAX_RECORDS mappings are kept; later ones are counted (`dropped`). Each kept one
also prints a notice line (NOTICE pid), so a watcher can re-scan /proc at once instead of polling.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import RenderContext

PROT_EXEC = 0x4
MAP_ANONYMOUS = 0x20
MAX_RECORDS = 1024
NOTICE = "gpu_runtime_xmap"  # printf'd with the pid for each mapping kept
EVENTS = ("syscalls:sys_enter_mmap", "syscalls:sys_exit_mmap")
PENDING_MAP = "@gpu_runtime_xmap_len"  # tid → length, between mmap's entry and its return
RECORDS_MAP = "@gpu_runtime_xmaps"  # (pid, start, length) → ns at return
COUNT_MAP = "@gpu_runtime_xmaps_n"
DROPPED_MAP = "@gpu_runtime_xmaps_over"


@dataclass(frozen=True)
class ExecMapping:
    """One executable file mapping a traced process made: [start, start + length) at `ns`."""

    pid: int
    start: int
    length: int
    ns: int

    def covers(self, address: int) -> bool:
        """Whether `address` lies in this mapping."""
        return self.start <= address < self.start + self.length


@dataclass(frozen=True)
class LoadProbes:
    """The two probe blocks, or why there are none (`reason`)."""

    blocks: tuple[str, ...]
    reason: str | None


def render(ctx: RenderContext) -> LoadProbes:
    """The mmap tracepoints for the traced pids of `ctx` (none without traced pids: every
    process's mappings would be recorded)."""
    if not ctx.target.pids:
        return LoadProbes((), "no traced processes: executable mappings are recorded only for them")
    if ctx.tracefs is None:  # a context built without one (tests of other probes)
        return LoadProbes((), "no tracefs to read the mmap tracepoints' formats from")
    enter, leave = ctx.event("syscalls", "sys_enter_mmap"), ctx.event("syscalls", "sys_exit_mmap")
    if enter is None or leave is None or not enter.has("prot", "flags", "len") or not leave.has("ret"):
        return LoadProbes((), f"{' or '.join(EVENTS)} missing on this kernel: mapping times not recorded")
    arg = ctx.dialect.arg
    entry = (
        "tracepoint:syscalls:sys_enter_mmap\n"
        f"/{ctx.pid_filter} && ({arg('prot')} & {PROT_EXEC:#x}) && !({arg('flags')} & {MAP_ANONYMOUS:#x})/\n"
        f"{{\n  {PENDING_MAP}[tid] = {arg('len')};\n}}"
    )
    exit_ = (
        "tracepoint:syscalls:sys_exit_mmap\n"
        f"/{PENDING_MAP}[tid]/\n{{\n"
        f"  $len = {PENDING_MAP}[tid];\n"
        f"  delete({PENDING_MAP}[tid]);\n"
        f"  if ({arg('ret')} > 0) {{\n"
        f"    if ({COUNT_MAP} < {MAX_RECORDS}) {{\n"
        f"      {RECORDS_MAP}[pid, {arg('ret')}, $len] = nsecs;\n"
        f"      {COUNT_MAP} = {COUNT_MAP} + 1;\n"
        f'      printf("{NOTICE} %d\\n", pid);\n'
        "    } else {\n"
        f"      {DROPPED_MAP} = {DROPPED_MAP} + 1;\n"
        "    }\n  }\n}"
    )
    return LoadProbes((entry, exit_), None)


def records(maps: JsonObject) -> list[ExecMapping]:
    """The recorded mappings from the printed maps, oldest first."""
    out = []
    for key, ns in hist.keyed(maps.get(RECORDS_MAP)).items():
        parts = key.split(",")
        if len(parts) != 3 or not isinstance(ns, int):
            continue
        try:
            pid, start, length = (int(p) for p in parts)
        except ValueError:
            continue
        out.append(ExecMapping(pid, start & (2**64 - 1), length, ns))
    return sorted(out, key=lambda r: r.ns)


def dropped(maps: JsonObject) -> int:
    """Mappings not recorded because MAX_RECORDS were kept already."""
    value = maps.get(DROPPED_MAP)
    return value if isinstance(value, int) else 0


def mapped_at(found: Iterable[ExecMapping], pid: int, address: int) -> ExecMapping | None:
    """The latest mapping of `pid` covering `address` (a library's executable segment start)."""
    hits = [r for r in found if r.pid == pid and r.covers(address)]
    return max(hits, key=lambda r: r.ns) if hits else None


def is_notice(line: str) -> bool:
    """Whether a printf line is this module's notice of a new executable mapping."""
    return line.startswith(NOTICE + " ")
