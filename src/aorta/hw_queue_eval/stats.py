"""Two-sample statistics for `compare` (and `policy-sweep`): Mann–Whitney U plus a minimum effect.

No scipy: the U test is implemented here. p-values are two-sided. Without ties and with
n1·n2 ≤ EXACT_MAX_PRODUCT the exact null distribution of U is used (counted with the Gaussian
binomial coefficient); otherwise the normal approximation with tie correction and a 0.5
continuity correction. See docs/sweep-compare-report.md for the verdict rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

ALPHA = 0.05
MIN_SAMPLES = 5  # below this per side, the verdict is "inconclusive" (3 vs 3 can never reach p<0.05)
EXACT_MAX_PRODUCT = 2500  # exact U distribution when n1*n2 is at most this and there are no ties

VERDICTS = ("regression", "improvement", "unchanged", "inconclusive")


@dataclass(frozen=True)
class MannWhitney:
    """U statistic of the first sample, two-sided p-value and how it was computed."""

    u: float
    p_value: float
    method: str  # "exact" | "normal"


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) of `values` and the sizes of the tie groups."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    _, first, counts = np.unique(sorted_vals, return_index=True, return_counts=True)
    avg_rank_sorted = np.repeat(first + (counts + 1) / 2.0, counts)
    ranks = np.empty(values.size, dtype=float)
    ranks[order] = avg_rank_sorted
    return ranks, counts


def _u_distribution(n1: int, n2: int) -> list[int]:
    """Counts of each U = 0..n1*n2 under H0 (no ties): coefficients of the q-binomial [n1+n2, n1]."""
    m, n = min(n1, n2), max(n1, n2)
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)) then divide by (1 - q^i); the division is exact
        shift = n + i
        for k in range(size - 1, shift - 1, -1):
            poly[k] -= poly[k - shift]
        for k in range(i, size):
            poly[k] += poly[k - i]
    return poly


def _exact_p(u: float, n1: int, n2: int) -> float:
    counts = _u_distribution(n1, n2)
    total = sum(counts)
    k = round(u)
    lower = sum(counts[: k + 1])
    upper = sum(counts[k:])
    return min(1.0, 2.0 * min(lower, upper) / total)


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> MannWhitney:
    """Two-sided Mann–Whitney U test of `a` against `b` (ValueError if either is empty)."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann–Whitney U needs at least one sample on each side")
    ranks, tie_counts = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    has_ties = bool((tie_counts > 1).any())
    if not has_ties and n1 * n2 <= EXACT_MAX_PRODUCT:
        return MannWhitney(u1, _exact_p(u1, n1, n2), "exact")
    n = n1 + n2
    tie_term = float((tie_counts.astype(float) ** 3 - tie_counts).sum())
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:  # every value identical: no evidence of any difference
        return MannWhitney(u1, 1.0, "normal")
    mean = n1 * n2 / 2.0
    z = (abs(u1 - mean) - 0.5) / math.sqrt(variance)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return MannWhitney(u1, min(1.0, p), "normal")


def median_iqr(samples: Sequence[float]) -> tuple[float, float]:
    """Median and interquartile range (linear interpolation, numpy's default)."""
    q1, med, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 50, 75])
    return float(med), float(q3 - q1)


@dataclass(frozen=True)
class SampleComparison:
    """Outcome of comparing one metric's samples: base vs test."""

    base_median: float
    base_iqr: float
    base_n: int
    test_median: float
    test_iqr: float
    test_n: int
    change_pct: float | None  # (test − base) / base × 100; None when the base median is 0
    p_value: float | None
    test_method: str | None
    verdict: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_samples(base: Sequence[float], test: Sequence[float], threshold_pct: float = 5.0,
                    higher_is_better: bool = False, alpha: float = ALPHA) -> SampleComparison:
    """Median/IQR of both sides, relative change and a verdict.

    Verdict rule: fewer than MIN_SAMPLES on a side → inconclusive; |change| below the threshold →
    unchanged; otherwise p < alpha → regression or improvement (by the metric's direction), and
    p ≥ alpha → inconclusive (a large but not significant change: more samples needed).
    """
    b_med, b_iqr = median_iqr(base) if len(base) else (math.nan, math.nan)
    t_med, t_iqr = median_iqr(test) if len(test) else (math.nan, math.nan)
    change = None if not len(base) or b_med == 0 else (t_med - b_med) / abs(b_med) * 100.0

    def result(verdict: str, reason: str, mw: MannWhitney | None = None) -> SampleComparison:
        return SampleComparison(b_med, b_iqr, len(base), t_med, t_iqr, len(test), change,
                                None if mw is None else mw.p_value,
                                None if mw is None else mw.method, verdict, reason)

    if min(len(base), len(test)) < MIN_SAMPLES:
        return result("inconclusive", f"too few samples (n={len(base)} vs {len(test)}; "
                                      f"need ≥ {MIN_SAMPLES} per side)")
    mw = mann_whitney_u(base, test)
    if change is None:
        return result("inconclusive", "base median is 0: relative change undefined", mw)
    if abs(change) < threshold_pct:
        return result("unchanged", f"|change| {abs(change):.1f}% < threshold {threshold_pct:g}%", mw)
    if mw.p_value >= alpha:
        return result("inconclusive", f"change {change:+.1f}% not significant "
                                      f"(p={mw.p_value:.3g} ≥ {alpha:g}): add iterations", mw)
    worse = change < 0 if higher_is_better else change > 0
    verdict = "regression" if worse else "improvement"
    return result(verdict, f"change {change:+.1f}% ≥ threshold {threshold_pct:g}% and "
                           f"p={mw.p_value:.3g} < {alpha:g}", mw)
