"""Numeric leaves of a nested result section as dotted keys, for diffs, tables and lookups."""

from __future__ import annotations

from typing import Any


def flatten_numbers(section: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict as {'a.b.c': value} (bools excluded)."""
    out: dict[str, float] = {}
    if isinstance(section, dict):
        for key, value in section.items():
            out.update(flatten_numbers(value, f"{prefix}{key}."))
    elif isinstance(section, (int, float)) and not isinstance(section, bool):
        out[prefix[:-1]] = float(section)
    return out
