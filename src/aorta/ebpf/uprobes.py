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
import time

from aorta.ebpf.elfsyms import ElfError, defined_functions
from aorta.ebpf.runtime_libs import own_libc

HANDSHAKE_FUNCTION = "llabs"
# cost calibration: a uretprobe (entry trap + return trampoline) on ffsll, timed against ffs
RETURN_CALIBRATION_FUNCTION = "ffsll"
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
            ok = libc is not None and {HANDSHAKE_FUNCTION, RETURN_CALIBRATION_FUNCTION} <= defined_functions(
                libc
            )
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
CALIBRATION_CALLS = 100


def calibration_block() -> str | None:
    """A uretprobe that never matches (ffsll returns ≤ 64): it only makes ffsll cost a return probe."""
    libc = handshake_library()
    if libc is None:
        return None
    return (
        f"uretprobe:{libc}:{RETURN_CALIBRATION_FUNCTION}\n/pid == {os.getpid()} && retval == 999/\n"
        "{\n  @aorta_calibration = count();\n}"
    )


def _median_extra_ns(probed: object, plain: object, calls: int) -> float:
    samples = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            plain(0)  # type: ignore[operator]
        t1 = time.perf_counter_ns()
        for _ in range(calls):
            probed(0)  # type: ignore[operator]
        t2 = time.perf_counter_ns()
        samples.append(((t2 - t1) - (t1 - t0)) / calls)
    return max(0.0, sorted(samples)[1])


def hit_cost_ns(calls: int = CALIBRATION_CALLS) -> dict[str, float]:
    """What probes cost here, timed in this process while the program is attached: an entry
    uprobe (`llabs`, the handshake probe, predicate false for 0, vs unprobed `labs`) and an entry
    + return pair (`ffsll` with the calibration uretprobe vs unprobed `ffs`); medians of 3 x calls."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    llabs, labs = getattr(_libc, HANDSHAKE_FUNCTION), _libc.labs
    llabs.restype, llabs.argtypes = ctypes.c_longlong, [ctypes.c_longlong]
    labs.restype, labs.argtypes = ctypes.c_long, [ctypes.c_long]
    ffsll, ffs = getattr(_libc, RETURN_CALIBRATION_FUNCTION), _libc.ffs
    ffsll.restype, ffsll.argtypes = ctypes.c_int, [ctypes.c_longlong]
    ffs.restype, ffs.argtypes = ctypes.c_int, [ctypes.c_int]
    return {
        "entry_ns": _median_extra_ns(llabs, labs, calls),
        "entry_return_ns": _median_extra_ns(ffsll, ffs, calls),
    }


def ping(token: int) -> None:
    """Call the handshake function with the token (nothing else happens: llabs is pure)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    fn = getattr(_libc, HANDSHAKE_FUNCTION)
    fn.restype = ctypes.c_longlong
    fn(ctypes.c_longlong(token))
