"""Shared by the commands (not a command itself): the --output / --json handling of a result."""

from __future__ import annotations

from typing import Any

import click

from aorta.common.atomicio import atomic_write_json
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
