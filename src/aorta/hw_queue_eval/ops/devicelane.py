"""Lane gaps on a lane that spans the whole device (GPU), folded in bounded memory.

On the GPU backend the lane is the device (`metrics.lane_gaps`, lane None): ops of different
streams overlap, so an op's previous op is not its predecessor in any one order but the op, over
every stream, that ended most recently at or before its start (ties by start, stream, then launch
order: the order `metrics.lane_gaps` finds it in). Ops arrive as their events complete, so an op
can only be given its previous op once every op that might have ended before its start is known.

`settle(horizon)` gives each buffered op whose start lies before `horizon` its previous op; the
backend vouches that every op it has not handed over yet ends after `horizon` and starts at or
after it (backends/gpu.py: a stream runs its ops in order, and an op launched after an op was
seen complete starts after that op ended). Every op settled later starts at or after `horizon`,
so of the ops that ended before it only the last one can still be anyone's previous op: the
lane keeps that one, the settled ops that end at or after `horizon` (at most one per stream, as
a stream's ops do not overlap) and the ops still waiting.
"""

from __future__ import annotations

import numpy as np


class DeviceLane:
    """Ops waiting for their previous op, and the settled ops that can still be one."""

    def __init__(self, words: int, stream: int, start: int, end: int) -> None:
        """Op records are int64 rows of `words` columns; the others name three of them."""
        self._words, self._stream, self._start, self._end = words, stream, start, end
        self._carry = np.zeros((0, words), dtype=np.int64)  # settled, still candidates
        self._waiting: list[np.ndarray] = []  # handed over, not settled yet

    def push(self, rows: np.ndarray) -> None:
        """Ops (n × words), each stream's in the order it ran them, after those pushed before."""
        if len(rows):
            self._waiting.append(rows)

    def held(self) -> int:
        """Op records held (waiting or kept as candidates)."""
        return len(self._carry) + sum(len(w) for w in self._waiting)

    def settle(self, horizon: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(previous ops, ops) for every waiting op that starts before `horizon` and has a previous
        op (None: every waiting op, the window is over). Rows pair up by index."""
        empty = np.zeros((0, self._words), dtype=np.int64)
        stream, start, end = self._stream, self._start, self._end
        if not self._waiting:
            return empty, empty
        waiting = np.vstack(self._waiting)
        candidates = np.vstack((self._carry, waiting))  # per stream: launch order (older first)
        # stable: equal (end, start, stream) keep launch order, as metrics.lane_gaps' sort does
        order = np.lexsort((candidates[:, stream], candidates[:, start], candidates[:, end]))
        ends = candidates[order, end]
        due = np.ones(len(waiting), dtype=bool) if horizon is None else waiting[:, start] < horizon
        ops = waiting[due]
        index = np.searchsorted(ends, ops[:, start], side="right") - 1
        found = index >= 0
        previous, ops = candidates[order[index[found]]], ops[found]
        if horizon is None:
            self._carry, self._waiting = empty, []
            return previous, ops
        settled = np.concatenate((np.ones(len(self._carry), dtype=bool), due))
        keep = settled & (candidates[:, end] >= horizon)
        last_before = int(np.searchsorted(ends, horizon, side="left")) - 1
        if last_before >= 0:  # the op that ended last before the horizon (it is settled)
            keep[order[last_before]] = True
        self._carry = candidates[keep]
        rest = waiting[~due]
        self._waiting = [rest] if len(rest) else []
        return previous, ops
