"""The exact null distribution of the Mann–Whitney U statistic, and what it implies for run counts.

Pure Python (no numpy), so command-line help can state the fewest runs per side that can reach
p < ALPHA (MIN_RUNS_TO_DETECT) without importing the statistics stack: one source for that number
in the console texts, the docs (tests/test_docs.py checks them) and the verdicts.
"""

from __future__ import annotations

ALPHA = 0.05


def u_distribution(n1: int, n2: int) -> list[int]:
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


def min_p_value(n1: int, n2: int) -> float:
    """Smallest two-sided exact Mann–Whitney p-value that n1 vs n2 runs can reach (U = 0: every
    run of one side beyond every run of the other), from the exact null distribution of U."""
    counts = u_distribution(n1, n2)
    return min(1.0, 2.0 * counts[0] / sum(counts))


def min_runs_for_alpha(alpha: float = ALPHA, limit: int = 64) -> int:
    """Fewest runs per side (n vs n) whose smallest exact two-sided p is below `alpha`: with fewer,
    no data can give a regression or improvement verdict. ValueError when `limit` is not enough."""
    for n in range(1, limit + 1):
        if min_p_value(n, n) < alpha:
            return n
    raise ValueError(f"no run count up to {limit} per side reaches p < {alpha:g}")


#: fewest runs per side that can reach p < ALPHA (4: 3 vs 3 gives at best p = 0.1, 4 vs 4 2/70)
MIN_RUNS_TO_DETECT = min_runs_for_alpha(ALPHA)
