"""Two-sample statistics for `compare` (and `policy-sweep`): Mann–Whitney U plus a minimum effect.

No scipy: the U test is implemented here. p-values are two-sided. Without ties and with
n1·n2 ≤ EXACT_MAX_PRODUCT the exact null distribution of U is used (counted with the Gaussian
binomial coefficient); otherwise the normal approximation with tie correction and a 0.5
continuity correction. See docs/sweep-compare-report.md for the verdict rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from aorta.common.finite import ratio
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.exact_u import ALPHA, MIN_RUNS_TO_DETECT, min_p_value, u_distribution

EXACT_MAX_PRODUCT = 2500  # exact U distribution when n1*n2 is at most this and there are no ties


def percent_change(base: float, test: float) -> float | None:
    """(test − base) / |base| × 100, or None where `ratio` gives none."""
    change = ratio(test - base, abs(base))
    return None if change is None or not math.isfinite(change * 100.0) else change * 100.0


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


def _exact_p(u: float, n1: int, n2: int) -> float:
    counts = u_distribution(n1, n2)
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


# ---------------------------------------------------------------------------------------------
# Run-level statistics: one value per run (a repeat in a fresh process) is one sample.
# ---------------------------------------------------------------------------------------------

MIN_RUNS = 3  # per side for a run-level test (3 vs 3: a 90 % CI of the change, never p < 0.05)
CI_TARGET = 0.95  # the confidence aimed at; small n reach less, and the achieved level is stated
MAX_RUNS_ESTIMATE = 1000  # beyond this the estimate of the runs needed is not given
ONE_RUN_REASON = (
    "one run per side, run-to-run noise unknown — use --repeats "
    f"{MIN_RUNS_TO_DETECT} or more on both sides (fewer can never reach p < {ALPHA:g})"
)


def _ci_levels(n: int) -> Iterator[float]:
    """For k = 1, 2, … n // 2: the coverage 1 − 2·P(Bin(n, 1/2) ≤ k − 1) of [x_(k), x_(n−k+1)].

    Exact integer sums, each term from the previous one (2.0**n overflows a float beyond n =
    1023, and summing every prefix afresh was quadratic in n)."""
    total, term, below = 2**n, 1, 0  # term = C(n, k − 1); below = Σ C(n, i) for i < k − 1
    for k in range(1, n // 2 + 1):
        below += term
        yield 1.0 - 2 * below / total
        term = term * (n - k + 1) // k


@dataclass(frozen=True)
class MedianCI:
    """Median of run-level values and a distribution-free CI of it (order statistics)."""

    n: int
    median: float
    low: float | None
    high: float | None
    level: float | None  # achieved coverage of [low, high]; None with fewer than 2 values
    cv_pct: float | None  # sample std / mean × 100 (run-to-run spread)
    spread_pct: float | None  # (max − min) / median × 100: the measured noise floor

    def to_dict(self) -> JsonObject:
        return asdict(self)


def median_ci(values: Sequence[float], target: float = CI_TARGET) -> MedianCI:
    """Median with the order-statistic CI [x_(k), x_(n−k+1)] of the largest k reaching `target`.

    With n < 6 not even [min, max] reaches 95 % (n = 3: 75 %, n = 5: 93.75 %): the interval is
    then [min, max] and `level` says what it covers. ValueError when `values` is empty.
    """
    x = np.sort(np.asarray([float(v) for v in values], dtype=float))
    n = int(x.size)
    if n == 0:
        raise ValueError("median_ci needs at least one value")
    med = float(np.median(x))
    if n == 1:
        return MedianCI(1, med, None, None, None, None, None)
    best_k, level = 1, 1.0 - 2 / 2**n  # [min, max]: the widest interval there is
    for k, covered in enumerate(_ci_levels(n), start=1):
        if covered < target:  # the coverage only falls as k grows
            break
        best_k, level = k, covered
    mean = float(x.mean())
    cv = ratio(float(x.std(ddof=1)) * 100.0, mean)
    spread = ratio(float(x[-1] - x[0]) * 100.0, abs(med))
    return MedianCI(n, med, float(x[best_k - 1]), float(x[n - best_k]), level, cv, spread)


def shift_ci(
    base: Sequence[float], test: Sequence[float], target: float = CI_TARGET
) -> tuple[float, float, float] | None:
    """CI of the relative change test/base − 1 in percent (Moses: order statistics of all
    pairwise log ratios, critical value from the exact U distribution) and its achieved level.

    None when a value is not positive or a side has fewer than 2 values.
    """
    if min(len(base), len(test)) < 2 or min(*base, *test) <= 0:
        return None
    logs = np.sort(
        np.log(np.asarray(test, float))[None, :] - np.log(np.asarray(base, float))[:, None], axis=None
    )
    counts = u_distribution(len(base), len(test))
    total = float(sum(counts))
    cdf = np.cumsum(counts) / total  # cdf[j] = P(U ≤ j)
    k = 1
    for j in range(1, len(logs) // 2 + 1):
        if 1.0 - 2.0 * cdf[j - 1] >= target:
            k = j
    level = float(1.0 - 2.0 * cdf[k - 1])
    low, high = logs[k - 1], logs[len(logs) - k]
    return float(np.expm1(low) * 100.0), float(np.expm1(high) * 100.0), level


@dataclass(frozen=True)
class RunComparison:
    """One metric compared over runs (one value per run): base vs test."""

    base_runs: list[float]
    test_runs: list[float]
    base_median: float
    test_median: float
    base_n: int
    test_n: int
    change_pct: float | None  # median(test) / median(base) − 1, in percent
    change_ci_pct: list[float] | None  # [low, high] of the change (Moses), percent
    change_ci_level: float | None
    p_value: float | None
    test_method: str | None
    noise_floor_pct: float | None  # run-to-run spread measured on a side with ≥ MIN_RUNS runs
    verdict: str
    reason: str
    runs_needed: int | None = None  # inconclusive: runs per side for a CI as narrow as ±threshold

    def to_dict(self) -> JsonObject:
        return asdict(self)


def runs_for_ci_width(ci_pct: Sequence[float], n1: int, n2: int, threshold_pct: float) -> int | None:
    """Runs per side at which the change's CI is estimated to be as narrow as ±threshold, or None.

    A CI wider than ±threshold can never lie inside it, so this is the fewest runs an "unchanged"
    verdict needs (necessary, not sufficient). Estimate: on log ratios the CI's width scales as
    √(1/n1 + 1/n2) at the measured run-to-run spread. None beyond MAX_RUNS_ESTIMATE per side.
    """
    width = math.log1p(ci_pct[1] / 100.0) - math.log1p(ci_pct[0] / 100.0)
    band = math.log1p(threshold_pct / 100.0) - math.log1p(-min(threshold_pct, 99.0) / 100.0)
    n = math.ceil(2.0 * (width / band) ** 2 / (1.0 / n1 + 1.0 / n2) - 1e-9)  # 20.000…01 is 20
    n = max(n, MIN_RUNS_TO_DETECT, min(n1, n2) + 1)
    return n if n <= MAX_RUNS_ESTIMATE else None


def compare_runs(
    base: Sequence[float],
    test: Sequence[float],
    threshold_pct: float = 5.0,
    higher_is_better: bool = False,
    alpha: float = ALPHA,
    noise_floor_pct: float | None = None,
) -> RunComparison:
    """Compare run-level values (benchstat/asv style): runs, not iterations, are the samples.

    ≥ MIN_RUNS per side: Mann–Whitney p < alpha and |change| ≥ threshold → regression or
    improvement; the change's CI inside ±threshold → unchanged (at 3 vs 3 the CI covers 90 %:
    two one-sided tests at 0.05); else inconclusive, with why and an estimate of the runs per
    side that narrow the CI to ±threshold (`runs_needed`). Fewer runs on a side: the change is
    reported, and the verdict is inconclusive unless a measured noise floor (the run-to-run
    spread of a side that has ≥ MIN_RUNS runs, or `noise_floor_pct`) is known and the change
    exceeds it and the threshold.
    """
    b = [float(v) for v in base]
    t = [float(v) for v in test]
    if not b or not t:
        raise ValueError("compare_runs needs at least one run per side")
    b_med, t_med = float(np.median(b)), float(np.median(t))
    change = percent_change(b_med, t_med)
    ci = shift_ci(b, t)
    spreads = [median_ci(side).spread_pct for side in (b, t) if len(side) >= MIN_RUNS]
    floors = [f for f in spreads if f is not None]
    floor = max([*floors, *([noise_floor_pct] if noise_floor_pct is not None else [])], default=None)

    def result(verdict: str, reason: str, mw: MannWhitney | None = None) -> RunComparison:
        return RunComparison(
            b,
            t,
            b_med,
            t_med,
            len(b),
            len(t),
            change,
            None if ci is None else [ci[0], ci[1]],
            None if ci is None else ci[2],
            None if mw is None else mw.p_value,
            None if mw is None else mw.method,
            floor,
            verdict,
            reason,
        )

    if change is None:
        return result("inconclusive", "base median is 0: relative change undefined")
    worse = change < 0 if higher_is_better else change > 0
    direction = "regression" if worse else "improvement"
    if min(len(b), len(t)) >= MIN_RUNS:
        mw = mann_whitney_u(b, t)
        runs = f"{len(b)} vs {len(t)} runs"
        ci_text = "" if ci is None else f" [{ci[0]:+.1f}, {ci[1]:+.1f}] at {ci[2]:.0%}"
        if mw.p_value < alpha and abs(change) >= threshold_pct:
            return result(
                direction,
                f"change {change:+.1f}%{ci_text} ≥ threshold {threshold_pct:g}% and "
                f"p={mw.p_value:.3g} < {alpha:g} over {runs}",
                mw,
            )
        if ci is not None and -threshold_pct < ci[0] and ci[1] < threshold_pct:
            return result(
                "unchanged",
                f"change {change:+.1f}% and its CI{ci_text} inside ±{threshold_pct:g}% ({runs})",
                mw,
            )
        return _inconclusive_runs(result, mw, change, ci, len(b), len(t), threshold_pct, alpha)
    if floor is None:
        if len(b) == 1 and len(t) == 1:
            return result("inconclusive", ONE_RUN_REASON)
        return result(
            "inconclusive",
            f"{len(b)} vs {len(t)} runs and no measured noise floor: "
            f"use --repeats ≥ {MIN_RUNS} on both sides",
        )
    bar = max(floor, threshold_pct)
    if abs(change) > bar:
        return result(
            direction,
            f"change {change:+.1f}% exceeds the measured run-to-run noise "
            f"floor {floor:.1f}% and the threshold {threshold_pct:g}%",
        )
    return result(
        "inconclusive",
        f"change {change:+.1f}% within the measured run-to-run noise "
        f"floor {floor:.1f}% ({len(b)} vs {len(t)} runs)",
    )


def _inconclusive_runs(
    result: Callable[..., RunComparison],
    mw: MannWhitney,
    change: float,
    ci: tuple[float, float, float] | None,
    n1: int,
    n2: int,
    threshold_pct: float,
    alpha: float,
) -> RunComparison:
    """The inconclusive verdict of ≥ MIN_RUNS runs a side, saying why and what would decide it."""
    runs = f"{n1} vs {n2} runs"
    p = f"p={mw.p_value:.3g}"
    if ci is None:
        return result(
            "inconclusive",
            f"change {change:+.1f}% ({p}, {runs}) has no CI (a value ≤ 0): "
            f"it cannot be shown inside ±{threshold_pct:g}%",
            mw,
        )
    ci_text = f"[{ci[0]:+.1f}, {ci[1]:+.1f}] at {ci[2]:.0%}"
    why = (
        f"its CI {ci_text} reaches beyond ±{threshold_pct:g}% ({p}, {runs})"
        if abs(change) < threshold_pct
        else f"not significant ({p} ≥ {alpha:g}, {runs}; CI {ci_text})"
    )
    text = f"change {change:+.1f}%: {why}"
    needed = runs_for_ci_width(ci, n1, n2, threshold_pct)
    if min_p_value(n1, n2) >= alpha:
        text += f"; {runs} can never reach p < {alpha:g}, use ≥ {MIN_RUNS_TO_DETECT} per side"
    if needed is not None:
        text += (
            f"; about {needed} runs per side narrow the CI to ±{threshold_pct:g}% "
            "(estimate at the measured run-to-run spread)"
        )
    else:
        text += (
            f"; over {MAX_RUNS_ESTIMATE} runs per side would be needed to narrow the CI "
            f"to ±{threshold_pct:g}%"
        )
    return replace(result("inconclusive", text, mw), runs_needed=needed)
