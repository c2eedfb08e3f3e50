"""Mann–Whitney U and the compare verdict rule, against reference values computed with scipy 1.17."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aorta.hw_queue_eval.analysis.exact_u import MIN_RUNS_TO_DETECT, min_p_value, min_runs_for_alpha
from aorta.hw_queue_eval.analysis.stats import compare_runs, mann_whitney_u, runs_for_ci_width


@pytest.mark.parametrize(
    ("a", "b", "u", "p", "method"),
    [
        # scipy.stats.mannwhitneyu(a, b, alternative="two-sided", method="exact")
        ([1, 2, 3], [4, 5, 6], 0.0, 0.1, "exact"),
        ([1.1, 2.3, 3.2, 4.4, 5.1], [2.2, 6.1, 7.3, 8.2, 9.1, 10.5], 4.0, 0.05194805194805195, "exact"),
        # ties → normal approximation with tie and continuity correction (scipy method="asymptotic")
        ([1, 2, 2, 3, 3, 3, 4], [2, 3, 4, 4, 5, 5, 6, 6], 8.5, 0.025144761173357368, "normal"),
    ],
)
def test_mann_whitney_matches_reference(a, b, u, p, method):
    result = mann_whitney_u(a, b)
    assert result.u == pytest.approx(u)
    assert result.p_value == pytest.approx(p, rel=1e-9)
    assert result.method == method


def test_mann_whitney_large_normal_matches_reference():
    rng = np.random.default_rng(0)
    rng.normal(0, 1, 30), rng.normal(0.5, 1, 40)  # keep the stream identical to the reference
    a, b = rng.normal(0, 1, 100), rng.normal(0.1, 1, 120)
    result = mann_whitney_u(a, b)
    assert result.method == "normal"
    assert result.u == pytest.approx(6247.0)
    assert result.p_value == pytest.approx(0.60003553394176, rel=1e-9)


def test_identical_samples_are_not_significant():
    assert mann_whitney_u([2.0] * 10, [2.0] * 10).p_value == 1.0


def _noisy(median: float, n: int, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).normal(median, median * 0.02, n))


def test_clear_latency_regression():
    c = compare_runs(_noisy(10.0, 30, 1), _noisy(12.0, 30, 2), threshold_pct=5)
    assert c.verdict == "regression"
    assert c.change_pct == pytest.approx(20, abs=3)
    assert c.p_value < 1e-6


def test_clear_latency_improvement():
    assert compare_runs(_noisy(10.0, 30, 1), _noisy(8.0, 30, 2)).verdict == "improvement"


def test_throughput_direction_is_reversed():
    higher = compare_runs(_noisy(100.0, 30, 1), _noisy(130.0, 30, 2), higher_is_better=True)
    lower = compare_runs(_noisy(100.0, 30, 1), _noisy(70.0, 30, 2), higher_is_better=True)
    assert (higher.verdict, lower.verdict) == ("improvement", "regression")


def test_tight_noise_is_unchanged():
    c = compare_runs(_noisy(10.0, 40, 3), _noisy(10.0, 40, 4))
    assert c.verdict == "unchanged"
    assert -5 < c.change_ci_pct[0] < c.change_ci_pct[1] < 5


def test_small_significant_shift_below_threshold_is_unchanged():
    c = compare_runs(_noisy(10.0, 50, 5), _noisy(10.2, 50, 6), threshold_pct=5)
    assert c.p_value < 0.05
    assert c.verdict == "unchanged"  # real, but its CI lies inside ±5 %


def test_three_runs_far_apart_are_inconclusive():
    c = compare_runs([1.0, 1.1, 1.2], [5.0, 5.1, 5.2])
    assert c.verdict == "inconclusive"
    assert c.p_value == pytest.approx(0.1)  # the smallest p 3 vs 3 can reach
    assert "3 vs 3 runs can never reach p < 0.05, use ≥ 4 per side" in c.reason


def test_large_but_noisy_change_is_inconclusive():
    c = compare_runs([1, 10, 2, 9, 3, 8], [2, 11, 3, 10, 4, 9], threshold_pct=5)
    assert c.verdict == "inconclusive"
    assert "not significant" in c.reason


# --- the fewest runs per side that can reach α, from the exact U distribution ---------------------


def test_min_p_value_is_two_over_the_number_of_rank_orders():
    """By hand: U = 0 is one of C(n1+n2, n1) equally likely rank orders, and two-sided doubles it."""
    assert min_p_value(3, 3) == pytest.approx(2 / 20)
    assert min_p_value(4, 4) == pytest.approx(2 / 70)
    assert min_p_value(3, 4) == pytest.approx(2 / 35)
    assert min_p_value(1, 1) == 1.0
    # the exact test reaches it: complete separation
    assert mann_whitney_u([1, 2, 3, 4], [5, 6, 7, 8]).p_value == pytest.approx(2 / 70)


def test_min_runs_for_alpha_is_4_at_005():
    assert min_runs_for_alpha(0.05) == 4  # 3 vs 3: p ≥ 0.1; 4 vs 4: p can be 0.0286
    assert MIN_RUNS_TO_DETECT == 4
    assert min_runs_for_alpha(0.01) == 5  # 4 vs 4: 0.0286; 5 vs 5: 2/252 = 0.0079
    assert min_runs_for_alpha(0.2) == 3  # 2 vs 2: 1/3; 3 vs 3: 0.1
    with pytest.raises(ValueError, match="reaches p <"):
        min_runs_for_alpha(1e-30, limit=10)


# --- "unchanged" needs evidence: the change's CI inside ±threshold ----------------------------------

WIDE = [50.0, 75.0, 100.0, 125.0, 150.0]  # ±50 % run-to-run spread
TIGHT = [99.0, 99.5, 100.0, 100.5, 101.0]  # ±1 %


def test_identical_wide_noise_pair_is_inconclusive_not_unchanged():
    """Ground truth: the same five wide-spread runs on both sides. The change is 0, but a CI of
    about ±100 % cannot show that it is inside ±5 %."""
    c = compare_runs(WIDE, WIDE[::-1], 5.0, higher_is_better=True)
    assert c.change_pct == 0.0
    assert c.verdict == "inconclusive"
    assert c.change_ci_pct[0] < -5 and c.change_ci_pct[1] > 5
    assert "reaches beyond ±5%" in c.reason
    assert c.runs_needed is not None and c.runs_needed > 5
    assert f"about {c.runs_needed} runs per side" in c.reason


def test_identical_tight_pair_is_unchanged():
    c = compare_runs(TIGHT, TIGHT[::-1], 5.0, higher_is_better=True)
    assert c.verdict == "unchanged"
    assert -5 < c.change_ci_pct[0] <= 0 <= c.change_ci_pct[1] < 5
    assert c.runs_needed is None


def test_runs_for_ci_width_scales_with_the_square_of_the_width():
    """A CI twice as wide as ±threshold needs about 4× the runs: 5 → 20 per side."""
    band = math.log(1.05) - math.log(0.95)
    low, high = math.expm1(-band) * 100, math.expm1(band) * 100  # width 2× the band's
    assert runs_for_ci_width([low, high], 5, 5, 5.0) == 20
    assert runs_for_ci_width([-1.0, 1.0], 3, 3, 5.0) == MIN_RUNS_TO_DETECT  # never below it
    assert runs_for_ci_width([-99.0, 1000.0], 5, 5, 5.0) is None  # beyond MAX_RUNS_ESTIMATE


# --- run-level statistics (one value per run) ---------------------------------------------------

from aorta.hw_queue_eval.analysis.stats import median_ci, shift_ci  # noqa: E402


def test_median_ci_levels_are_the_binomial_coverages():
    assert median_ci([3.0, 1.0, 2.0]).level == pytest.approx(0.75)  # [min, max] of 3
    ci5 = median_ci([5, 1, 4, 2, 3])
    assert (ci5.low, ci5.high, ci5.median) == (1, 5, 3)
    assert ci5.level == pytest.approx(0.9375)
    ci10 = median_ci(range(1, 11))  # k = 2: 1 − 2·P(Bin(10, ½) ≤ 1) = 1 − 22/1024
    assert (ci10.low, ci10.high) == (2, 9)
    assert ci10.level == pytest.approx(1 - 22 / 1024)
    one = median_ci([7.0])
    assert one.low is None
    assert one.level is None
    assert one.spread_pct is None


def test_shift_ci_recovers_a_known_ratio():
    base = [10.0, 10.5, 9.7, 10.2, 9.9]
    low, high, level = shift_ci(base, [v * 1.2 for v in base])
    assert low <= 20.0 <= high
    assert low > 0
    assert level == pytest.approx(1 - 8 / 252)  # k = 3
    assert shift_ci([1.0], [2.0]) is None


def _lognormal_runs(rng, median, n, sigma):
    return list(median * np.exp(rng.normal(0.0, sigma, n)))


def _heavy_runs(rng, median, n):
    """Student t (1 degree of freedom: Cauchy tails) multiplicative noise, kept positive."""
    return list(median * np.exp(np.clip(0.05 * rng.standard_t(1, n), -3, 3)))


@pytest.mark.parametrize("noise", ["lognormal", "heavy"])
def test_false_positive_rate_of_identical_run_sets_at_most_5_percent(noise):
    rng = np.random.default_rng(11)
    pairs = 300
    regressions = 0
    for _ in range(pairs):
        if noise == "lognormal":
            b, t = _lognormal_runs(rng, 100, 5, 0.15), _lognormal_runs(rng, 100, 5, 0.15)
        else:
            b, t = _heavy_runs(rng, 100, 5), _heavy_runs(rng, 100, 5)
        verdict = compare_runs(b, t, 5.0, higher_is_better=True).verdict
        regressions += verdict == "regression"
    assert regressions / pairs <= 0.05


def test_identical_single_runs_never_give_a_verdict():
    rng = np.random.default_rng(5)
    verdicts = {
        compare_runs(
            _lognormal_runs(rng, 100, 1, 0.2), _lognormal_runs(rng, 100, 1, 0.2), 5.0, higher_is_better=True
        ).verdict
        for _ in range(200)
    }
    assert verdicts == {"inconclusive"}


def test_real_difference_is_detected_with_five_runs():
    rng = np.random.default_rng(7)
    found = sum(
        compare_runs(
            _lognormal_runs(rng, 100, 5, 0.1), _lognormal_runs(rng, 160, 5, 0.1), 5.0, higher_is_better=True
        ).verdict
        == "improvement"
        for _ in range(100)
    )
    assert found >= 90  # 1.6× with 10 % run-to-run noise: power close to 1
    c = compare_runs([100.0, 101, 99, 100.5, 99.5], [60.0, 61, 59, 60.5, 59.5], 5.0, higher_is_better=True)
    assert c.verdict == "regression"
    assert c.change_ci_pct[1] < -30


def test_heavy_tailed_outlier_does_not_flip_the_verdict():
    base = [100.0, 101, 99, 100.5, 99.5]
    test = [100.2, 99.8, 100.4, 99.6, 400.0]  # one wild run
    c = compare_runs(base, test, 5.0)
    assert c.change_pct == pytest.approx(0.2)  # the medians agree
    assert c.verdict == "inconclusive"  # no regression, but the wild run widens the CI
