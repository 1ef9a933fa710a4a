"""Exactly different numbers are never equal by rounding (issue 48), through the real grader.

math-verify rounds both sides to 6 decimals, so it pays ``1/2^98`` for ``1/2^99``; forkgym
compares exact values exactly, and a decimal at the precision it is written to, before
math-verify decides. Every case that was right stays right: this only removes ``correct``.
"""

from __future__ import annotations

import pytest

from forkgym.verifiers import Status
from forkgym.verifiers.exact_numbers import differ


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        (r"\frac{1}{2^{99}}", r"\boxed{\frac{1}{2^{98}}}"),  # a factor of 2, both round to 0
        (r"\frac{1}{2006!}", r"\boxed{\frac{1}{2004!}}"),
        ("0.5", r"\boxed{0.5000001}"),  # written to 7 places: 1e-7 is two half-units away
        ("0.5000001", r"\boxed{0.5}"),
        (r"10^{-7}", r"\boxed{0}"),
        (r"\sqrt{2} + 10^{-30}", r"\boxed{\sqrt{2}}"),
        (r"\frac{1}{3^{40}}", r"\boxed{\frac{1}{3^{41}}}"),
    ],
)
def test_exactly_different_numbers_are_incorrect(one_worker, reference, response):
    outcome = one_worker.verify(reference, response)
    assert outcome.status is Status.INCORRECT, outcome
    assert outcome.details.get("compared") == "exactly"


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        (r"\frac{1}{2^{99}}", r"\boxed{2^{-99}}"),  # the same number, written differently
        (r"\sqrt{8}", r"\boxed{2\sqrt{2}}"),
        (r"\frac{1}{3}", r"\boxed{0.333333}"),  # 6 places: math-verify's rounding decides
        (r"\sqrt{2}", r"\boxed{1.4142136}"),  # 7 places, within half a unit of the last
        (r"\pi", r"\boxed{3.14159265}"),
        ("0.5", r"\boxed{0.5000000}"),
        ("50", r"\boxed{50\%}"),  # percentages stay math-verify's
        (r"\frac{1}{2}", r"\boxed{\frac{2}{4}}"),
        ("2006", r"\boxed{2006}"),
    ],
)
def test_equal_numbers_stay_correct(one_worker, reference, response):
    assert one_worker.verify(reference, response).status is Status.CORRECT


def test_what_it_does_not_decide_is_left_to_math_verify():
    """Symbols, percentages, decimals within 6 places and expressions too large to evaluate
    here are never called different."""
    from forkgym.verifiers.math_worker import _parse

    def parsed(text):
        return _parse("\\boxed{" + text + "}")[0]

    for ref, ans in [("x + 1", "x + 2"), (r"50\%", "0.4"), ("3.14", "3.1416"), (r"9^{9^{9}}", r"9^{9^{8}}")]:  # fmt: skip
        assert not differ("\\boxed{" + ref + "}", "\\boxed{" + ans + "}", parsed(ref), parsed(ans))
    assert differ(r"\boxed{2^{-99}}", r"\boxed{2^{-98}}", parsed("2^{-99}"), parsed("2^{-98}"))


def test_a_power_tower_is_still_bounded(one_worker):
    """An answer too large to evaluate exactly is not evaluated here: the grade comes back
    within the worker's limit, as before."""
    outcome = one_worker.verify(r"\frac{1}{2}", r"\boxed{\frac{1}{9^{9^{9^{9}}}}}")
    assert outcome.status in {Status.INCORRECT, Status.TIMEOUT}
