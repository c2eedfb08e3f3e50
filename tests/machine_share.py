"""Share the machine between pytest-xdist workers: a `serial` test runs with no other test running.

A readers-writer lock over two flock(2) files in the run's own temp root (made by pytest for
root, mode 0700; never a shared folder). Ordinary tests hold the main lock shared; a `serial`
test holds it exclusive. The turnstile gives the writer preference: once a serial test waits,
no new test starts, so it waits only for the tests already running, never behind a stream of them.
Collection is no test: a serial test first waits until every worker has collected (each worker
imports torch and every test module, seconds of CPU that took the second core from the first
serial test).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TURNSTILE = "machine-turnstile.lock"
MAIN = "machine-main.lock"
COLLECTED = "collected-"  # + worker id: that worker has finished collecting


def _open_lock(folder: Path, name: str) -> int:
    """A lock file's descriptor; O_NOFOLLOW: never through a link planted in its place."""
    return os.open(folder / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def announce_collected(folder: Path, worker: str) -> None:
    """Mark `worker`'s collection done (a serial test waits for every worker's mark)."""
    os.close(_open_lock(folder, COLLECTED + worker))


def _wait_for_collections(folder: Path, workers: int, timeout_s: float = 300.0) -> None:
    """Block until `workers` workers have announced their collection (or `timeout_s` passes)."""
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob(COLLECTED + "*"))) < workers and time.monotonic() < deadline:
        time.sleep(0.05)


@contextmanager
def machine_share(folder: Path, alone: bool, workers: int) -> Iterator[None]:
    """Hold the machine shared with the other workers' tests, or `alone` (after all `workers`
    have collected) with none of them running."""
    if alone:
        _wait_for_collections(folder, workers)
    turnstile, main = _open_lock(folder, TURNSTILE), _open_lock(folder, MAIN)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # wait behind a serial test that is waiting
        if alone:
            fcntl.flock(main, fcntl.LOCK_EX)  # keep the turnstile: no new test starts meanwhile
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(main, fcntl.LOCK_SH)
        yield
    finally:
        os.close(main)  # closing releases each flock
        os.close(turnstile)
