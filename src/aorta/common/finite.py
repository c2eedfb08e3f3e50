"""Quotients that stay finite: a ratio over a tiny value is no ratio, never infinity (not JSON)."""

from __future__ import annotations

import math


def ratio(num: float, den: float) -> float | None:
    """num / den, or None when den is 0 or the quotient is not finite (a subnormal denominator
    such as 5e-324 overflows to infinity): no ratio is shown, never an infinite one."""
    if den == 0:
        return None
    try:
        quotient = num / den
    except (OverflowError, ZeroDivisionError):
        return None
    return quotient if math.isfinite(quotient) else None
