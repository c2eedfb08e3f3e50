"""Errors a user can fix: the CLI prints them as one line and exits 2."""


class UsageError(Exception):
    """Bad input or an environment problem the user can fix; never shown as a traceback.

    The message names the problem and the fix in one line.
    """

    exit_code = 2


class Terminated(SystemExit):
    """Raised by the SIGTERM handler: exit 143, after a command has recorded where it stopped."""

    def __init__(self) -> None:
        super().__init__(143)
