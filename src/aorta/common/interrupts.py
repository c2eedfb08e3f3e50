"""Ctrl+C and SIGTERM in every phase of a command: exceptions while it works, ignored once it is done.

The documented endings (docs/troubleshooting.md, "Exit codes") are 130 for Ctrl+C and 143 for
SIGTERM, with nothing written. `catch_terminate` makes SIGTERM raise `Terminated` from the first
import on (Python's own SIGINT handler already raises KeyboardInterrupt). `commit` marks the moment
a command's outcome is decided (its outputs are about to be written, or it is ending): from then on
both signals are ignored, so a late one can neither claim "nothing was written" next to a written
file nor hit the interpreter's shutdown, which puts Python-level handlers back to the default and
died of the signal (−2, −15).
"""

from __future__ import annotations

import signal
from types import FrameType

from aorta.common.errors import Terminated

#: what a user sends to stop a command
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
#: the line a command interrupted before it wrote anything ends with
INTERRUPTED_LINE = "interrupted: nothing was written"


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler: end the command as `Terminated` (exit 143)."""
    raise Terminated()


def catch_terminate() -> None:
    """SIGTERM raises `Terminated` from now on (main thread only, as every signal handler)."""
    signal.signal(signal.SIGTERM, raise_terminated)


def commit() -> None:
    """The outcome is decided: ignore SIGINT and SIGTERM for the rest of this process."""
    for sig in INTERRUPTS:
        signal.signal(sig, signal.SIG_IGN)
