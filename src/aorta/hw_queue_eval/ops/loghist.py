"""Bounded-memory distributions for runs with more ops than the result keeps as rows.

A log-bucket histogram (the DDSketch layout): a value v > 0 falls in bucket k = ceil(log_γ v),
which covers (γ^(k-1), γ^k] and is represented by 2·γ^k / (γ + 1); negative values mirror that
and 0 has its own bucket. With γ = (1 + α) / (1 − α) every representative is within a relative
error α of every value in its bucket. Buckets are monotone in the value, so the k-th smallest
representative is the representative of the k-th smallest value, and a percentile interpolated
between two closest ranks (numpy's default, as `metrics.summarize` uses) is within α of the exact
one for non-negative data. Memory: one counter per occupied bucket, at most about
ln(max/min) / ln γ (≈ 2,800 for 1 ns … 1,000 s at α = 0.5 %), whatever the number of values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RELATIVE_ERROR = 0.005  # α: stated in docs/metrics.md and checked by tests/test_op_fold.py
GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(GAMMA)
_BIAS = 1 << 20  # keys stay apart by sign for every |v| ≥ γ^-(2^20) (far below any float in use)


def bucket_keys(values: np.ndarray) -> np.ndarray:
    """Signed bucket key per value: 0 for 0, ±(k + bias) for ±v in bucket k."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) and v.min() >= 1.0:  # the common case (ns ≥ 1): one log, no signs
        k = np.ceil(np.log(v) * (1.0 / _LOG_GAMMA))
        return k.astype(np.int64) + _BIAS
    mag = np.abs(v)
    k = np.ceil(np.log(np.where(mag > 0, mag, 1.0)) * (1.0 / _LOG_GAMMA)).astype(np.int64)
    keys = np.sign(v).astype(np.int64) * (k + _BIAS)
    return np.where(mag > 0, keys, 0)


def representatives(keys: np.ndarray) -> np.ndarray:
    """The value standing for each bucket key (within α of every value in that bucket)."""
    keys = np.asarray(keys, dtype=np.int64)
    mag = 2.0 * np.power(GAMMA, np.abs(keys) - _BIAS) / (GAMMA + 1.0)
    return np.where(keys == 0, 0.0, np.sign(keys) * mag)


def weighted_percentiles(values: np.ndarray, counts: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Percentiles (0–100) of values repeated `counts` times: linear interpolation between
    closest ranks, the same definition as np.percentile on the expanded sample."""
    order = np.argsort(values, kind="stable")
    vals = np.asarray(values, dtype=np.float64)[order]
    cum = np.cumsum(np.asarray(counts, dtype=np.int64)[order])
    n = int(cum[-1])
    out = []
    for q in qs:
        rank = q / 100.0 * (n - 1)
        lo = math.floor(rank)
        frac = rank - lo
        hi = min(lo + 1, n - 1)
        v_lo = vals[int(np.searchsorted(cum, lo, side="right"))]
        v_hi = vals[int(np.searchsorted(cum, hi, side="right"))]
        out.append(float(v_lo + (v_hi - v_lo) * frac))
    return out


class LogHistogram:
    """Counts per log bucket; percentiles within a relative error α (module docstring)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def add_keys(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """Add `counts[i]` values that fell in bucket `keys[i]`."""
        table = self.counts
        for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
            table[key] = table.get(key, 0) + count

    def add_key_array(self, keys: np.ndarray) -> None:
        """Add one value per entry of `keys` (bucket keys from `bucket_keys`)."""
        if not len(keys):
            return
        low, high = int(keys.min()), int(keys.max())
        if high - low > 1 << 14:  # keys of both signs or 0 and positive: sparse, sort instead
            self.add_keys(*np.unique(keys, return_counts=True))
            return
        counts = np.bincount(keys - low)
        occupied = np.flatnonzero(counts)
        self.add_keys(occupied + low, counts[occupied])

    def add(self, values: np.ndarray) -> None:
        """Add every value of `values`."""
        self.add_key_array(bucket_keys(values))

    def merge(self, other: LogHistogram) -> None:
        """Add every value of `other`."""
        for key, count in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + count

    def __len__(self) -> int:
        return sum(self.counts.values())

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(representative values, counts), one per occupied bucket."""
        keys = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
        counts = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
        return representatives(keys), counts

    def percentiles(
        self, qs: Sequence[float], low: float | None = None, high: float | None = None
    ) -> list[float]:
        """Percentiles from the representatives, clamped to the exact [low, high] when known."""
        values, counts = self.items()
        result = weighted_percentiles(values, counts, qs)
        if low is not None and high is not None:
            result = [min(max(v, low), high) for v in result]
        return result
