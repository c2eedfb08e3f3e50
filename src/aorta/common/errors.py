"""Errors and exit codes: library code raises these, only the CLI prints them (one line) and exits.

Every kind of ending has one documented exit code (docs/troubleshooting.md, "Exit codes"):
0 ok · 1 the command ran but what it measured failed (verification, a point, a regression) ·
2 bad input or an environment problem the user can fix, nothing changed or written half-way ·
3 a GPU may be left changed (clocks/power could not be put back: run `restore`) ·
130 interrupted (SIGINT, Ctrl+C) · 143 terminated (SIGTERM).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The process exit codes of `aorta-hwq` / `python -m aorta.hw_queue_eval`."""

    OK = 0
    FAILED = 1  # the command ran; its outcome is a failure (verification, point, regression)
    USAGE = 2  # bad input / fixable environment: one line, nothing written half-way
    DEVICE_LEFT_CHANGED = 3  # a GPU may still run with changed clocks/power: run `restore`
    INTERRUPTED = 130  # SIGINT (128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15)


class AortaError(Exception):
    """Base of every error aorta raises for a person to read: one line, never a traceback.

    `exit_code` says which kind of ending it is; the CLI prints `error: <message>` and exits
    with it.
    """

    exit_code: ExitCode = ExitCode.FAILED


class UsageError(AortaError):
    """Bad input or an environment problem the user can fix; nothing was changed or written.

    The message names the problem and the fix in one line.
    """

    exit_code = ExitCode.USAGE


class MeasurementFailed(AortaError):
    """The command ran to its end, but nothing usable was measured (e.g. every repeat failed)."""

    exit_code = ExitCode.FAILED


class DeviceLeftChanged(AortaError):
    """A device could not be put back as found: it may still run with changed settings.

    Distinct from a typo on purpose: the machine is not as it was, and `restore` is the fix.
    """

    exit_code = ExitCode.DEVICE_LEFT_CHANGED


class Terminated(SystemExit):
    """Raised by the SIGTERM handler: exit 143, after a command has recorded where it stopped.

    A SystemExit, not an AortaError: a signal is not an error, and `except Exception` must not
    swallow it.
    """

    def __init__(self) -> None:
        super().__init__(ExitCode.TERMINATED)


class Interrupted(SystemExit):
    """Exit 130 after a command has recorded where Ctrl+C (SIGINT) stopped it."""

    def __init__(self) -> None:
        super().__init__(ExitCode.INTERRUPTED)
