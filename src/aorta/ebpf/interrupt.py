"""SIGINT for a bpftrace that has no EXIT marker, sent only while it can take it.

bpftrace (0.17 to 0.26) ends its poll loop on SIGINT, detaches, runs END, drains, then resets
SIGINT to the default action and prints its maps: a second SIGINT then kills it (exit -2). A
SIGINT that lands while it attaches, or between two waits of its poll loop, is noticed only at
its next event, and a program without events never notices it. So: send SIGINT when bpftrace's
main thread waits in `epoll_wait` with every probe still attached (its poll loop, not END's
drain), and again only while that stays so. Where /proc cannot show this (a root bpftrace under
sudo), fall back to re-sending while bpftrace has printed nothing since the first SIGINT.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

POLL_WCHAN = "do_epoll_wait"
RESEND_AFTER_S = 1.0  # a SIGINT not acted on by then was lost (the poll loop wakes every 0.1 s)


def waits_in_poll(pid: int) -> bool | None:
    """Whether `pid`'s main thread is blocked in epoll_wait; None when /proc cannot show it.
    (wchan reads "0" for a thread on a CPU, and for every thread of a process one may not trace:
    callers read only a bpftrace they started as root.)"""
    try:
        with open(f"/proc/{pid}/wchan") as fh:
            return fh.read().strip() == POLL_WCHAN
    except OSError:
        return None


def perf_event_fds(pid: int) -> int | None:
    """How many perf-event file descriptors `pid` holds (one or more per attached probe, one per
    CPU for the output buffers); None when /proc cannot show it."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    count = 0
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == "anon_inode:[perf_event]":
                count += 1
        except OSError:
            continue
    return count


@dataclass
class Interrupter:
    """Decides, each time it is asked, whether to send bpftrace a SIGINT now (see the module).

    `observable`: `pid` is bpftrace itself and its /proc is readable (not a sudo wrapper)."""

    pid: int
    observable: bool = True
    sent: int = 0
    _fds_at_first: int | None = None
    _last_sent_s: float = 0.0
    _lines_at_first: int = 0

    def send_if_due(self, now_s: float, lines_read: int) -> bool:
        """Send SIGINT if it is due now (see the module); True when one was sent."""
        polling = waits_in_poll(self.pid) if self.observable else None
        fds = perf_event_fds(self.pid) if self.observable else None
        if polling is None or fds is None:
            self.observable = False
            due = self.sent == 0 or lines_read == self._lines_at_first
        elif not polling:
            due = False  # attaching, detaching, or printing its maps: wait
        elif self.sent == 0:
            due = True
        else:  # still in the poll loop with every probe attached, well after the last: lost
            due = fds == self._fds_at_first and now_s - self._last_sent_s >= RESEND_AFTER_S
        if not due:
            return False
        try:
            os.kill(self.pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            return False
        if self.sent == 0:
            self._fds_at_first, self._lines_at_first = fds, lines_read
        self.sent += 1
        self._last_sent_s = now_s
        return True
