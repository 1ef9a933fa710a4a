"""Intervals over seeds: Student-t for a mean, Welch for a difference."""

import math
import statistics

import pytest

from forkgym.bench.stats import compare, difference, holm, interval, min_detectable, t975


def test_the_interval_of_three_values_uses_t_with_two_degrees_of_freedom():
    iv = interval([1.0, 2.0, 3.0])
    assert iv.mean == 2.0
    assert iv.half == pytest.approx(4.303 / math.sqrt(3))
    assert str(iv) == "2.000 ± 2.484"


def test_one_value_has_no_finite_interval_and_none_is_nan():
    assert interval([0.5]).mean == 0.5 and not math.isfinite(interval([0.5]).half)
    assert math.isnan(interval([]).mean) and str(interval([])) == "-"


def test_welch_difference_matches_the_hand_computation():
    a, b = [0.50, 0.55, 0.60], [0.30, 0.40, 0.35, 0.45]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    d = difference(a, b)
    assert d.mean == pytest.approx(0.55 - 0.375)
    assert d.half == pytest.approx(t975(df) * math.sqrt(va + vb))
    assert d[1] > 0  # clearly separated


def test_t_quantiles_are_monotone_and_approach_the_normal():
    qs = [t975(df) for df in (1, 2, 5, 10, 29.5, 30, 100, 1e6)]
    assert qs == sorted(qs, reverse=True) and qs[0] == pytest.approx(12.706)
    assert qs[-1] == pytest.approx(1.96, abs=1e-3)


def test_holm_adjusts_step_down_and_keeps_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])


def test_a_comparison_adds_the_task_error_and_gives_students_p():
    from scipy.stats import ttest_ind

    a, b = [0.50, 0.55, 0.60], [0.30, 0.40, 0.35, 0.45]
    welch = ttest_ind(a, b, equal_var=False)
    c = compare("a", a, "b", b, tasks=10**9)  # the task error vanishes: Welch's test
    assert c.p == pytest.approx(welch.pvalue, rel=1e-6)
    with_tasks = compare("a", a, "b", b, tasks=100)
    assert with_tasks.se**2 == pytest.approx(c.se**2 + (0.55 * 0.45 + 0.375 * 0.625) / 100)
    assert with_tasks.p > c.p


def test_the_detectable_difference_shrinks_with_seeds_and_tasks():
    base = min_detectable(0.05, 3, 0.5, 100, 21)
    assert min_detectable(0.05, 5, 0.5, 100, 21) < base
    assert min_detectable(0.05, 3, 0.5, 1000, 21) < base
    assert min_detectable(0.05, 3, 0.5, 100, 1) < base
