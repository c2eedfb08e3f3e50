"""Processes that map a GPU runtime library right now: `ebpf-attach` without `--pid`.

Every process in /proc is read once (its maps; root reads everyone's). One that maps a runtime
(runtime_libs.RUNTIME_LIBS: libamdhip64, libhsa-runtime64, libcudart, libcuda, libnccl/librccl)
is traced, up to MAX_PROCESSES (the cap, lowest pids first); the others that map one are listed
as skipped with the reason (over the cap, nothing probe-able, this process itself).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aorta.common.jsontypes import JsonObject
from aorta.ebpf.runtime_libs import runtime_libraries

#: processes one attach traces at most (one bpftrace program follows them all, and each adds its
#: pid to the program's filter and its runtime files to its uprobes)
MAX_PROCESSES = 32


@dataclass
class RuntimeProcesses:
    """What the scan found: the pids to trace (with their libraries) and the ones skipped."""

    scanned: int = 0
    traced: list[JsonObject] = field(default_factory=list)
    skipped: list[JsonObject] = field(default_factory=list)
    cap: int = MAX_PROCESSES

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(t["pid"] for t in self.traced)

    def report(self) -> JsonObject:
        return {
            "scanned_processes": self.scanned,
            "cap": self.cap,
            "cap_meaning": "processes one ebpf-attach without --pid traces at most (lowest pids first)",
            "traced": self.traced,
            "skipped": self.skipped,
        }


def all_pids(proc: str = "/proc") -> list[int]:
    """Every process id in /proc, ascending."""
    return sorted(int(name) for name in os.listdir(proc) if name.isdigit())


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def find_runtime_processes(pids: Iterable[int], cap: int = MAX_PROCESSES) -> RuntimeProcesses:
    """Scan `pids`: which map a GPU runtime library, which of them to trace, which are skipped."""
    found = RuntimeProcesses(cap=cap)
    own = os.getpid()
    for pid in pids:
        found.scanned += 1
        libs = runtime_libraries([pid])
        if not libs:
            continue
        entry: JsonObject = {
            "pid": pid,
            "comm": _comm(pid),
            "libraries": sorted({lib.mapped_as for lib in libs}),
        }
        usable = [lib for lib in libs if lib.problem is None]
        if pid == own:
            found.skipped.append({**entry, "reason": "this ebpf-attach process itself"})
        elif not usable:
            problems = sorted({f"{lib.mapped_as}: {lib.problem}" for lib in libs})
            found.skipped.append(
                {**entry, "reason": "no library it maps can be probed (" + "; ".join(problems) + ")"}
            )
        elif len(found.traced) >= cap:
            found.skipped.append({**entry, "reason": f"over the cap of {cap} processes per attach"})
        else:
            found.traced.append(entry)
    return found
