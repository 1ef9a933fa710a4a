"""Means and 95% intervals over a handful of seeds (Student's t), their differences, and the
pairwise comparisons a benchmark's verdict rests on: each with the evaluation set's own
sampling error, Holm-corrected over every pair, with the smallest difference the design can
detect."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["Comparison", "Interval", "compare", "difference", "holm", "interval", "min_detectable"]

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


def _seed_part(xs: Sequence[float]) -> tuple[float, float]:
    """(variance of the mean over seeds, its degrees of freedom)."""
    return statistics.variance(xs) / len(xs), len(xs) - 1


class Comparison(tuple):
    """``(a, b, difference, standard error, degrees of freedom, p)``: ``mean(a) - mean(b)``
    with its two-sided p-value; ``p_holm`` set by :func:`holm`."""

    __slots__ = ()

    def __new__(cls, a: str, b: str, d: float, se: float, df: float, p: float) -> Comparison:
        return super().__new__(cls, (a, b, d, se, df, p))

    a = property(lambda self: self[0])
    b = property(lambda self: self[1])
    d = property(lambda self: self[2])
    se = property(lambda self: self[3])
    df = property(lambda self: self[4])
    p = property(lambda self: self[5])

    def interval(self) -> Interval:
        """The uncorrected 95% interval of the difference."""
        half = t975(self.df) * self.se
        return Interval(self.d, self.d - half, self.d + half)


def compare(a_name: str, a: Sequence[float], b_name: str, b: Sequence[float], tasks: int) -> Comparison:  # fmt: skip
    """``mean(a) - mean(b)`` of final accuracies over seeds, each measured on the same
    ``tasks`` held-out tasks.

    Two sources of error: the seeds (Welch: each method's seed-to-seed variance of its mean,
    Satterthwaite's degrees of freedom) and the evaluation set, a sample of ``tasks`` problems
    that every seed shares, so its error does not shrink with more seeds: the binomial
    variance ``p(1 - p) / tasks`` of each method's mean accuracy. Adding both methods' task
    variances ignores that they were measured on the same problems (which makes the
    difference's true task variance smaller): conservative. The p-value is Student's t's."""
    from scipy.stats import t as student_t

    (va, dfa), (vb, dfb) = _seed_part(a), _seed_part(b)
    pa, pb = statistics.fmean(a), statistics.fmean(b)
    task_var = (pa * (1 - pa) + pb * (1 - pb)) / tasks
    se2 = va + vb + task_var
    d = pa - pb
    if se2 == 0:
        return Comparison(a_name, b_name, d, 0.0, math.inf, 0.0 if d else 1.0)
    seed2 = va**2 / dfa + vb**2 / dfb
    df = se2**2 / seed2 if seed2 > 0 else math.inf  # the task part counted as exact
    p = float(2 * student_t.sf(abs(d) / math.sqrt(se2), min(df, 1e6)))
    return Comparison(a_name, b_name, d, math.sqrt(se2), df, p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error over all of them), in order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def min_detectable(sd: float, seeds: int, accuracy: float, tasks: int, pairs: int, power: float = 0.8) -> float:  # fmt: skip
    """The smallest difference between two methods that a Holm-corrected test over ``pairs``
    comparisons detects with probability ``power``: ``(z(1 - 0.05 / (2 pairs)) + z(power))``
    standard errors (the strictest Holm threshold, normal approximation; optimistic for a
    handful of seeds, where Student's t is wider), each method with seed SD ``sd`` over
    ``seeds`` seeds and the task error of an accuracy near ``accuracy``."""
    z = statistics.NormalDist().inv_cdf
    se = math.sqrt(2 * sd**2 / seeds + 2 * accuracy * (1 - accuracy) / tasks)
    return (z(1 - 0.05 / (2 * max(pairs, 1))) + z(power)) * se
