"""Exactly different numbers are never equal by rounding, and a decimal answer is right at the
precision it is written to, through the real grader and the command line.

math-verify rounds both sides to 6 decimals, so it pays ``1/2^98`` for ``1/2^99`` and not
``0.33`` for ``1/3``; forkgym compares exact values exactly, and a decimal answer at the
precision it is written to, before math-verify decides.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from forkgym.cli import app
from forkgym.verifiers import Status
from forkgym.verifiers.exact_numbers import differ, within_written_precision


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
        (r"\frac{1}{3}", r"\boxed{0.333333}"),  # 6 places: right at its written precision
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


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        (r"\frac{1}{3}", r"\boxed{0.33}"),  # 1/3 = 0.333..., within half a unit of the 2nd place
        (r"\frac{1}{3}", r"\boxed{0.333}"),
        (r"\frac13", r"\boxed{.33}"),
        (r"-\frac{2}{3}", r"\boxed{-0.67}"),
        (r"\frac{1}{64}", r"\boxed{0.016}"),
        (r"\frac{22}{7}", r"\boxed{3.14}"),
    ],
)
def test_a_decimal_answer_is_right_at_its_written_precision(one_worker, reference, response):
    outcome = one_worker.verify(reference, response)
    assert outcome.status is Status.CORRECT, outcome
    assert outcome.details.get("compared") == "written_precision"


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        (r"\frac13", r"\boxed{0.34}"),  # 0.0067 away: more than half a unit of the 2nd place
        (r"\frac{1}{3}", r"\boxed{0.3334}"),  # the more places written, the closer it must be
        (r"\frac{2}{3}", r"\boxed{0.66}"),  # truncated, not rounded
        (r"\frac{1}{3}", r"\boxed{0.3}"),  # one significant digit would pay 0.25 to 0.35
        (r"\frac{1}{64}", r"\boxed{0.02}"),
        (r"\frac{1}{64}", r"\boxed{0.0}"),  # a zero claims no digit of the value
        (r"\frac{1}{8}", r"\boxed{0.13}"),  # 0.125 is a tie, not closer than half a unit
        ("0.33", r"\boxed{\frac{1}{3}}"),  # a reference's decimal is the value it states
        ("0.5", r"\boxed{\frac{11}{20}}"),
        ("0.33", r"\boxed{0.333}"),  # two decimals: at the finer one's precision
        (r"33\%", r"\boxed{0.3}"),
        (r"\pi", r"\boxed{3.14}"),  # an irrational reference asks for itself
        (r"\sqrt{2}", r"\boxed{1.41}"),
    ],
)
def test_near_misses_at_written_precision_stay_incorrect(one_worker, reference, response):
    assert one_worker.verify(reference, response).status is Status.INCORRECT


def test_written_precision_needs_a_decimal_answer_and_an_exact_reference():
    from forkgym.verifiers.math_worker import _parse

    def check(ref, ans):
        boxed_ref, boxed_ans = "\\boxed{" + ref + "}", "\\boxed{" + ans + "}"
        return within_written_precision(
            boxed_ref, boxed_ans, _parse(boxed_ref)[0], _parse(boxed_ans)[0]
        )

    assert check(r"\frac{1}{3}", "0.33")
    assert not check("0.333", "0.33")
    assert not check(r"\frac{1}{3}", r"\frac{33}{100}")
    assert not check("x", "0.33")


runner = CliRunner()


@pytest.mark.parametrize(
    ("reference", "response", "status"),
    [
        (r"\frac{1}{3}", r"\boxed{0.33}", "correct"),
        (r"\frac{1}{3}", r"\boxed{0.333}", "correct"),
        ("0.5", r"\boxed{0.5000001}", "incorrect"),
        (r"\frac13", r"\boxed{0.34}", "incorrect"),
        (r"\frac{1}{2^{99}}", r"\boxed{\frac{1}{2^{98}}}", "incorrect"),
        (r"\frac{1}{2006!}", r"\boxed{\frac{1}{2004!}}", "incorrect"),
    ],
)
def test_the_command_line_agrees(reference, response, status):
    """``forkgym verify --reference ... --response ...`` grades as the verifier does."""
    args = ["verify", "--reference", reference, "--response", response, "--workers", "1"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.split()[0] == status, result.stdout
