"""A process that dlopens a real runtime late and calls it continuously, timing every call itself.

Run as `python -I late_load_child.py LIBRARY DELAY_S CALL_S` (CALL_S 0: no calls, any library).
Prints "ready"; after a line on stdin ("go": the attach's window is open) sleeps DELAY_S,
dlopens LIBRARY (timed), then calls `cudaLaunchKernel` from the moment dlopen returned for CALL_S
seconds, alternating two fake stream handles (HANDLES), with a short sleep between calls so a few
thousand calls span the run. For each
call it records CLOCK_MONOTONIC ns (bpftrace's `nsecs` clock) right before and right after it, and
whether the uprobe's breakpoint byte (0xCC) was in this process's copy of the function's first
byte just before it. Prints one JSON line with all of it, then waits for stdin to close.

Ground truth for the late-runtime test: the gate of the late program opens at one kernel instant G;
a call that began after G was counted, one that ended before G was not; at most one call (the one
in flight at G) is undecided from here, and its stream handle says where it went.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_standins import LAUNCH_ARGTYPES, Dim3

HANDLES = (0x7100000, 0x7200000)
PAUSE_S = 0.0005


def main() -> None:
    """See the module doc."""
    library, delay_s, call_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()
    time.sleep(delay_s)
    before = time.monotonic_ns()
    rt = ctypes.CDLL(library)
    after = time.monotonic_ns()
    calls = []
    if call_s > 0:
        calls = call(rt, after + int(call_s * 1e9))
    print(json.dumps({"dlopen": [before, after], "calls": calls}), flush=True)
    sys.stdin.read()


def call(rt: ctypes.CDLL, end: int) -> list[tuple[int, int, int, bool]]:
    """cudaLaunchKernel until `end` (monotonic ns), each call timed (see the module doc)."""
    launch = rt.cudaLaunchKernel
    launch.argtypes = LAUNCH_ARGTYPES
    entry = ctypes.c_ubyte.from_address(ctypes.cast(launch, ctypes.c_void_p).value or 0)
    one = Dim3(1, 1, 1)
    calls = []
    i = 0
    while time.monotonic_ns() < end:
        trap = entry.value == 0xCC
        start = time.monotonic_ns()
        launch(None, one, one, None, 0, HANDLES[i % 2])
        stop = time.monotonic_ns()
        calls.append((start, stop, HANDLES[i % 2], trap))
        i += 1
        time.sleep(PAUSE_S)
    return calls


if __name__ == "__main__":
    main()
