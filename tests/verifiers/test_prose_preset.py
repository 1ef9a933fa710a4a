"""The ``mathverify`` preset (issue 48): answers in prose, found by math-verify's own
extraction, for users moving from it; forkgym's guards stay."""

from __future__ import annotations

import pytest

from forkgym.verifiers import MathVerifier, Status


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=0, cache_size=0, preset="mathverify") as v:
        yield v


@pytest.mark.parametrize(
    ("reference", "response", "status"),
    [
        ("9", "Answer $9$", Status.CORRECT),  # the default boxed reading finds no answer here
        ("9", "Answer $8$", Status.INCORRECT),
        (r"x \neq 5", r"The solution is $x \neq 5$", Status.CORRECT),
        ("12", r"so $\boxed{12}$.", Status.CORRECT),  # a box still comes first
        (r"\frac{1}{2^{99}}", r"The probability is $\frac{1}{2^{98}}$.", Status.INCORRECT),
    ],
)
def test_prose_answers(verifier, reference, response, status):
    outcome = verifier.verify(reference, response)
    assert outcome.status is status, outcome


def test_the_guards_stay(verifier):
    """A cut-off box is no answer, whatever prose came before it."""
    outcome = verifier.verify("12", r"It is 12, so the answer is $\boxed{1")
    assert outcome.status is Status.INVALID and outcome.details["reason"] == "unclosed_answer"


def test_the_default_does_not_read_prose():
    with MathVerifier(workers=0, cache_size=0) as default:
        assert default.verify("9", "Answer $9$").status is Status.INVALID
