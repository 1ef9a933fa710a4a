"""The last stated answer governs (issue 48): a later "the answer is N" that corrects the box."""

from __future__ import annotations

import pytest

from forkgym.verifiers import MathVerifier, Status


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=0, cache_size=0) as v:
        yield v


@pytest.mark.parametrize(
    ("response", "status", "extracted"),
    [
        # the box is corrected afterwards: the correction is the answer
        (r"so $\boxed{12}$ ... actually 13, so the answer is 13", Status.INCORRECT, "13"),
        (r"first $\boxed{11}$; wait, that is wrong: the answer is 12.", Status.CORRECT, "12"),
        # a restatement of the box, in any words, leaves the box the answer
        (r"the answer is $\boxed{12}$.", Status.CORRECT, "12"),
        (r"So $\boxed{12}$. The answer is 12.", Status.CORRECT, "12"),
        (r"So $\boxed{12}$. Thus the answer is $12$.", Status.CORRECT, "12"),
        (r"So $\boxed{12}$. The answer is 12 apples.", Status.CORRECT, "12"),
        (r"So $\boxed{12}$. The answer is twelve.", Status.CORRECT, "12"),
        (r"So $\boxed{1,200}$. The answer is 1200.", Status.CORRECT, "1,200"),
    ],
)
def test_a_later_different_number_displaces_the_box(verifier, response, status, extracted):
    reference = "1200" if "1,200" in response else "12"
    outcome = verifier.verify(reference, response)
    assert (outcome.status, outcome.extracted) == (status, extracted), outcome


def test_a_symbolic_box_is_never_displaced(verifier):
    """Only plain numbers are compared: a box holding an expression keeps it."""
    outcome = verifier.verify(r"\frac{1}{2}", r"$\boxed{\frac{1}{2}}$, so the answer is 0.5")
    assert outcome.status is Status.CORRECT and outcome.extracted == r"\frac{1}{2}"
