"""The op record: one measured op, as both backends build it and every metric reads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One measured op. Times are ns on one clock, relative to the window start.

    Slotted. Both backends build these only for the rows a result keeps (opfold).

    ready_ns: when the op could have started (enqueued, its stream's previous op done, its waits
    satisfied); None where the backend cannot know it (GPU).
    """

    iteration: int
    stream: int
    queue: int | None
    label: str
    ready_ns: int | None
    start_ns: int
    end_ns: int
