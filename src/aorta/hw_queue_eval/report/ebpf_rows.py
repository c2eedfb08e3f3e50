"""The rows every eBPF console block shares: a block's header (or why it is missing), a labelled
value, the dropped-updates text.

One module for them so the queue, comparison and memory blocks read the same.
"""

from __future__ import annotations

from typing import Any


def labelled(console: Any, label: str, value: str, width: int = 22) -> None:
    """One "label: value" row, the label padded to width so each block's values line up."""
    console.print(f"  {label + ':':<{width}}{value}")


def open_block(
    section: dict[str, Any] | None, console: Any, title: str, unavailable: str = "tracing {status}"
) -> bool:
    """Print a block's title, or why its section is not ok; True when the body should follow.

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


def dropped_text(section: dict[str, Any]) -> str | None:
    """ "N (map count, …)": updates full maps refused; None for results without the field."""
    cap = section.get("map_capacity")
    if not isinstance(cap, dict):
        return None
    dropped = cap.get("dropped_updates") or {}
    per_map = ", ".join(f"{name} {count}" for name, count in sorted(dropped.items()))
    return f"{cap.get('dropped_updates_total', 0)}" + (f" ({per_map})" if per_map else "")
