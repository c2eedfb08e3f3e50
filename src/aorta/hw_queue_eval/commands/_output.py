"""Shared by the commands (not a command itself): the --output / --json handling of a result,
the lock on an output, and what a checkpointing command writes when Ctrl+C or SIGTERM stops it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import click

from aorta.common.atomicio import atomic_write_json
from aorta.common.errors import Interrupted, Terminated
from aorta.common.outlock import OutputLock


def save_and_print_json(data: Any, output: str | None, as_json: bool) -> bool:
    """Write data to --output when given and print it as JSON when --json; True if printed.

    Every command that offers both options treats them the same way; a True return means the
    caller's text view should be skipped.
    """
    if output:
        atomic_write_json(output, data)
    if as_json:
        import json

        click.echo(json.dumps(data, indent=2))
        return True
    return False


def hold_output_lock(output: str, what: str) -> None:
    """Lock `output` for this command (exit 2 naming the holder if taken); released at exit."""
    lock = OutputLock(output, what)
    click.get_current_context().call_on_close(lock.release)


@contextlib.contextmanager
def saved_on_interrupt(save: Callable[[str], None], message: Callable[[str], str]) -> Iterator[None]:
    """Ctrl+C or SIGTERM inside the block: `save(state)`, then `message(state)` on stderr, then
    exit 130 (`Interrupted`) or 143 (`Terminated`).

    `state` is "interrupted" (KeyboardInterrupt) or "terminated" (`Terminated`), the state the
    checkpoint file is left in; `message` is built after `save`, so it can count what was kept.
    The one ending of sweep, policy-sweep and suite (docs/troubleshooting.md, "Exit codes").
    """
    try:
        yield
    except (KeyboardInterrupt, Terminated) as exc:
        state = "terminated" if isinstance(exc, Terminated) else "interrupted"
        save(state)
        click.echo(message(state), err=True)
        raise (Terminated() if state == "terminated" else Interrupted()) from None
