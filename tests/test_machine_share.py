"""The parallel-run lock (machine_share.py): a serial test never overlaps another, and once it
waits no new test starts before it (flock conflicts between separate opens, so threads stand in
for the workers)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import child_cpu_verdict, children_cpu_s
from machine_share import MAIN, TURNSTILE, announce_collected, machine_share


def _hold(
    folder: Path,
    alone: bool,
    release: threading.Event,
    log: list[tuple[str, float, float]],
    name: str,
) -> None:
    with machine_share(folder, alone, workers=1):
        began = time.monotonic()
        release.wait(10)
        log.append((name, began, time.monotonic()))


def _start(*args: object) -> threading.Thread:
    thread = threading.Thread(target=_hold, args=args)
    thread.start()
    return thread


def _waiting_on(lock: Path) -> int:
    """How many flock requests are blocked on `lock` now (/proc/locks: `->` lines, by inode)."""
    inode = os.stat(lock).st_ino
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->" and fields[6].rsplit(":", 1)[-1] == str(inode):
            count += 1
    return count


def _holders(lock: Path) -> list[str]:
    """The granted (not waiting) flock entries on `lock` now."""
    inode = os.stat(lock).st_ino
    return [
        line
        for line in Path("/proc/locks").read_text().splitlines()
        if line.split()[1] != "->" and line.split()[-3].rsplit(":", 1)[-1] == str(inode)
    ]


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


def test_a_serial_test_runs_alone_and_new_tests_queue_behind_it(tmp_path: Path) -> None:
    announce_collected(tmp_path, "gw0")
    log: list[tuple[str, float, float]] = []
    go = {name: threading.Event() for name in ("running", "serial", "later")}
    go["serial"].set()  # these two end as soon as they hold the machine; the running test ends
    go["later"].set()  # when told to, once both wait (seen in /proc/locks), not after a guess
    first = _start(tmp_path, False, go["running"], log, "running")  # a test already running
    _until(lambda: (tmp_path / MAIN).exists() and len(_holders(tmp_path / MAIN)) == 1, "running holds")
    serial = _start(tmp_path, True, go["serial"], log, "serial")
    _until(lambda: _waiting_on(tmp_path / MAIN) == 1, "the serial test waits for the running one")
    later = _start(tmp_path, False, go["later"], log, "later")  # arrives while the serial test waits
    _until(lambda: _waiting_on(tmp_path / TURNSTILE) == 1, "the later test waits at the turnstile")
    go["running"].set()
    for thread in (first, serial, later):
        thread.join(10)
    spans = {name: (began, ended) for name, began, ended in log}
    assert set(spans) == {"running", "serial", "later"}
    assert spans["serial"][0] >= spans["running"][1]  # never beside a running test
    assert spans["later"][0] >= spans["serial"][1]  # writer preference: not overtaken


def test_shared_tests_run_side_by_side(tmp_path: Path) -> None:
    log: list[tuple[str, float, float]] = []
    release = threading.Event()
    threads = [_start(tmp_path, False, release, log, f"t{i}") for i in range(3)]
    _until(lambda: (tmp_path / MAIN).exists() and len(_holders(tmp_path / MAIN)) == 3, "all three hold")
    release.set()
    for thread in threads:
        thread.join(10)
    starts, ends = [b for _, b, _ in log], [e for _, _, e in log]
    assert max(starts) < min(ends)  # all three held the machine at once


@pytest.mark.slow
def test_a_heavy_child_is_over_the_inner_loops_budget() -> None:
    """The conftest rule measures what children really used: a child burning 1.5 s of CPU is
    over budget (an unmarked test starting it fails), a child that only starts is not."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass"
    before = children_cpu_s()
    subprocess.run([sys.executable, "-I", "-S", "-c", burn], check=True)
    assert "mark it @pytest.mark.slow" in (child_cpu_verdict(children_cpu_s() - before) or "")
    before = children_cpu_s()
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    assert child_cpu_verdict(children_cpu_s() - before) is None
