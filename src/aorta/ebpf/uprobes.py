"""uprobe support for the program builder: attach-point checks and the uprobe readiness handshake.

bpftrace (0.17 measured) attaches every tracepoint first, then the uprobes in *reverse*
declaration order, so the tracepoint handshake does not prove the uprobes live. The program
therefore brackets all uprobe blocks with two handshake uprobes of their own, on a C library
function the tracer calls with the session token (`llabs(token)`: side-effect free, rarely called
by anything else, at its own address in glibc). Whichever direction bpftrace attaches uprobes in,
once both have answered every uprobe between them is live.
"""

from __future__ import annotations

import ctypes
import os
import re

from aorta.ebpf.elfsyms import ElfError, defined_functions
from aorta.ebpf.runtime_libs import own_libc

HANDSHAKE_FUNCTION = "llabs"
READY_TEXT = "aorta_ready"  # same text as the tracepoint handshake (program.READY_TEXT)
_UPROBE_RE = re.compile(r"^u(ret)?probe:/[A-Za-z0-9_./+-]+:[A-Za-z0-9_]+$")
_handshake_target: tuple[str | None] | None = None


def attach_kind(attach: str) -> str:
    """'tracepoint', 'uprobe' (also uretprobe, with a plain path and symbol) or 'other'."""
    attach = attach.strip()
    if attach.startswith("tracepoint:"):
        return "tracepoint"
    if _UPROBE_RE.match(attach) and "/../" not in attach:
        return "uprobe"
    return "other"


def is_uprobe_block(block: str) -> bool:
    """Whether a probe block attaches uprobes/uretprobes (first line of the block)."""
    head = block.lstrip().splitlines()[0] if block.strip() else ""
    return bool(head) and all(attach_kind(a) == "uprobe" for a in head.split(","))


def handshake_library() -> str | None:
    """The C library this process mapped, when it defines the handshake function (cached)."""
    global _handshake_target
    if _handshake_target is None:
        libc = own_libc()
        try:
            ok = libc is not None and HANDSHAKE_FUNCTION in defined_functions(libc)
        except ElfError:
            ok = False
        _handshake_target = (libc if ok else None,)
    return _handshake_target[0]


def handshake_block(token: int, ident: int) -> str | None:
    """The handshake uprobe answering `ping(token)` from this process; None if impossible here."""
    libc = handshake_library()
    if libc is None:
        return None
    return (
        f"uprobe:{libc}:{HANDSHAKE_FUNCTION}\n/pid == {os.getpid()} && arg0 == {int(token)}/\n"
        f'{{\n  printf("{READY_TEXT} {int(ident)}\\n");\n}}'
    )


_libc: ctypes.CDLL | None = None


def ping(token: int) -> None:
    """Call the handshake function with the token (nothing else happens: llabs is pure)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    fn = getattr(_libc, HANDSHAKE_FUNCTION)
    fn.restype = ctypes.c_longlong
    fn(ctypes.c_longlong(token))
