"""A relation in one variable equals the interval it describes, on either side, through the
real grader; its near misses stay wrong, and so does math-verify's suite row that made its
``allow_set_relation_comp`` option unsafe."""

from __future__ import annotations

import pytest
import sympy

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.relations import as_interval, same_interval


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        ("[-2, 7]", r"\boxed{-2 \le x \le 7}"),
        ("[-2, 7]", r"\boxed{-2 \leq x \leq 7}"),
        ("(-2, 7)", r"\boxed{-2 < x < 7}"),
        ("(-2, 7]", r"\boxed{-2 < x \le 7}"),  # mixed ends
        ("[-2, 7)", r"\boxed{7 > y \ge -2}"),  # mirrored, another letter
        (r"[\frac{1}{2}, 1]", r"\boxed{0.5 \le x \le 1}"),  # equal endpoints, spelled otherwise
        (r"[3, \infty)", r"\boxed{x \ge 3}"),
        (r"(3, \infty)", r"\boxed{x > 3}"),
        (r"(3, \infty)", r"\boxed{3 < x}"),
        (r"(-\infty, 3]", r"\boxed{x \le 3}"),
        (r"(-\infty, 3)", r"\boxed{3 > x}"),
        # the relation in the reference (math-verify pays these itself)
        (r"-2 \le x \le 7", r"\boxed{[-2, 7]}"),
        (r"x > 3", r"\boxed{(3, \infty)}"),
    ],
)
def test_a_relation_equals_its_interval(one_worker, reference, response):
    assert one_worker.verify(reference, response).status is Status.CORRECT


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        ("[-2, 7]", r"\boxed{-2 \le x \le 8}"),  # a wrong endpoint
        ("[-2, 7]", r"\boxed{-3 \le x \le 7}"),
        ("[-2, 7]", r"\boxed{-2 < x \le 7}"),  # < against a closed end
        ("(-2, 7)", r"\boxed{-2 < x \le 7}"),  # <= against an open end
        (r"-2 < x \le 7", r"\boxed{[-2, 7]}"),
        (r"[3, \infty)", r"\boxed{x > 3}"),
        (r"(-\infty, 3)", r"\boxed{x \le 3}"),
        (r"[3, \infty)", r"\boxed{x \le 3}"),  # the other side of 3
        ("[-2, 7]", r"\boxed{-2 \le x \le y}"),  # two variables
        ("[-2, 7]", r"\boxed{-2 \le x, y \le 7}"),
        ("[-2, 7]", r"\boxed{-2 \le 2x \le 7}"),  # not the variable alone
        (r"\{-2, 7\}", r"\boxed{-2 \le x \le 7}"),  # a set, not an interval
        (r"-2 \le x \le 7", r"\boxed{\{-2, 7\}}"),
        ("[-2, 7]", r"\boxed{x = 7}"),  # an equation
        ("[-2, 7]", r"\boxed{x = -2, 7}"),
        (r"[\frac{1}{3}, 1]", r"\boxed{0.33 \le x \le 1}"),  # endpoints are compared exactly
    ],
)
def test_near_misses_stay_incorrect(one_worker, reference, response):
    assert one_worker.verify(reference, response).status is Status.INCORRECT


def test_math_verify_suite_rows_stay_as_the_suite_says():
    """math-verify's suite (``test_set_rel_assymetry`` in the ``test_all.py`` of its 0.9.0
    source) grades a membership in the reference against a relation as wrong without the option, and
    the reverse as right; forkgym, graded as the suite benchmark grades
    (benchmarks/mathverify_suite.py), keeps both."""
    with MathVerifier(workers=0, cache_size=0, extract=["boxed", r"(?s).+"]) as verifier:
        wrong = verifier.verify(r"$x \in [-2,7]$", r"$-2 \\le x \\le 7$")
        right = verifier.verify(r"$-2 \\le x \\le 7$", r"$x \in [-2,7]$")
    assert wrong.status is Status.INCORRECT, wrong
    assert right.status is Status.CORRECT, right


def test_the_rule_reads_parsed_relations():
    x, y = sympy.Symbol("x", real=True), sympy.Symbol("y", real=True)
    assert as_interval(sympy.And(x >= -2, x < 7)) == sympy.Interval.Ropen(-2, 7)
    assert as_interval(sympy.Ge(x, 3)) == sympy.Interval(3, sympy.oo)
    assert as_interval(sympy.And(x >= -2, x <= y)) is None
    assert as_interval(sympy.And(x >= -2, x <= 7, x < 9)) is None
    assert as_interval(sympy.Eq(x, 7)) is None
    assert as_interval(sympy.And(x > 1, x > 2)) is None  # two lower bounds
    assert as_interval(sympy.Lt(x, sympy.oo)) is None  # a bound must be a number
    assert same_interval(sympy.Interval(-2, 7), sympy.And(x >= -2, x <= 7))
    assert not same_interval(sympy.Interval(-2, 7), sympy.Eq(x, sympy.Interval(-2, 7)))
    assert not same_interval(sympy.FiniteSet(-2, 7), sympy.And(x >= -2, x <= 7))
