"""Stream priorities: which of a workload's streams are created high, normal or low priority.

A spec is `STREAM=LEVEL[,STREAM=LEVEL…]` with `rest=LEVEL` for every stream not named, LEVEL one
of high, normal, low (e.g. `0=high,rest=low`: stream 0 latency-critical, the rest best-effort).
`run --stream-priority SPEC` takes it; a policy (gpu/policies.py, `stream_priority`) passes it
to the run's child as that option.

On the GPU each stream is `torch.cuda.Stream(priority=p)` (hipStreamCreateWithPriority /
cudaStreamCreateWithPriority): high → the greatest priority of `Stream.priority_range()`, low →
the least, normal → 0 (the default). On ROCm a stream's priority becomes its HSA queue's priority,
and the runtime keeps one queue pool per priority, so streams of different priority never share a
queue. The CPU backend models both (backends/cpu.py): one pool per level, and a worker of lower
priority does not start an op while a higher-priority queue has an op it can run (served first at
op granularity, no preemption of an op already running — as the command processor dispatches).
No torch import here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aorta.common.errors import UsageError

PRIORITY_OPTION = "--stream-priority"
#: internal ranks: a larger number is served first
LEVELS = {"high": 1, "normal": 0, "low": -1}
LEVEL_NAMES = {v: k for k, v in LEVELS.items()}
MAX_SPEC_CHARS = 512
_ITEM_RE = re.compile(r"^(rest|[0-9]{1,4})=([a-z]+)$")


def check_spec(text: Any, what: str = "stream_priority") -> str:
    """The spec's syntax (no stream count needed); returns it stripped, or a UsageError."""
    hint = "give STREAM=LEVEL items, e.g. 0=high,rest=low (LEVEL: high, normal, low)"
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_SPEC_CHARS:
        raise UsageError(f"{what} {text!r}: {hint}")
    seen: set[str] = set()
    for item in text.strip().split(","):
        match = _ITEM_RE.fullmatch(item.strip())
        if match is None:
            raise UsageError(f"{what} {text!r}: item {item.strip()!r} is not STREAM=LEVEL; {hint}")
        key, level = match.groups()
        if level not in LEVELS:
            raise UsageError(f"{what} {text!r}: level {level!r} is not one of high, normal, low")
        key = key if key == "rest" else str(int(key))
        if key in seen:
            raise UsageError(f"{what} {text!r}: stream {key} is given twice")
        seen.add(key)
    return text.strip()


def parse_spec(text: str, streams: int, what: str = PRIORITY_OPTION) -> list[int]:
    """Per stream its rank (LEVELS values) for `streams` streams, or a UsageError."""
    check_spec(text, what)
    ranks: list[int | None] = [None] * streams
    rest: int | None = None
    for item in text.strip().split(","):
        key, level = item.strip().split("=")
        if key == "rest":
            rest = LEVELS[level]
            continue
        index = int(key)
        if index >= streams:
            raise UsageError(
                f"{what} {text!r}: stream {index} does not exist with --streams {streams} "
                f"(streams are 0..{streams - 1})"
            )
        ranks[index] = LEVELS[level]
    fill = LEVELS["normal"] if rest is None else rest
    return [fill if r is None else r for r in ranks]


def torch_priorities(ranks: list[int], priority_range: tuple[int, int]) -> list[int]:
    """torch stream priorities for `ranks`, given `torch.cuda.Stream.priority_range()`, which
    returns (least, greatest); a lower number is a higher priority (0 is the default)."""
    least, greatest = priority_range
    low, high = min(least, greatest), max(least, greatest)
    normal = 0 if low <= 0 <= high else least
    return [greatest if r > 0 else least if r < 0 else normal for r in ranks]


def describe(ranks: list[int] | None) -> list[str] | None:
    """Per stream its level's name (for the result), None when no priorities were set."""
    return None if ranks is None else [LEVEL_NAMES[r] for r in ranks]


StreamFactory = Callable[[Any, int | None], Any]
