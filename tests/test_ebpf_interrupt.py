"""When stop() may SIGINT a bpftrace without the EXIT marker: only while its poll loop waits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from aorta.ebpf import interrupt
from aorta.ebpf.interrupt import Interrupter

# a child that survives SIGINT (it counts them on stdout) and waits in epoll_wait, or in a sleep
_CHILD = """
import select, signal, sys, time
signal.signal(signal.SIGINT, lambda *_: print("sigint", flush=True))
print("ready", flush=True)
if sys.argv[1] == "poll":
    select.epoll().poll(60)
else:
    time.sleep(60)
"""


def _child(where: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-I", "-c", _CHILD, where], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 10
    while not _blocked_in(proc.pid, where):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


@pytest.fixture
def polling_child():
    proc = _child("poll")
    yield proc
    proc.kill()
    proc.wait()


def test_waits_in_poll_tells_epoll_from_a_sleep(polling_child) -> None:
    sleeper = _child("sleep")
    try:
        assert interrupt.waits_in_poll(polling_child.pid) is True
        assert interrupt.waits_in_poll(sleeper.pid) is False
    finally:
        sleeper.kill()
        sleeper.wait()
    assert interrupt.waits_in_poll(sleeper.pid) is None  # gone: /proc cannot show it


def test_sigint_is_sent_once_and_again_only_when_it_was_lost(polling_child) -> None:
    interrupter = Interrupter(polling_child.pid)
    t0 = time.monotonic()
    assert interrupter.send_if_due(t0, 0)
    assert polling_child.stdout is not None and polling_child.stdout.readline() == "sigint\n"
    _wait_polling(polling_child.pid)
    # polling again with the same (no) perf-event fds: a repeat only after RESEND_AFTER_S
    assert not interrupter.send_if_due(t0 + interrupt.RESEND_AFTER_S / 2, 0)
    assert interrupter.send_if_due(t0 + interrupt.RESEND_AFTER_S, 0)
    assert interrupter.sent == 2


def test_no_sigint_while_it_is_not_polling() -> None:
    sleeper = _child("sleep")
    try:
        interrupter = Interrupter(sleeper.pid)
        assert not interrupter.send_if_due(time.monotonic(), 0)
        assert interrupter.sent == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_unobservable_falls_back_to_resending_while_silent(polling_child) -> None:
    interrupter = Interrupter(polling_child.pid, observable=False)
    assert interrupter.send_if_due(0.0, lines_read=5)
    assert interrupter.send_if_due(0.1, lines_read=5)  # nothing printed since: again
    assert not interrupter.send_if_due(0.2, lines_read=6)  # it printed: never again
    assert interrupter.sent == 2


def _wait_polling(pid: int) -> None:
    deadline = time.monotonic() + 10
    while not interrupt.waits_in_poll(pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _blocked_in(pid: int, where: str) -> bool:
    """The child waits in epoll_wait ("poll") or in its sleep (a nanosleep function)."""
    wchan = Path(f"/proc/{pid}/wchan").read_text()
    return wchan == interrupt.POLL_WCHAN if where == "poll" else "nanosleep" in wchan
