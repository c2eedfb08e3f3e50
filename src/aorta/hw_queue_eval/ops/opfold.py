"""Op records in bounded memory: every op counted, at most `row_cap` kept as rows.

The CPU backend's workers append each op as a tuple of six ints (iteration, stream, label id,
ready, start, end; CLOCK_MONOTONIC ns) to a per-queue chunk, and hand full chunks over; the host
folds them here between iterations. While the window holds no more ops than the row cap, chunks
are only stored as they are (no cost, and the metrics are computed exactly from every op, as
before). Once it holds more, every op is converted to int64 columns and folded into running
figures, and only the first `row_cap` ops by start time stay as rows (docs/metrics.md, "Runs
with more ops than rows"):

- exact: op counts and busy time per stream, op counts per stream and label, and count, sum,
  mean, std, min, max of op durations per label and of ready→start delays; lane-gap counts per
  (lane, previous kind, next kind, switch);
- within a relative error `loghist.RELATIVE_ERROR`: percentiles (and the medians the switch
  analysis compares), from log-bucket histograms.

The fold relies on what makes a CPU lane a lane: one worker runs a queue's ops one after another,
so a stream's ops never overlap (its busy time, the union of its op intervals, is the sum of their
durations) and the op a lane finished most recently before an op started is the lane's previous
op (`metrics.lane_gaps`).

The GPU backend folds its ops here too, as `device_lane`: a stream still runs its ops in order
(busy time = sum of durations), but the lane is the whole device, where streams overlap, so lane
gaps come from `devicelane.DeviceLane`; the ready time is unknown there (no delays folded), and
per stream the gaps between consecutive ops (`FoldedOps.stream_gaps_ns`, what the eBPF GPU
comparison shows) are summed exactly.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.ops.devicelane import DeviceLane
from aorta.hw_queue_eval.ops.loghist import RELATIVE_ERROR, LogHistogram, bucket_keys
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.results.models import Stats, SwitchLatency

WORDS = 6  # int64 words per op record: iteration, stream, label, ready, start, end
_IT, _ST, _LAB, _RDY, _S, _E = range(WORDS)
MAX_LABELS = 1 << 12  # label ids are packed into 12 bits
DEVICE = -1  # the queue word of ops on the device lane (GPU: queue unknown, OpRecord.queue None)
CHUNK_OPS = 16384  # a backend hands its op records to the fold in chunks of about this many ops
ROW_SELECTION = "the first ops of the window by start time (every op when not truncated)"


class LabelTable:
    """Op label → the small int id an op record carries (ids index `names`)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.known: dict[str, int] = {}  # label -> id; a hot path may read it before calling id()

    def id(self, label: str) -> int:
        """The id of `label`, given on first use (host thread only)."""
        found = self.known.get(label)
        if found is None:
            if len(self.names) >= MAX_LABELS:
                raise ValueError(f"a workload may use at most {MAX_LABELS} op labels")
            found = self.known[label] = len(self.names)
            self.names.append(label)
        return found


class RunningSummary:
    """count, exact sum/mean/std/min/max and histogram percentiles of int ns values."""

    __slots__ = ("count", "high", "hist", "low", "m2", "mean", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.low: int | None = None
        self.high: int | None = None
        self.hist = LogHistogram()

    def add(self, values: np.ndarray) -> None:
        """Fold a batch (Chan et al.'s pairwise update for the variance)."""
        n = len(values)
        if n == 0:
            return
        total = int(values.sum())
        mean = total / n
        centred = values - mean
        m2 = float((centred * centred).sum())  # not np.dot: BLAS threads would compete
        delta = mean - self.mean
        merged = self.count + n
        self.m2 += m2 + delta * delta * self.count * n / merged
        self.mean += delta * n / merged
        self.count = merged
        self.total += total
        low, high = int(values.min()), int(values.max())
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        self.hist.add(values)

    def merge(self, other: RunningSummary) -> None:
        """Fold another summary in (the same pairwise update)."""
        if not other.count:
            return
        merged = self.count + other.count
        delta = other.mean - self.mean
        self.m2 += other.m2 + delta * delta * self.count * other.count / merged
        self.mean += delta * other.count / merged
        self.count = merged
        self.total += other.total
        self.low = other.low if self.low is None else min(self.low, other.low)  # type: ignore[type-var]
        self.high = other.high if self.high is None else max(self.high, other.high)  # type: ignore[type-var]
        self.hist.merge(other.hist)

    def summary_ms(self) -> Stats | None:
        """The `metrics.summarize` layout in ms; None when empty."""
        if not self.count or self.low is None or self.high is None:
            return None
        q1, p50, q3, p95, p99 = self.hist.percentiles([25, 50, 75, 95, 99], self.low, self.high)
        return {
            "count": self.count,
            "mean": self.total / self.count / 1e6,
            "std": math.sqrt(self.m2 / (self.count - 1)) / 1e6 if self.count > 1 else 0.0,
            "min": self.low / 1e6,
            "max": self.high / 1e6,
            "p50": p50 / 1e6,
            "p95": p95 / 1e6,
            "p99": p99 / 1e6,
            "median": p50 / 1e6,
            "iqr": (q3 - q1) / 1e6,
        }


class OpFold:
    """Every op of one window folded as chunks arrive; the first `row_cap` ops kept as rows.

    device_lane (GPU): one lane for the whole device, ready times unknown (module docstring);
    chunks then carry `DEVICE` as their queue and `settle` must follow each `add`.
    """

    def __init__(self, stream_count: int, labels: list[str], row_cap: int, device_lane: bool = False) -> None:
        self.stream_count = stream_count
        self.labels = labels  # the backend's label table (grows as new labels launch)
        self.row_cap = row_cap
        self.device_lane = device_lane
        self.total = 0
        self.folding = False
        self._device = DeviceLane(WORDS, _ST, _S, _E) if device_lane else None
        self.stream_gap_ns = 0  # device lane: Σ per stream of next start − previous end (≥ 0)
        self.stream_gap_count = 0
        self._stream_end = np.full(stream_count, -1, dtype=np.int64)  # -1: no op yet
        self._stored: list[tuple[int, Chunk]] = []  # (queue, chunk) until the cap is passed
        self._kept: list[np.ndarray] = []  # rows of 7 words: queue first, then the 6 above
        self._kept_n = 0
        self._t_cut: int | None = None  # rows kept: start < t_cut
        self.counts = np.zeros(stream_count, dtype=np.int64)
        self.busy_ns = np.zeros(stream_count, dtype=np.int64)
        self.durations: dict[int, RunningSummary] = defaultdict(RunningSummary)
        self.label_counts: dict[int, np.ndarray] = {}  # label -> ops per stream
        self.delays = RunningSummary()
        # (lane, previous label, label, switch, ready: None where unknown) -> gaps
        self.gaps: dict[tuple[int | None, int, int, bool, bool | None], LogHistogram] = defaultdict(
            LogHistogram
        )
        self.waits: dict[int, RunningSummary] = defaultdict(RunningSummary)  # lane -> launch waits
        self.wait_switches: dict[int, int] = defaultdict(int)  # lane -> waited switch gaps
        self._last: dict[int, np.ndarray] = {}  # queue -> its previous op record

    def add(self, queue: int, chunk: Chunk) -> None:
        """One queue's next ops, in the order it ran them (WORDS-tuples, or an n × WORDS array);
        device lane: `DEVICE` and newly completed ops, each stream's in order."""
        if not len(chunk):
            return
        self.total += len(chunk)
        if not self.folding:
            self._stored.append((queue, chunk))
            if self.total > self.row_cap:
                self.folding = True
                stored, self._stored = self._stored, []
                for q, c in stored:
                    rows = as_rows(c)
                    self._fold(q, rows)
                    self._keep(q, rows)
            return
        rows = as_rows(chunk)
        self._fold(queue, rows)
        self._keep(queue, rows)

    def _fold(self, queue: int, c: np.ndarray) -> None:
        st, lab, rdy, s, e = (c[:, i] for i in range(1, WORDS))
        duration = e - s
        self.counts += np.bincount(st, minlength=self.stream_count)[: self.stream_count]
        # float sums of int ns are exact below 2**53 ns (104 days) per chunk and stream
        self.busy_ns += np.bincount(st, weights=duration, minlength=self.stream_count)[
            : self.stream_count
        ].astype(np.int64)
        for label in _distinct(lab):
            mask = lab == label
            self.durations[label].add(duration if len(self.labels) == 1 else duration[mask])
            per_stream = np.bincount(st[mask], minlength=self.stream_count)[: self.stream_count]
            if label in self.label_counts:
                self.label_counts[label] += per_stream
            else:
                self.label_counts[label] = per_stream.astype(np.int64)
        if self._device is not None:
            self._fold_stream_gaps(c)
            self._device.push(c)
            return
        self.delays.add(s - rdy)
        last = self._last.get(queue)
        self._last[queue] = c[-1].copy()
        it = c[:, _IT]
        if last is None:  # the lane's first op has no gap
            p_it, p_st, p_lab, p_end = it[:-1], st[:-1], lab[:-1], e[:-1]
            it, st, lab, s, rdy = it[1:], st[1:], lab[1:], s[1:], rdy[1:]
        else:
            p_it, p_st, p_lab, p_end = (
                np.concatenate(([last[i]], col[:-1]))
                for i, col in ((_IT, it), (_ST, st), (_LAB, lab), (_E, e))
            )
        self._count_gaps(queue, (p_it, p_st, p_lab, p_end), (it, st, lab, s), rdy)

    def _count_gaps(
        self,
        lane: int | None,
        previous: tuple[np.ndarray, ...],
        ops: tuple[np.ndarray, ...],
        ready: np.ndarray | None = None,
    ) -> None:
        """Add lane gaps: per op (iteration, stream, label, start) after its previous op
        (iteration, stream, label, end); a gap only between ops of one iteration. `ready` (None:
        unknown, the device lane): per op when it was ready; a gap is ready when that is at or
        before the previous end, else its wait (ready − previous end) is folded per lane."""
        p_it, p_st, p_lab, p_end = previous
        it, st, lab, s = ops
        same = p_it == it
        if not same.all():
            p_st, p_lab, p_end, st, lab, s = (x[same] for x in (p_st, p_lab, p_end, st, lab, s))
            ready = None if ready is None else ready[same]
        if not len(s):
            return
        switched = p_st != st
        code = (p_lab * MAX_LABELS + lab) * 4 + switched * 2
        if ready is not None:
            wait = ready - p_end
            waited = wait > 0
            code += ~waited  # bit 0: ready
            if waited.any():
                self.waits[lane].add(wait[waited])  # type: ignore[index]
                self.wait_switches[lane] += int((switched & waited).sum())  # type: ignore[index]
        keys = bucket_keys(s - p_end)
        groups = _distinct(code)
        for group in groups:
            pair, flags = divmod(group, 4)
            after, before = divmod(pair, MAX_LABELS)
            key = (lane, after, before, bool(flags & 2), None if ready is None else bool(flags & 1))
            self.gaps[key].add_key_array(keys if len(groups) == 1 else keys[code == group])

    def _fold_stream_gaps(self, c: np.ndarray) -> None:
        """Per stream, next start − previous end (clipped at 0) between consecutive ops."""
        rows = c[np.argsort(c[:, _ST], kind="stable")]  # each stream's ops stay in order
        st, s, e = rows[:, _ST], rows[:, _S], rows[:, _E]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = st[1:] != st[:-1]
        previous = np.empty_like(e)
        previous[1:] = e[:-1]
        previous[first] = self._stream_end[st[first]]
        known = previous >= 0
        self.stream_gap_ns += int(np.maximum(s[known] - previous[known], 0).sum())
        self.stream_gap_count += int(known.sum())
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = st[:-1] != st[1:]
        self._stream_end[st[last]] = e[last]

    def settle(self, horizon: int | None) -> None:
        """Device lane: give the ops that start before `horizon` their lane gap (None: every op,
        the window is over). The caller vouches that every op not handed over yet ends after
        `horizon` and starts at or after it (devicelane.py)."""
        if self._device is None or not self.folding:
            return
        previous, ops = self._device.settle(horizon)
        if len(ops):
            self._count_gaps(
                None,
                tuple(previous[:, i] for i in (_IT, _ST, _LAB, _E)),
                tuple(ops[:, i] for i in (_IT, _ST, _LAB, _S)),
            )

    def held(self) -> int:
        """Op records this fold holds: stored or kept as rows, and waiting on the device lane."""
        stored = self.total if not self.folding else self._kept_n
        return stored + (self._device.held() if self._device is not None else 0)

    def _keep(self, queue: int, c: np.ndarray) -> None:
        """Keep the rows that start before the cut; move the cut earlier when over the cap."""
        if self._t_cut is not None:
            c = c[c[:, _S] < self._t_cut]
        if not len(c):
            return
        self._kept.append(np.hstack((np.full((len(c), 1), queue, dtype=np.int64), c)))
        self._kept_n += len(c)
        if self._kept_n > self.row_cap:
            rows = np.vstack(self._kept)
            starts = rows[:, 1 + _S]
            self._t_cut = int(np.partition(starts, self.row_cap)[self.row_cap])
            rows = rows[starts < self._t_cut]
            self._kept, self._kept_n = [rows], len(rows)

    def rows(self) -> np.ndarray:
        """The rows kept (queue + the 6 words), sorted by (start, stream)."""
        parts = (
            self._kept
            if self.folding
            else [np.hstack((np.full((len(c), 1), q, dtype=np.int64), as_rows(c))) for q, c in self._stored]
        )
        if not parts:
            return np.zeros((0, WORDS + 1), dtype=np.int64)
        return _sorted_rows(np.vstack(parts))

    def records(self, t0: int) -> list[OpRecord]:
        """The kept rows as OpRecords, ns relative to `t0` (once, when the window is over:
        under the cap the stored chunks are freed as their ops are built)."""
        labels = self.labels
        device = self.device_lane  # queue and ready unknown: None, as the GPU backend reports them
        ops: list[OpRecord] = []
        if not self.folding:  # straight from the tuples, as before the fold existed
            self._stored.reverse()
            while self._stored:
                q, chunk = self._stored.pop()
                if device:
                    ops.extend(
                        OpRecord(it, st, None, labels[lab], None, s - t0, e - t0)
                        for it, st, lab, _, s, e in chunk
                    )
                else:
                    ops.extend(
                        OpRecord(it, st, q, labels[lab], rdy - t0, s - t0, e - t0)
                        for it, st, lab, rdy, s, e in chunk
                    )
                del chunk
            ops.sort(key=lambda op: (op.start_ns, op.stream))
            return ops
        rows = self.rows()
        rows[:, 1 + _RDY :] -= t0
        for block in range(0, len(rows), 8192):  # small temporary lists: no second copy at peak
            ops.extend(
                OpRecord(it, st, None, labels[lab], None, s, e)
                if device
                else OpRecord(it, st, q, labels[lab], rdy, s, e)
                for q, it, st, lab, rdy, s, e in rows[block : block + 8192].tolist()
            )
        return ops

    def statistics(self) -> FoldedOps | None:
        """The folded figures, or None when every op is a row (compute them exactly from those)."""
        return FoldedOps(self) if self.folding else None


Chunk = Sequence[tuple[int, ...]] | np.ndarray


def as_rows(chunk: Chunk) -> np.ndarray:
    """A chunk of op records as an n × WORDS int64 array."""
    if isinstance(chunk, np.ndarray):
        return chunk
    flat = itertools.chain.from_iterable(chunk)
    return np.fromiter(flat, dtype=np.int64, count=len(chunk) * WORDS).reshape(-1, WORDS)


def _distinct(values: np.ndarray) -> list[int]:
    """The distinct values of a small-valued int array (bincount when small, else unique)."""
    low, high = int(values.min()), int(values.max())
    if high - low < 1 << 16:
        distinct: list[int] = (np.flatnonzero(np.bincount(values - low)) + low).tolist()
        return distinct
    unique: list[int] = np.unique(values).tolist()
    return unique


def _sorted_rows(rows: np.ndarray) -> np.ndarray:
    """Rows ordered by (start, stream), the order `op_intervals` lists them in."""
    return rows[np.lexsort((rows[:, 1 + _ST], rows[:, 1 + _S]))]


class FoldedOps:
    """The op metrics of a window with more ops than rows, from an OpFold."""

    def __init__(self, fold: OpFold) -> None:
        self.fold = fold
        self.total = fold.total

    def per_stream_op_counts(self) -> list[int]:
        return [int(c) for c in self.fold.counts]

    def per_stream_busy_ms(self) -> list[float]:
        return [int(b) / 1e6 for b in self.fold.busy_ns]

    def ready_to_start_ms(self) -> Stats | None:
        return self.fold.delays.summary_ms()

    def per_label(self) -> JsonObject:
        labels = self.fold.labels
        return {
            labels[k]: v.summary_ms()
            for k, v in sorted(self.fold.durations.items(), key=lambda kv: labels[kv[0]])
        }

    def per_stream_label_counts(self) -> dict[tuple[int, str], int]:
        """(stream, op label) → ops, exact over every op of the window (the collective join)."""
        labels = self.fold.labels
        return {
            (stream, labels[label]): int(n)
            for label, counts in self.fold.label_counts.items()
            for stream, n in enumerate(counts)
            if n
        }

    def stream_gaps_ns(self) -> tuple[int, int] | None:
        """(Σ, count) of per-stream gaps between consecutive ops (device lane); None otherwise."""
        if not self.fold.device_lane:
            return None
        return self.fold.stream_gap_ns, self.fold.stream_gap_count

    def lane_gap_histograms(self) -> dict[tuple[int | None, str, str, bool, bool | None], LogHistogram]:
        """(lane, previous op label, next op label, switch, ready) → histogram of gaps in ns;
        ready None where unknown (device lane)."""
        labels = self.fold.labels
        return {(q, labels[a], labels[b], sw, r): h for (q, a, b, sw, r), h in self.fold.gaps.items()}

    def launch_waits(self) -> tuple[metrics.WaitFigures, dict[int, metrics.WaitFigures]]:
        """The launch waits of every lane together, and per lane (exact but for the p50)."""
        total = RunningSummary()
        for summary in self.fold.waits.values():
            total.merge(summary)
        per_lane = {
            lane: _wait_figures(w, self.fold.wait_switches[lane]) for lane, w in self.fold.waits.items()
        }
        return _wait_figures(total, sum(self.fold.wait_switches.values())), per_lane

    def note(self) -> JsonObject:
        """How the figures of this run were computed (the result's `ops.statistics`)."""
        return {
            "source": "every op of the window, folded as it completed",
            "ops": self.total,
            "rows_kept": self.fold._kept_n,
            "exact": (
                "counts, busy times, and count/mean/std/min/max of op durations"
                + ("" if self.fold.device_lane else " and ready→start delays")
            ),
            "percentile_relative_error": RELATIVE_ERROR,
            "approximate": (
                "p50/p95/p99/median/iqr and the switch analysis medians: "
                "log-bucket histogram, each within the relative error of the "
                "exact value (iqr within it of p25 + p75)"
            ),
        }


def _wait_figures(waits: RunningSummary, switch_count: int) -> metrics.WaitFigures:
    """WaitFigures (ms) from folded waits (ns): count, total, mean and max exact, p50 within α."""
    summary = waits.summary_ms()
    if summary is None:
        return metrics.WaitFigures.of([], 0)
    return metrics.WaitFigures(
        summary["count"], switch_count, waits.total / 1e6, summary["mean"], summary["p50"], summary["max"]
    )


class OpWindow:
    """The ops of one window as the harness reports them: the rows kept, and the folded figures
    when the window had more ops than rows (else every figure is computed exactly from rows)."""

    def __init__(self, rows: list[OpRecord], folded: FoldedOps | None = None) -> None:
        self.rows = rows
        self.folded = folded

    @property
    def total(self) -> int:
        """Every op of the window, rows or not."""
        return self.folded.total if self.folded is not None else len(self.rows)

    def per_stream_busy_ms(self, stream_count: int) -> list[float] | None:
        if self.folded is not None:
            return self.folded.per_stream_busy_ms()
        return metrics.per_stream_busy_ms(self.rows, stream_count) if self.rows else None

    def per_stream_op_counts(self, stream_count: int) -> list[int] | None:
        if self.folded is not None:
            return self.folded.per_stream_op_counts()
        return metrics.per_stream_op_counts(self.rows, stream_count) if self.rows else None

    def ready_to_start_ms(self) -> Stats | None:
        if self.folded is not None:
            return self.folded.ready_to_start_ms()
        return metrics.summarize(metrics.ready_to_start_delays_ms(self.rows))

    def per_label(self) -> JsonObject:
        if self.folded is not None:
            return self.folded.per_label()
        return metrics.per_label_summary(self.rows)

    def switch_analysis(self, window_ms: float | None = None, waits: int | None = None) -> SwitchLatency:
        """The switch section (metrics.switch_analysis; `waits`: cross-stream waits enqueued)."""
        if self.folded is not None:
            total, per_lane = self.folded.launch_waits()
            return metrics.folded_switch_analysis(
                self.folded.lane_gap_histograms(), total, per_lane, window_ms, waits
            )
        return metrics.switch_analysis(self.rows, window_ms, waits)

    def statistics_note(self) -> JsonObject:
        """How this run's op figures were computed (the result's `ops.statistics`)."""
        if self.folded is not None:
            return self.folded.note()
        return {
            "source": "every op of the window, kept as rows",
            "ops": len(self.rows),
            "rows_kept": len(self.rows),
            "exact": "every figure",
            "percentile_relative_error": 0.0,
        }
