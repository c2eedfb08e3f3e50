"""Map capacity: every map's key limit, and the updates a full map dropped (with the map's name).

bpftrace 0.17 and 0.20 size all maps with one setting, BPFTRACE_MAP_KEYS_MAX (no per-map size
in their language), so the engine sets it explicitly for the program and records it. A full map
silently ignores updates of new keys: `lost_events` stays 0 because nothing goes through the
event buffer. bpftrace reports each failed map update as a `helper_error` record (with `-k` before
0.23, by default from 0.23) carrying the line and column of the statement: we count them per map.
At the end a printed map holding `keys_max` keys is flagged full as well (a second, independent
sign that needs no helper records).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from aorta.common.jsontypes import JsonObject

MAP_KEYS_MAX = 65536  # bpftrace's default (4096) could silently drop per-tid/per-job keys
E2BIG = -7  # map_update_elem on a full hash map
HELPER_ERRORS_BY_DEFAULT = (0, 23, 0)  # bpftrace reports helper errors without -k from here on
_MAP_RE = re.compile(r"@[A-Za-z0-9_]*")


def bpftrace_flags(version: tuple[int, int, int] | None) -> list[str]:
    """Flags that make this bpftrace report failed map updates (`-k` before 0.23)."""
    if version is not None and version >= HELPER_ERRORS_BY_DEFAULT:
        return []
    return ["-k"]


def map_at(text: str, line: int, col: int) -> str | None:
    """The map a statement at (1-based line, col) of the program writes: the last `@map` that
    starts at or before `col` on that line (bpftrace points at the call or value it stores)."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    found = None
    for match in _MAP_RE.finditer(lines[line - 1]):
        if match.start() + 1 <= col:
            found = match.group(0)
    return found


def key_count(value: Any) -> int:
    """Keys a printed map holds (a scalar or a plain hist/stats value counts as one)."""
    if isinstance(value, dict) and not ({"count", "total"} <= set(value)):
        return len(value)
    return 1


KEYS_MAX_SOURCE = "BPFTRACE_MAP_KEYS_MAX, set by aorta for every map of the program"


@dataclass(frozen=True)
class MapCapacity:
    """What the map key limit cost a session: updates dropped per map (and in all), the maps that
    are full, other helper errors, and the limit that applied. `to_json` is `map_capacity`."""

    keys_max: int
    keys_max_source: str
    dropped_updates: dict[str, int]
    dropped_updates_total: int
    full_maps: dict[str, str]
    other_helper_errors: dict[str, int]

    def to_json(self) -> JsonObject:
        """The section's `map_capacity` object (the fields, in their order)."""
        return asdict(self)


def capacity_report(
    text: str, helper_errors: dict[tuple[str, int, int, int], int], maps: JsonObject, keys_max: int
) -> MapCapacity:
    """`dropped_updates` per map, full maps, other helper errors and the limit that applied."""
    dropped: dict[str, int] = {}
    full: dict[str, str] = {}
    other: dict[str, int] = {}
    for (helper, retcode, line, col), count in helper_errors.items():
        if helper == "map_update_elem":
            name = map_at(text, line, col) or f"(line {line} col {col})"
            dropped[name] = dropped.get(name, 0) + count
            if retcode == E2BIG:
                full[name] = "updates refused: map full (E2BIG)"
        else:
            key = f"{helper} {retcode}"
            other[key] = other.get(key, 0) + count
    for name, value in maps.items():
        if key_count(value) >= keys_max:
            full.setdefault(name, f"holds {keys_max} keys: the limit")
    return MapCapacity(
        keys_max=keys_max,
        keys_max_source=KEYS_MAX_SOURCE,
        dropped_updates=dropped,
        dropped_updates_total=sum(dropped.values()),
        full_maps=full,
        other_helper_errors=other,
    )
