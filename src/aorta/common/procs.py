"""Process facts shared by the clean-up paths that run after a hard kill."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path

PID_MAX = 1 << 22  # Linux's largest pid_max: a bigger "pid" in a foreign name is not a pid
_PR_SET_PDEATHSIG = 1


def parse_pid(text: str) -> int | None:
    """A pid from untrusted text (a folder name, an env value), None unless 1..PID_MAX digits."""
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        return None
    value = int(text)
    return value if 0 < value <= PID_MAX else None


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (also when it belongs to another user)."""
    if not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A subprocess `preexec_fn`: the child gets `sig` when this process dies, even during exec.

    PR_SET_PDEATHSIG is set in the child before exec; if the parent already died between fork and
    that call (the signal would never come), the child exits at once instead. SIGKILL cannot be
    caught or lost, unlike SIGTERM which bpftrace drops while it attaches probes.
    """
    parent = os.getpid()

    def preexec() -> None:
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def process_state(pid: int) -> str | None:
    """The state letter of a process from /proc (R, S, D, Z …), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rindex(")") + 2:].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def process_running(pid: int) -> bool:
    """True while the process exists and has not exited (a zombie has exited)."""
    return process_state(pid) not in (None, "Z", "X")


def thread_group_of(pid: int) -> int | None:
    """The process (thread group) a thread id belongs to, from /proc/ID/status Tgid."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def ppid_of(pid: int) -> int | None:
    """The parent pid of `pid` from /proc (None when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_ancestor(ancestor: int, pid: int, depth: int = 4) -> bool:
    """True if `ancestor` is among the first `depth` parents of `pid`."""
    current: int | None = pid
    for _ in range(depth):
        current = ppid_of(current) if current else None
        if current is None or current <= 1:
            return False
        if current == ancestor:
            return True
    return False


def stale_owned_dirs(root: str, prefix: str) -> list[str]:
    """Folders `root/<prefix><pid>-…` of this user whose owning pid is dead (left by a kill -9).

    Names in a shared folder are foreign input: anything not a real folder owned by the current
    user, or whose pid part is not a plausible pid, is ignored (never parsed further, never removed).
    """
    found = []
    try:
        names = os.listdir(root)
    except OSError:
        return found
    for name in names:
        if not name.startswith(prefix):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        pid = parse_pid(name[len(prefix):].split("-", 1)[0])
        if pid is not None and not pid_alive(pid):
            found.append(path)
    return found
