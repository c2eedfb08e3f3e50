"""The rows every eBPF console block shares: a block's header (or why it is missing), a labelled
value, a table, the dropped-updates and helper-error texts; and `BlockRecorder`, a console
stand-in that keeps the same blocks as data so the HTML page shows exactly what the console does.

One module for them so the queue, comparison and memory blocks read the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from aorta.common.jsontypes import JsonObject

# bpftrace helper failures that are part of normal operation (helper name, return code) → why
BENIGN_HELPER_ERRORS = {
    ("map_delete_elem", -2): "a delete of a key the map does not hold (ENOENT): the probes clear "
    "their keys whether or not an event stored one, so these are expected",
}


@dataclass
class Block:
    """One eBPF block as the console prints it: its title and items in order."""

    title: str
    items: list[tuple[str, Any]] = field(default_factory=list)  # (kind, payload)


class BlockRecorder:
    """Console stand-in: records titles, labelled rows, tables and notes instead of printing."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []

    def _add(self, kind: str, payload: Any) -> None:
        if not self.blocks:
            self.blocks.append(Block(""))
        self.blocks[-1].items.append((kind, payload))

    def print(self, text: str = "", **_: Any) -> None:
        """Classify one printed line: title, note (dim), warning, bullet, or plain text."""
        from rich.text import Text

        stripped = text.strip()
        plain = Text.from_markup(stripped).plain
        if stripped.startswith("[bold]"):
            self.blocks.append(Block(plain.rstrip(":")))
        elif stripped.startswith("[dim]"):
            self._add("note", plain)
        elif stripped.startswith("[yellow]warning"):
            self._add("warning", plain.removeprefix("warning:").strip())
        elif plain.startswith("• "):
            self._add("bullet", plain[2:])
        elif plain:
            self._add("text", plain)

    def row(self, label: str, value: str) -> None:
        self._add("row", (label, value))

    def table(self, caption: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self._add("table", (caption, list(headers), [list(r) for r in rows]))


def labelled(console: Any, label: str, value: str, width: int = 22) -> None:
    """One "label: value" row, the label padded to width so each block's values line up."""
    if isinstance(console, BlockRecorder):
        console.row(label, value)
        return
    console.print(f"  {label + ':':<{width}}{value}")


def table(
    console: Any, caption: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
) -> None:
    """A table under a caption: columns are (header, format spec such as '>6' or '<10.10'); the
    last column is printed unpadded. The recorder keeps headers and cells as they are."""
    if isinstance(console, BlockRecorder):
        console.table(caption, [h for h, _ in columns], rows)
        return
    console.print(f"  {caption}")

    def line(cells: Sequence[Any]) -> str:
        padded = [f"{c!s:{spec}}" for c, (_, spec) in zip(cells[:-1], columns[:-1], strict=True)]
        return "    " + " ".join([*padded, str(cells[-1])])

    console.print(line([h for h, _ in columns]))
    for row in rows:
        console.print(line(row))


def open_block(
    section: JsonObject | None, console: Any, title: str, unavailable: str = "tracing {status}"
) -> TypeGuard[JsonObject]:
    """Print a block's title, or why its section is not ok; True when the body should follow
    (a TypeGuard: after it the section is known to be a dict).

    Shared by every eBPF block so the header and the not-ok line read the same everywhere;
    unavailable is formatted with the section's status.
    """
    if section is None:
        return False
    console.print(f"\n[bold]{title}:[/bold]")
    if section.get("status") != "ok":
        console.print(f"  {unavailable.format(status=section.get('status'))}: {section.get('error')}")
        return False
    return True


def dropped_text(section: JsonObject) -> str | None:
    """ "N (map count, …)": updates full maps refused; None for results without the field."""
    cap = section.get("map_capacity")
    if not isinstance(cap, dict):
        return None
    dropped = cap.get("dropped_updates") or {}
    per_map = ", ".join(f"{name} {count}" for name, count in sorted(dropped.items()))
    return f"{cap.get('dropped_updates_total', 0)}" + (f" ({per_map})" if per_map else "")


def _helper_key(key: str) -> tuple[str, int | None]:
    """'map_delete_elem -2' → ('map_delete_elem', -2)."""
    helper, _, code = key.rpartition(" ")
    try:
        return helper, int(code)
    except ValueError:
        return key, None


def helper_error_text(section: JsonObject) -> str | None:
    """The helper errors that mean something, explained; None when there are none.

    bpftrace reports every failed helper call; failed map updates are the dropped updates, and
    the kinds in BENIGN_HELPER_ERRORS are part of normal operation, so neither is listed here.
    """
    other = (section.get("map_capacity") or {}).get("other_helper_errors") or {}
    serious = [
        f"{key}: {count}"
        for key, count in sorted(other.items())
        if _helper_key(key) not in BENIGN_HELPER_ERRORS
    ]
    if not serious:
        return None
    return "; ".join(serious) + (
        " (failed bpftrace helper calls other than map updates: the values those calls would "
        "have read or written are missing from the figures)"
    )
