"""The user-space → bpftrace side channel: marker syscalls that open/close the window gate.

Design: the tracer calls `prctl(MAGIC, command, token, 0, 0)`. MAGIC is no prctl option the kernel
knows, so the call fails at once with EINVAL and changes nothing, but the syscall tracepoint fires
before that and the bpftrace program (matching MAGIC *and* this session's random token) reacts:

* PING answers with a printf (the attach handshake; see `program.py`),
* WINDOW_START sets `@aorta_gate` to the window's start (nsecs, never 0) and records
  `@aorta_window_start_ns`,
* WINDOW_STOP sets `@aorta_gate = 0` and records `@aorta_window_stop_ns`,
* EXIT calls bpftrace's `exit()`: the way `TraceSession.stop` ends a ready program. A signal can
  kill bpftrace instead: it resets SIGINT to the default action once its poll loop ends, so a
  second SIGINT while it prints its maps ends it with -2 (seen under load), and one that lands
  while it is busy reading events is noticed only at the next event.

The probe runs synchronously inside the syscall, so when `prctl` returns the gate is already open
(or closed): the traced window is exactly the harness's measurement window.
"""

from __future__ import annotations

import ctypes
import platform
import secrets
from dataclasses import dataclass

from aorta.ebpf.probes.base import BpftraceDialect
from aorta.ebpf.tracefs import Tracefs

MAGIC = 0x414F5254  # "AORT"; prctl options are small numbers, this one is unused
PING, WINDOW_START, WINDOW_STOP, EXIT = 1, 2, 3, 4
# raw_syscalls fallback: prctl's number where syscalls:sys_enter_prctl is missing
_PRCTL_NR = {"x86_64": 157, "aarch64": 167, "ppc64le": 171, "s390x": 172}


def new_token() -> int:
    """A random positive 31-bit session token (two concurrent sessions never react to each other)."""
    return secrets.randbelow(2**31 - 2) + 1


_libc: ctypes.CDLL | None = None


def send(command: int, token: int) -> None:
    """Issue the marker syscall (it always fails with EINVAL; that is expected)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(
        ctypes.c_int(MAGIC),
        ctypes.c_ulong(command),
        ctypes.c_ulong(token),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )


@dataclass(frozen=True)
class MarkerProbe:
    """Where the marker is caught on this kernel and the predicate that matches it."""

    attach: str  # e.g. "tracepoint:syscalls:sys_enter_prctl"
    command_expr: str  # expression that yields the command (arg2)
    match_expr: str  # predicate: magic option and this session's token
    event: str  # "system:event" used


def marker_probe(tracefs: Tracefs, dialect: BpftraceDialect, token: int) -> MarkerProbe | None:
    """The marker probe for this kernel: syscalls:sys_enter_prctl, else raw_syscalls:sys_enter."""
    if not isinstance(token, int) or token <= 0:
        raise ValueError("token must be a positive int")
    fmt = tracefs.read_format("syscalls", "sys_enter_prctl")
    if fmt is not None and fmt.has("option", "arg2", "arg3"):
        a = dialect.arg
        return MarkerProbe(
            "tracepoint:syscalls:sys_enter_prctl",
            a("arg2"),
            f"{a('option')} == {MAGIC} && {a('arg3')} == {token}",
            "syscalls:sys_enter_prctl",
        )
    raw = tracefs.read_format("raw_syscalls", "sys_enter")
    nr = _PRCTL_NR.get(platform.machine())
    if raw is not None and raw.has("id", "args") and nr is not None:
        a = dialect.arg
        return MarkerProbe(
            "tracepoint:raw_syscalls:sys_enter",
            f"{a('args')}[1]",
            f"{a('id')} == {nr} && {a('args')}[0] == {MAGIC} && {a('args')}[2] == {token}",
            "raw_syscalls:sys_enter",
        )
    return None
