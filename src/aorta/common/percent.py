"""Percentages printed next to the limit they exceed, with enough digits to read as above it."""

from __future__ import annotations

import math

MAX_DIGITS = 3


def percent_above(ratio: float, limit: float) -> str:
    """`ratio` as a percentage with the fewest decimals (0..3) that still print above `limit`.

    A warning that says "10% (> 10%)" reads as a contradiction: 0.104 over a 0.10 limit prints
    "10.4%", 0.15 prints "15%". Closer to the limit than MAX_DIGITS decimals show, the value is
    rounded up at MAX_DIGITS (0.1000004 → "10.001%").
    """
    for digits in range(MAX_DIGITS + 1):
        text = f"{ratio * 100:.{digits}f}"
        if float(text) > limit * 100:
            return f"{text}%"
    scale = 10**MAX_DIGITS
    return f"{math.ceil(ratio * 100 * scale) / scale:.{MAX_DIGITS}f}%"
