"""Mann–Whitney U and the compare verdict rule, against reference values computed with scipy 1.17."""

from __future__ import annotations

import numpy as np
import pytest

from aorta.hw_queue_eval.stats import compare_samples, mann_whitney_u


@pytest.mark.parametrize(("a", "b", "u", "p", "method"), [
    # scipy.stats.mannwhitneyu(a, b, alternative="two-sided", method="exact")
    ([1, 2, 3], [4, 5, 6], 0.0, 0.1, "exact"),
    ([1.1, 2.3, 3.2, 4.4, 5.1], [2.2, 6.1, 7.3, 8.2, 9.1, 10.5], 4.0, 0.05194805194805195, "exact"),
    # ties → normal approximation with tie and continuity correction (scipy method="asymptotic")
    ([1, 2, 2, 3, 3, 3, 4], [2, 3, 4, 4, 5, 5, 6, 6], 8.5, 0.025144761173357368, "normal"),
])
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
    c = compare_samples(_noisy(10.0, 30, 1), _noisy(12.0, 30, 2), threshold_pct=5)
    assert c.verdict == "regression"
    assert c.change_pct == pytest.approx(20, abs=3)
    assert c.p_value < 1e-6


def test_clear_latency_improvement():
    assert compare_samples(_noisy(10.0, 30, 1), _noisy(8.0, 30, 2)).verdict == "improvement"


def test_throughput_direction_is_reversed():
    higher = compare_samples(_noisy(100.0, 30, 1), _noisy(130.0, 30, 2), higher_is_better=True)
    lower = compare_samples(_noisy(100.0, 30, 1), _noisy(70.0, 30, 2), higher_is_better=True)
    assert (higher.verdict, lower.verdict) == ("improvement", "regression")


def test_noise_is_unchanged():
    c = compare_samples(_noisy(10.0, 40, 3), _noisy(10.0, 40, 4))
    assert c.verdict == "unchanged"


def test_small_significant_shift_below_threshold_is_unchanged():
    c = compare_samples(_noisy(10.0, 200, 5), _noisy(10.2, 200, 6), threshold_pct=5)
    assert c.p_value < 0.05
    assert c.verdict == "unchanged"


def test_three_samples_are_inconclusive():
    c = compare_samples([1.0, 1.1, 1.2], [5.0, 5.1, 5.2])
    assert c.verdict == "inconclusive"
    assert "too few samples" in c.reason


def test_large_but_noisy_change_is_inconclusive():
    c = compare_samples([1, 10, 2, 9, 3, 8], [2, 11, 3, 10, 4, 9], threshold_pct=5)
    assert c.verdict == "inconclusive"
    assert "not significant" in c.reason
