"""Control characters from files and other processes are shown, never sent to the terminal.

A result file, a lock file in a shared folder or a child's stderr can hold terminal escape
sequences (`\\x1b[2J` clears the screen, OSC sequences retitle the window or write the clipboard
on some terminals). Everything aorta prints goes through `visible`: the CLI swaps stdout and
stderr for `VisibleStream`s while a command runs (`visible_streams`), and the rich console, whose
own styling is the only escape sequence aorta writes on purpose, renders every string through it
and writes to the real stream (report/console.py).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

#: C0 controls but tab and newline, DEL, and the C1 controls (U+0080..U+009F)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _shown(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def visible(text: str) -> str:
    """`text` with every control character but tab and newline written out (`\\x1b`)."""
    return _CONTROLS.sub(_shown, text)


class VisibleStream:
    """A text stream that writes `visible(text)` to the stream it wraps; the rest is that stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(visible(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding …
        if name == "buffer":  # click would write bytes there, past this stream
            raise AttributeError(name)
        return getattr(self.raw, name)


def raw_stream(stream: Any) -> Any:
    """The stream under a VisibleStream (for the rich console, which escapes its own text)."""
    return stream.raw if isinstance(stream, VisibleStream) else stream


@contextlib.contextmanager
def visible_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr as VisibleStreams inside the block, restored afterwards."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = VisibleStream(saved[0]), VisibleStream(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
