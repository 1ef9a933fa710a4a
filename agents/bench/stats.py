"""Means and 95% intervals over a handful of seeds (Student's t), and their differences."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["Interval", "difference", "interval"]

# two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # fmt: skip


def t975(df: float) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (interpolated)."""
    if df < 1:
        return math.inf
    if df >= 30:
        return 1.96 + 2.4 / df  # within 0.003 of the exact value above 30
    lo = int(df)
    frac = df - lo
    hi = min(lo + 1, 30)
    return _T975[lo - 1] * (1 - frac) + _T975[hi - 1] * frac


class Interval(tuple):
    """``(mean, low, high)``; ``n`` values went in (a single value: no interval)."""

    __slots__ = ()

    def __new__(cls, mean: float, low: float, high: float) -> Interval:
        return super().__new__(cls, (mean, low, high))

    @property
    def mean(self) -> float:
        return self[0]

    @property
    def half(self) -> float:
        return (self[2] - self[1]) / 2

    def __str__(self) -> str:
        if math.isnan(self.mean):
            return "-"
        if not math.isfinite(self.half):
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} ± {self.half:.3f}"


def interval(values: Sequence[float]) -> Interval:
    """Mean and 95% t-interval of the mean; one value gives an infinite interval."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return Interval(math.nan, math.nan, math.nan)
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(mean, -math.inf, math.inf)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half)


def difference(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Welch's 95% interval of ``mean(a) - mean(b)`` (unequal variances)."""
    if len(a) < 2 or len(b) < 2:
        d = statistics.fmean(a) - statistics.fmean(b)
        return Interval(d, -math.inf, math.inf)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d = statistics.fmean(a) - statistics.fmean(b)
    se2 = va + vb
    if se2 == 0:
        return Interval(d, d, d)
    df = se2**2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t975(df) * math.sqrt(se2)
    return Interval(d, d - half, d + half)
