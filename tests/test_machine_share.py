"""The parallel-run lock (machine_share.py): a serial test never overlaps another, and once it
waits no new test starts before it (flock conflicts between separate opens, so threads stand in
for the workers)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from machine_share import announce_collected, machine_share


def _hold(folder: Path, alone: bool, seconds: float, log: list[tuple[str, float, float]], name: str) -> None:
    with machine_share(folder, alone, workers=1):
        began = time.monotonic()
        time.sleep(seconds)
        log.append((name, began, time.monotonic()))


def _start(*args: object) -> threading.Thread:
    thread = threading.Thread(target=_hold, args=args)
    thread.start()
    return thread


def test_a_serial_test_runs_alone_and_new_tests_queue_behind_it(tmp_path: Path) -> None:
    announce_collected(tmp_path, "gw0")
    log: list[tuple[str, float, float]] = []
    first = _start(tmp_path, False, 0.4, log, "running")  # a test already running
    time.sleep(0.1)
    serial = _start(tmp_path, True, 0.3, log, "serial")  # waits for it
    time.sleep(0.1)
    later = _start(tmp_path, False, 0.1, log, "later")  # arrives while the serial test waits
    for thread in (first, serial, later):
        thread.join(10)
    spans = {name: (began, ended) for name, began, ended in log}
    assert set(spans) == {"running", "serial", "later"}
    assert spans["serial"][0] >= spans["running"][1]  # never beside a running test
    assert spans["later"][0] >= spans["serial"][1]  # writer preference: not overtaken


def test_shared_tests_run_side_by_side(tmp_path: Path) -> None:
    log: list[tuple[str, float, float]] = []
    threads = [_start(tmp_path, False, 0.3, log, f"t{i}") for i in range(3)]
    for thread in threads:
        thread.join(10)
    starts, ends = [b for _, b, _ in log], [e for _, _, e in log]
    assert max(starts) < min(ends)  # all three held the machine at once
