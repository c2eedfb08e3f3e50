"""An advisory lock beside an output file, so two runs never write the same checkpoint at once.

Two sweeps on the same `-o` would each rewrite the file after every point and one's points would
vanish; the second one exits 2 naming the holder instead. The lock file (`.NAME.lock` in the same
folder, opened through atomicio's safe folder walk, never through a link) is removed on release;
a holder killed with -9 releases the lock with its descriptor, so a stale file is harmless.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys

from aorta.common.atomicio import parent_folder
from aorta.common.errors import UsageError

#: O_NONBLOCK: a FIFO planted as the lock file must not hang the open (it is refused after it)
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class OutputLock:
    """An exclusive flock on `.NAME.lock` beside `path`; `release()` drops and removes it."""

    def __init__(self, path: str | os.PathLike[str], what: str = "output file") -> None:
        self.path = os.fspath(path)
        self._stack = contextlib.ExitStack()
        self._dir_fd, name = self._stack.enter_context(parent_folder(path, what))
        self.name = f".{name}.lock"
        try:
            self._fd = self._acquire(what)
        except BaseException:
            self._stack.close()
            raise

    def _acquire(self, what: str) -> int:
        for _ in range(10):
            try:
                fd = os.open(self.name, _FLAGS, 0o644, dir_fd=self._dir_fd)
            except OSError as exc:
                raise UsageError(
                    f"cannot lock {what} {self.path}: {exc.strerror} on {self.name}; choose another -o"
                ) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise UsageError(
                    f"cannot lock {what} {self.path}: {self.name} is not a regular file; "
                    "remove it or choose another -o"
                )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 300).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise UsageError(
                    f"{what} {self.path} is in use by {holder}: wait for it to end or choose another -o"
                ) from None
            try:  # the name may have been released and removed between open and flock: retry
                now = os.stat(self.name, dir_fd=self._dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            mine = os.fstat(fd)
            if now is not None and (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev):
                self._note_holder(fd, what)
                return fd
            os.close(fd)
        raise UsageError(f"cannot lock {what} {self.path}: the lock file keeps changing")

    def _note_holder(self, fd: int, what: str) -> None:
        """Write who holds the lock into it; a full disk removes the lock again (no 0-byte
        file left) and is one line, exit 2."""
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} ({' '.join(sys.argv[:3])[:200]})\n".encode())
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self.name, dir_fd=self._dir_fd)
            os.close(fd)
            raise UsageError(
                f"cannot lock {what} {self.path}: {exc.strerror} writing {self.name}; "
                "free space or choose another -o"
            ) from None

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.name, dir_fd=self._dir_fd)
        os.close(self._fd)
        self._fd = -1
        self._stack.close()
