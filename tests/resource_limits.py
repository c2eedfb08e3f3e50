"""Tell genuine resource exhaustion (fork/thread creation refused with EAGAIN) from logic failures.

Several suites at once on a small machine can exhaust the process or thread limit; a test that
then fails says nothing about aorta. conftest turns exactly these failures into skips with the
reason (failures when CI=true); everything else stays a failure.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any

#: Standard-library (file, function) frames that create a process or a thread.
CREATION_FRAMES = {
    ("subprocess.py", "_execute_child"),
    ("threading.py", "start"),
    ("popen_fork.py", "_launch"),
    ("popen_spawn_posix.py", "_launch"),
    ("forkserver.py", "connect_to_new_process"),
}

#: Lines a child process prints when it could not create a process or a thread.
CHILD_LINES = re.compile(
    r"^(RuntimeError: can't start new thread"
    r"|error: cannot start another thread \(the process or memory limit is reached\)"
    r"|libgomp: Thread creation failed: Resource temporarily unavailable"
    r"|.*pthread_create.*Resource temporarily unavailable"
    r"|BlockingIOError: \[Errno 11\] Resource temporarily unavailable)",
    re.MULTILINE,
)


def _is_creation_error(exc: BaseException) -> bool:
    if isinstance(exc, RuntimeError):
        return "can't start new thread" in str(exc)
    return isinstance(exc, OSError) and exc.errno == errno.EAGAIN


def exhaustion_reason(exc: BaseException, frames: list[tuple[str, str, str]]) -> str | None:
    """Why this failure is resource exhaustion (None when it may be a logic failure).

    `frames` are the traceback's (file, function, source line), outermost first. In this
    process: EAGAIN / "can't start new thread" raised inside a standard-library call that creates
    a process or thread (or from a line calling fork). From a child: an assertion whose message
    carries the child's own report of the same refusal.
    """
    if _is_creation_error(exc):
        creating = any((Path(file).name, func) in CREATION_FRAMES for file, func, _ in frames)
        if creating or (frames and "fork(" in frames[-1][2]):
            return f"{type(exc).__name__}: {exc} (creating a process or thread)"
        return None  # e.g. a non-blocking lock or read: a logic path, never skipped
    if isinstance(exc, AssertionError):
        found = CHILD_LINES.search(str(exc))
        if found is None:
            return None
        if found.group(0).startswith("BlockingIOError") and not re.search(
            r"_execute_child|_fork_exec|os\.fork|threading\.py", str(exc)
        ):
            return None  # an EAGAIN in a child, but not from creating a process or thread
        return f"a child process could not create a process or thread: {found.group(0).strip()}"
    return None


def frames_of(excinfo: Any) -> list[tuple[str, str, str]]:
    """(file, function, source line) of each frame of a pytest ExceptionInfo, outermost first."""
    frames = []
    for entry in excinfo.traceback:
        try:
            line = str(entry.statement)
        except Exception:  # source not available (a frozen module)
            line = ""
        frames.append((str(entry.path), entry.name, line))
    return frames
