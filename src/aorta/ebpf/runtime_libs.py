"""GPU runtime libraries a process has mapped (from /proc/PID/maps), as paths safe to probe.

The exact file the process loaded is what a uprobe must name (torch wheels bundle their own
libamdhip64 / libcudart). A process in another mount namespace (a container) is reached through
/proc/PID/root, so the path names the same inode the process mapped. Paths are pasted into
bpftrace code: only plain characters are accepted; anything else is reported, never rendered.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

# runtime kind → file-name pattern (versioned and hash-suffixed copies included)
RUNTIME_LIBS: dict[str, re.Pattern[str]] = {
    "hip": re.compile(r"^libamdhip64(-[0-9a-f]+)?\.so(\.[0-9.]+)?$"),
    "hsa": re.compile(r"^libhsa-runtime64(-[0-9a-f]+)?\.so(\.[0-9.]+)?$"),
    "cudart": re.compile(r"^libcudart(-[0-9a-f]+)?\.so(\.[0-9.]+)?$"),
    "cuda": re.compile(r"^libcuda\.so(\.[0-9.]+)?$"),
    "nccl": re.compile(r"^lib[nr]ccl(-[0-9a-f]+)?\.so(\.[0-9.]+)?$"),  # NCCL and RCCL: one API
}
SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+-]+$")


@dataclass(frozen=True)
class MappedLibrary:
    """One runtime library file mapped by a traced process."""

    kind: str  # key of RUNTIME_LIBS
    path: str  # path to probe (through /proc/PID/root when the process is in another namespace)
    mapped_as: str  # the path as the process sees it
    pid: int
    problem: str | None = None  # why it cannot be probed (unsafe path, deleted file), else None


def _other_mount_ns(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    return False


def mapped_files(pid: int) -> dict[str, int]:
    """Every file path in /proc/PID/maps with the inode the process mapped, in order."""
    seen: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{int(pid)}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/") and parts[5] not in seen and parts[4].isdigit():
                seen[parts[5]] = int(parts[4])
    return seen


def mapped_paths(pid: int) -> list[str]:
    """Every file path in /proc/PID/maps, once each, in order (empty if unreadable)."""
    return list(mapped_files(pid))


def runtime_libraries(pids: tuple[int, ...] | list[int]) -> list[MappedLibrary]:
    """GPU runtime libraries mapped by `pids`, one entry per distinct file."""
    found: list[MappedLibrary] = []
    known: set[str] = set()
    for pid in pids:
        foreign = _other_mount_ns(pid)
        for mapped, inode in mapped_files(pid).items():
            name = mapped.removesuffix(" (deleted)").rsplit("/", 1)[-1]
            kind = next((k for k, pat in RUNTIME_LIBS.items() if pat.match(name)), None)
            if kind is None:
                continue
            path = f"/proc/{int(pid)}/root{mapped}" if foreign else mapped
            problem = None
            if mapped.endswith(" (deleted)"):
                problem = "the mapped file was deleted"
            elif not SAFE_PATH.match(path) or "/../" in path:
                problem = "path has characters we do not paste into bpftrace code"
            elif _inode(path) != inode:  # replaced meanwhile, or a symlink in a container's root
                problem = "the file at this path is not the one the process mapped (inode differs)"
            key = path if problem else file_identity(path)
            if key in known:
                continue
            known.add(key)
            found.append(MappedLibrary(kind, path, mapped, int(pid), problem))
    return found


def _inode(path: str) -> int | None:
    with contextlib.suppress(OSError):
        return os.stat(path).st_ino
    return None


def file_identity(path: str) -> str:
    """Device and inode of a file (one library reached by two paths counts once)."""
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{st.st_dev}:{st.st_ino}"


def own_libc() -> str | None:
    """The C library this process mapped (the uprobe handshake calls into it), or None."""
    for mapped in mapped_paths(os.getpid()):
        name = mapped.rsplit("/", 1)[-1]
        if re.match(r"^libc(\.so\.6|-[0-9.]+\.so)$", name) and SAFE_PATH.match(mapped):
            return mapped
    return None


def with_descendants(pids: tuple[int, ...] | list[int]) -> list[int]:
    """`pids` and every process descended from them right now (torchrun ranks map the runtime)."""
    out: list[int] = []
    todo = [int(p) for p in pids]
    while todo and len(out) < 4096:
        pid = todo.pop(0)
        if pid in out:
            continue
        out.append(pid)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    todo.extend(int(x) for x in (task / "children").read_text().split())
    return out


def executable_starts(pids: tuple[int, ...] | list[int], inode: int, name: str) -> list[tuple[int, int]]:
    """(pid, start address) of the first executable mapping of file `name` (its last path part)
    with inode `inode` in /proc/PID/maps of each of `pids` that maps it: where its code lies, to
    find the kernel's record of that mapping (probes/gpu_runtime_loads)."""
    out: list[tuple[int, int]] = []
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{int(pid)}/maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or "x" not in parts[1] or not parts[4].isdigit():
                    continue
                if int(parts[4]) == inode and parts[5].removesuffix(" (deleted)").rsplit("/", 1)[-1] == name:
                    out.append((int(pid), int(parts[0].split("-")[0], 16)))
                    break
    return out
