"""What one gpu_runtime probe hit costs here, timed on probes whose first instruction is alike.

A uprobe's cost depends on the instruction it replaces. x86 Linux executes a `push` (and a
branch) at the probed address inside the trap; any other instruction is copied out and
single-stepped, a second trap. On the development VM (6.18 Firecracker guest) an entry probe cost
+0.44 us on a function starting with `push %rbp` and +16 us on one starting with a `mov`,
`sub` or `endbr64` (`bench/uprobe_cost_launch.py`). The vendors' runtime entry points start with
`push %rbp` (every export of libcudart 12.9, libamdhip64 and libnccl measured); gcc -O2 code and
CET builds (`endbr64`) do not. So each probed function's first instruction is classified, and
every class in use gets its own calibration probe on a C library function of that class. The
probe runs a launch probe's body (a stack argument, the caller test, one count), and is timed
against an unprobed function of the same signature right before the window.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aorta.ebpf.elfsyms import ElfError, Function, function_addresses
from aorta.ebpf.probes.gpu_runtime_apis import STACK1, Api, P
from aorta.ebpf.probes.gpu_runtime_bpf import Where, attach_point, blocks
from aorta.ebpf.runtime_libs import own_libc

PUSH, OTHER = "push", "other"  # entry-instruction classes: emulated in the trap / single-stepped
CLASS_MEANING = {
    PUSH: "first instruction a push or a branch: executed inside the trap",
    OTHER: "any other first instruction (mov, sub, endbr64 ...): single-stepped, a second trap",
}
MAGIC = 0x41435242  # first argument of a calibration call: only these calls run the probe's body
CALLS, BATCHES = 100, 5  # calls per timed batch; batches per function (the fastest counts)
CALIB_PREFIX = f"{P}calib_"  # the calibration probes' copies of the family's maps


@dataclass(frozen=True)
class Calibrator:
    """A C library function that carries a calibration probe, and its unprobed twin (a function
    whose call costs the same without a probe); both called harmlessly with `MAGIC` first."""

    probed: str
    twin: str


# per class, tried in order: the first whose probed function starts with an instruction of that
# class (on Debian 12's glibc: labs `mov`, bsearch `push %r15`)
CANDIDATES = (Calibrator("labs", "abs"), Calibrator("ffsl", "abs"), Calibrator("bsearch", "lfind"))
RETURN = Calibrator("ffsll", "ffs")  # carries the never-matching calibration uretprobe
_V, _SIZE = ctypes.c_void_p, ctypes.c_size_t
_NONE = _SIZE(0)  # lfind's element count, by pointer: no elements, so neither search reads its key
# function → (argument types, arguments): pure calls, no side effect
_CALLS: dict[str, tuple[tuple[type, ...], tuple[object, ...]]] = {
    **{name: ((ctypes.c_long,), (MAGIC,)) for name in ("labs", "ffsl", "abs", "ffsll", "ffs")},
    "bsearch": ((_V, _V, _SIZE, _SIZE, _V), (MAGIC, None, 0, 8, None)),
    "lfind": ((_V, _V, _V, _SIZE, _V), (MAGIC, None, ctypes.addressof(_NONE), 8, None)),
}


def entry_class(path: str, fn: Function) -> str:
    """PUSH when the function's first instruction (read from its file) is a push of a register
    or a relative branch, else OTHER (also for an unreadable file: the dearer guess)."""
    if fn.offset is None:
        return OTHER
    try:
        with open(path, "rb") as file:
            file.seek(fn.offset)
            head = file.read(2)
    except OSError:
        return OTHER
    if len(head) < 2:
        return OTHER
    if 0x50 <= head[0] <= 0x57 or (head[0] == 0x41 and 0x50 <= head[1] <= 0x57):
        return PUSH  # push %reg (0x41: push %r8..%r15)
    if head[0] in (0xE8, 0xE9, 0xEB):  # call / jmp rel32, jmp rel8
        return PUSH
    return OTHER


@dataclass(frozen=True)
class Plan:
    """The calibration probes of one program: per class the C library function probed (None: no
    function of that class here), whether the return calibration is on, and where the chosen
    functions lie in the C library (read once, for `render`)."""

    libc: str
    entry: dict[str, Calibrator | None]
    returns: bool
    return_class: str | None
    functions: dict[str, Function]  # the probed functions chosen → address and file offset
    span: tuple[int, int]  # lowest and highest function address of the C library


def plan(classes: Sequence[str], returns: bool) -> Plan | None:
    """Which calibration probes a program whose probed functions are of `classes` needs (None:
    no C library mapped here). The class of `RETURN.probed` is calibrated too: its entry share
    is subtracted from the return calibration."""
    libc = own_libc()
    if libc is None:
        return None
    try:
        present = function_addresses(libc)
    except ElfError:
        return None

    def usable(c: Calibrator) -> bool:
        return c.probed in present and c.twin in present

    ret_class = entry_class(libc, present[RETURN.probed]) if returns and usable(RETURN) else None
    wanted = sorted({*classes, *([ret_class] if ret_class else [])})
    by_class = {
        cls: next((c for c in CANDIDATES if usable(c) and entry_class(libc, present[c.probed]) == cls), None)
        for cls in wanted
    }
    chosen = [c.probed for c in by_class.values() if c is not None] + ([RETURN.probed] if ret_class else [])
    addrs = [f.address for f in present.values()]
    return Plan(
        libc,
        by_class,
        ret_class is not None,
        ret_class,
        {n: present[n] for n in chosen},
        (min(addrs), max(addrs)),
    )


def render(calib: Plan) -> list[str]:
    """The calibration blocks: the family's own launch probe code, its maps renamed, on the C
    library functions chosen: per class the default (entry-only) launch probe, and with the times
    view the entry + return pair on `RETURN.probed`; only calls with `MAGIC` first count."""
    pf, gate = f"pid == {os.getpid()}", f"arg0 == {MAGIC}"

    def launch_probe(name: str, times: bool) -> list[str]:
        fn = calib.functions[name]
        api = Api(0, "calibration", "launch", "libc", (name,), STACK1)
        at = Where(f"{calib.libc}:{attach_point(name, fn)}", fn.address, calib.span)
        code = blocks(api, at, pf, gate, times=times, doorbell_streams=False)
        note = f"{{\n  // cost calibration: a launch probe on {name}\n"
        return [b.replace(P, CALIB_PREFIX).replace("{\n", note, 1) for b in code]

    out = [b for c in calib.entry.values() if c is not None for b in launch_probe(c.probed, False)]
    if calib.returns:
        out += launch_probe(RETURN.probed, True)
    return out


def _function(name: str) -> Callable[[], object]:
    """One harmless call of the C library function `name` (see _CALLS)."""
    fn = getattr(ctypes.CDLL(None), name)
    argtypes, args = _CALLS[name]
    fn.argtypes, fn.restype = list(argtypes), ctypes.c_long
    return lambda: fn(*args)


def _extra_ns(c: Calibrator, calls: int) -> float:
    """(probed − twin) ns per call, each the fastest of BATCHES alternating batches of `calls`
    calls (timeit's rule: a slower batch was slowed by something else, on a loaded machine
    another process taking the CPU; the median of a few let such a batch through)."""
    probed, twin = _function(c.probed), _function(c.twin)
    best = {"probed": float("inf"), "twin": float("inf")}
    for _ in range(BATCHES):
        for name, fn in (("twin", twin), ("probed", probed)):
            start = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter_ns() - start) / calls)
    return max(0.0, best["probed"] - best["twin"])


@dataclass(frozen=True)
class HitCosts:
    """What one probe hit costs here (the family's window-start snapshot): ns per entry hit per
    entry-instruction class (None: no function of that class here), ns the return probe adds to
    an entry hit (None: not timed), the functions each class was timed on, the C library."""

    entry_ns: dict[str, float | None]
    return_ns: float | None
    calibrated_on: dict[str, str | None]
    libc: str


def hit_costs(calib: Plan, calls: int = CALLS) -> HitCosts:
    """Time the calibration probes (attached, window about to open): ns per entry hit per class
    (None: no function of that class here) and ns the return probe adds to an entry hit."""
    entry = {cls: (_extra_ns(c, calls) if c is not None else None) for cls, c in calib.entry.items()}
    ret: float | None = None
    if calib.returns and calib.return_class is not None:
        pair, first = _extra_ns(RETURN, calls), entry.get(calib.return_class)
        ret = max(0.0, pair - first) if first is not None else None
    return HitCosts(
        entry_ns=entry,
        return_ns=ret,
        calibrated_on={
            cls: (f"{c.probed} (probed) vs {c.twin}" if c is not None else None)
            for cls, c in calib.entry.items()
        },
        libc=str(Path(calib.libc)),
    )
