"""Create host-memory pressure around a command: a memory cgroup limit plus a page-cache churner.

    sudo .venv/bin/python -I -m aorta.tools.memory_pressure --limit 1536M -- \\
        .venv/bin/aorta-hwq run hetero_kernels --streams 8 --ebpf-memory-trace -o r.json

The command and a small churner run in a child memory cgroup (cgroup v2 `memory.max`, or v1
`memory.limit_in_bytes` on hybrid hosts) created under the caller's own cgroup, so every limit the
host already imposes still applies. The churner reads a sparse file (no disk space) larger than
the limit, so the cgroup's page cache always fills up to the limit; any memory the command then
touches has to be reclaimed first, in the command's own context (memcg reclaim), with no swap and
no OOM kill (page cache is always reclaimable). Everything is undone on every exit path: the
churner is stopped, the processes moved back and the cgroup removed. After a kill -9 of the
helper nothing is left either: the churner gets SIGKILL when the helper dies (parent-death
signal), the sparse file is unlinked as soon as it is created (the churner reads it through an
inherited descriptor), and a cgroup left behind is removed by the next start, which also kills any
churner still inside it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.procs import child_environment, die_with_parent, parse_pid, pid_alive, python_module_command

PREFIX = "aorta-pressure-"
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
TMPFS_MAGIC = 0x01021994
MIN_LIMIT = 64 << 20  # below this the command itself (python, torch) cannot start: OOM kill
CHURN_WORKER_FLAG = "--churn-worker"


def parse_size(text: str, what: str = "size") -> int:
    """'768M', '1.5G', '4096' → bytes; UsageError for anything else."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(f"bad {what} {text!r}: use a number with an optional K/M/G suffix, e.g. 768M")
    number = float(match.group(1))
    if number > 1 << 53:
        raise UsageError(f"bad {what} {text!r}: too large")
    value = int(number * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise UsageError(f"bad {what} {text!r}: must be positive")
    return value


def check_limit(limit: int, text: str) -> None:
    """The cgroup limit must leave the command room to start and be below the machine's memory."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if limit < MIN_LIMIT:
        raise UsageError(
            f"--limit {text} is below {MIN_LIMIT >> 20}M: the command would be "
            "OOM-killed before it starts; use e.g. --limit 1536M"
        )
    if limit >= total:
        raise UsageError(
            f"--limit {text} is not below this machine's memory "
            f"({total >> 20}M): it would create no pressure; use a smaller limit"
        )


@dataclass(frozen=True)
class CgroupPlace:
    """Where this process's memory cgroup lives: version 1 or 2 and its folder."""

    version: int
    path: Path


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, fs type, super options, root within the fs) of every mount (mountinfo)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 3:
            out.append(
                (fields[4].replace("\\040", " "), rfields[0], rfields[2], fields[3].replace("\\040", " "))
            )
    return out


def _under(point: str, root: str, path: str) -> Path | None:
    """Where cgroup `path` lies under a mount of the hierarchy's `root` at `point` (None: not in it).

    Containers mount only their own subtree (root = /…/libpod-<id>) while /proc/self/cgroup may
    name the full path: the folder is the mount point plus the part below the mount's root.
    """
    root = root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    return Path(point) / path[len(root) :].lstrip("/")


def find_memory_cgroup() -> CgroupPlace:
    """This process's memory cgroup folder (v2 if it has the memory controller, else v1)."""
    memberships = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _hier, controllers, path = line.split(":", 2)
        memberships[controllers] = path
    mounts = _mounts()
    if "" in memberships:
        for point, fstype, _, root in mounts:
            folder = _under(point, root, memberships[""]) if fstype == "cgroup2" else None
            if folder is not None:
                ctl = folder / "cgroup.controllers"
                if ctl.is_file() and "memory" in ctl.read_text().split():
                    return CgroupPlace(2, folder)
    for controllers, path in memberships.items():
        if "memory" in controllers.split(","):
            for point, fstype, opts, root in mounts:
                if fstype == "cgroup" and "memory" in opts.split(","):
                    folder = _under(point, root, path)
                    if folder is not None:
                        return CgroupPlace(1, folder)
    raise UsageError(
        "no memory cgroup controller found (neither cgroup v2 with 'memory' nor a v1 "
        "memory hierarchy): memory pressure needs one"
    )


def _write(path: Path, value: str) -> None:
    """Write a cgroup control file (no O_CREAT: these files exist or the write is wrong)."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def remove_stale(parent: Path) -> list[str]:
    """Remove pressure cgroups left by runs whose owner died (hard kill); returns their names."""
    removed: list[str] = []
    try:
        children = list(parent.iterdir())
    except OSError:
        return removed
    for child in children:
        if not child.name.startswith(PREFIX) or child.is_symlink() or not child.is_dir():
            continue
        owner = child.name[len(PREFIX) :]
        if owner.isdigit() and pid_alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            for pid in (child / "cgroup.procs").read_text().split():
                if _is_churner(pid):
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
                    continue
                with contextlib.suppress(OSError):
                    _write(parent / "cgroup.procs", pid)
        for _ in range(50):  # a killed churner leaves the cgroup once it has exited
            with contextlib.suppress(OSError):
                if not (child / "cgroup.procs").read_text().split():
                    break
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            child.rmdir()
            removed.append(child.name)
    return removed


def _is_churner(pid_text: str) -> bool:
    """True if the process is a churner of this helper (left running by an older version)."""
    pid = parse_pid(pid_text)
    if pid is None:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"aorta.tools.memory_pressure" in argv and CHURN_WORKER_FLAG.encode() in argv


class MemoryPressure:
    """A child memory cgroup with a limit and a page-cache churner; a context manager."""

    def __init__(
        self,
        limit_bytes: int,
        churn_bytes: int | None = None,
        churn_rate_bytes_s: int = 256 << 20,
        churn_dir: str | None = None,
    ) -> None:
        self.limit = limit_bytes
        self.churn_bytes = churn_bytes if churn_bytes is not None else 2 * limit_bytes
        self.rate = churn_rate_bytes_s
        self.churn_dir = churn_dir if churn_dir is not None else tempfile.gettempdir()
        self.place: CgroupPlace | None = None
        self.folder: Path | None = None
        self.churner: subprocess.Popen[bytes] | None = None

    # -- set up

    def __enter__(self) -> MemoryPressure:
        if os.geteuid() != 0:
            raise UsageError("memory pressure needs root (it creates a cgroup): run with sudo")
        self.place = find_memory_cgroup()
        remove_stale(self.place.path)
        folder = self.place.path / f"{PREFIX}{os.getpid()}"
        try:
            folder.mkdir()
        except OSError as exc:
            raise UsageError(
                f"cannot create cgroup {folder}: {exc.strerror}; is the memory "
                "controller delegated to this cgroup?"
            ) from None
        self.folder = folder
        try:
            limit_file = "memory.max" if self.place.version == 2 else "memory.limit_in_bytes"
            _write(folder / limit_file, str(self.limit))
            self._start_churner()
        except BaseException:
            self.close()
            raise
        return self

    def _start_churner(self) -> None:
        if _is_tmpfs(self.churn_dir):
            raise UsageError(
                f"{self.churn_dir} is tmpfs (its pages cannot be reclaimed "
                "without swap): pass --churn-dir on a disk file system"
            )
        try:
            fd, path = tempfile.mkstemp(prefix=".aorta-churn-", dir=self.churn_dir)
        except OSError as exc:
            raise UsageError(
                f"cannot create the churn file in {self.churn_dir}: {exc.strerror}; "
                "pass --churn-dir with a writable folder on a disk file system"
            ) from None
        try:
            os.unlink(path)  # nothing on disk to leave behind: the churner reads the open file
            try:
                os.ftruncate(fd, self.churn_bytes)  # sparse: page cache without disk space
            except OSError as exc:
                raise UsageError(
                    f"cannot size the churn file to {self.churn_bytes} bytes in "
                    f"{self.churn_dir}: {exc.strerror}; use a smaller --churn"
                ) from None
            assert self.folder is not None and self.place is not None
            usage = self.folder / ("memory.current" if self.place.version == 2 else "memory.usage_in_bytes")
            guard = die_with_parent()

            def preexec() -> None:
                self.enter_preexec()
                guard()

            self.churner = subprocess.Popen(  # isolated: nothing from the cwd runs as root
                python_module_command(
                    "aorta.tools.memory_pressure",
                    CHURN_WORKER_FLAG,
                    f"/dev/fd/{fd}",
                    "--rate",
                    str(self.rate),
                    "--usage-file",
                    str(usage),
                    "--limit",
                    str(self.limit),
                ),
                env=child_environment(),
                preexec_fn=preexec,
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        finally:
            os.close(fd)

    def enter_preexec(self) -> None:
        """For subprocess preexec_fn: move the new child into the cgroup before it execs."""
        assert self.folder is not None
        _write(self.folder / "cgroup.procs", str(os.getpid()))

    # -- use

    def add(self, pid: int) -> None:
        """Move a running process into the cgroup (new memory it touches is charged here)."""
        assert self.folder is not None
        _write(self.folder / "cgroup.procs", str(int(pid)))

    def run(self, argv: list[str]) -> int:
        """Run a command inside the cgroup; SIGINT/SIGTERM are forwarded; returns its exit code."""
        try:
            proc = subprocess.Popen(argv, preexec_fn=self.enter_preexec)
        except OSError as exc:
            raise UsageError(f"cannot start {argv[0]!r}: {exc.strerror}; check the command") from None

        def forward(signum: int, frame: Any) -> None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return proc.wait()
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def stats(self) -> dict[str, str | int | None]:
        """The cgroup's own counters (limit hits, usage) as independent evidence of pressure."""
        if self.folder is None or self.place is None:
            return {}
        names = (
            ("memory.events", "memory.current")
            if self.place.version == 2
            else ("memory.failcnt", "memory.usage_in_bytes", "memory.max_usage_in_bytes")
        )
        out: dict[str, str | int | None] = {
            "cgroup": str(self.folder),
            "version": self.place.version,
            "limit_bytes": self.limit,
        }
        for name in names:
            with contextlib.suppress(OSError):
                text = (self.folder / name).read_text().strip()
                out[name] = int(text) if text.isdigit() else text
        return out

    # -- tear down

    def close(self) -> None:
        """Stop the churner (its unlinked file goes with it), move processes back, remove the cgroup."""
        if self.churner is not None:
            with contextlib.suppress(ProcessLookupError):
                self.churner.terminate()
            try:
                self.churner.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.churner.kill()
                self.churner.wait()
            self.churner = None
        if self.folder is not None and self.place is not None:
            for _ in range(50):
                try:
                    pids = (self.folder / "cgroup.procs").read_text().split()
                except OSError:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        _write(self.place.path / "cgroup.procs", pid)
                try:
                    self.folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
            self.folder = None

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_inputs(churn_dir: str, command: list[str]) -> None:
    """Before any cgroup exists: the churn folder is a real disk folder, the command exists."""
    if not churn_dir or not os.path.isdir(churn_dir):
        raise UsageError(
            f"--churn-dir {churn_dir!r} is not an existing folder: create it or "
            "name one on a disk file system"
        )
    if _is_tmpfs(churn_dir):
        raise UsageError(
            f"{churn_dir} is tmpfs (its pages cannot be reclaimed without swap): "
            "pass --churn-dir on a disk file system"
        )
    if not command[0] or shutil.which(command[0]) is None:
        raise UsageError(
            f"command {command[0]!r} not found or not executable: give a program on PATH or its path after --"
        )


def _is_tmpfs(path: str) -> bool:
    """True when `path` is on tmpfs (its pages are unreclaimable without swap)."""
    best = ("", "")
    real = os.path.realpath(path)
    for point, fstype, _, _ in _mounts():
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best[0]):
            best = (point, fstype)
    return best[1] == "tmpfs"


def churn(path: str, rate_bytes_s: int, usage_file: str | None = None, limit: int = 0) -> None:
    """Keep the cgroup's page cache topped up to its limit by reading new pages of `path`.

    Every millisecond the churner reads as many not-yet-cached pages as the cgroup has room for
    (at most `rate_bytes_s`), one page per read with readahead off, so the cgroup sits at its
    limit: the next page anyone in it touches must first be reclaimed, in that task's context.
    Without `usage_file` it just streams through the file at `rate_bytes_s`.
    """
    page, tick = os.sysconf("SC_PAGE_SIZE"), 0.001
    per_tick = max(1, int(rate_bytes_s * tick) // page)
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    size, offset = max(os.fstat(fd).st_size, page), 0
    while True:
        pages = per_tick
        if usage_file:
            try:
                with open(usage_file) as fh:
                    room = limit - int(fh.read())
            except (OSError, ValueError):
                room = 0
            pages = min(per_tick, max(0, room // page))
        for _ in range(pages):
            os.pread(fd, 1, offset)
            offset = (offset + page) % size
        time.sleep(tick)


def main(argv: list[str] | None = None) -> int:
    """CLI: run a command under memory pressure (or, internally, be the churner)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m aorta.tools.memory_pressure",
        description="Run COMMAND in a memory cgroup whose page cache is kept full, so the "
        "command's own allocations go through memcg reclaim.",
    )
    parser.add_argument("--limit", help="memory limit of the cgroup, e.g. 1536M")
    parser.add_argument("--churn", help="page cache the churner cycles through (default 2×limit)")
    parser.add_argument("--rate", default="256M", help="churner read rate per second (default 256M)")
    parser.add_argument("--churn-dir", help="folder for the sparse churn file (not tmpfs)")
    parser.add_argument("--churn-worker", help=argparse.SUPPRESS)
    parser.add_argument("--usage-file", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    if args.churn_worker:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        churn(
            args.churn_worker,
            parse_size(args.rate, "--rate"),
            args.usage_file,
            parse_size(args.limit, "--limit") if args.limit else 0,
        )
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if not args.limit or not command:
            raise UsageError("give --limit SIZE and a command after --")
        limit = parse_size(args.limit, "--limit")
        check_limit(limit, args.limit)
        pressure = MemoryPressure(
            limit,
            parse_size(args.churn, "--churn") if args.churn else None,
            parse_size(args.rate, "--rate"),
            args.churn_dir,
        )
        check_inputs(pressure.churn_dir, command)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with pressure:
            code = pressure.run(command)
            print(f"memory pressure: {pressure.stats()}", file=sys.stderr)
            return code
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
