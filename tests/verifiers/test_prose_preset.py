"""The ``mathverify`` preset: answers in prose, found by math-verify's own extraction, for
users moving from it; forkgym's guards stay."""

from __future__ import annotations

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.prose import readable_prose


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
        ("34", "Final Answer: The largest $n$ is 34.", Status.CORRECT),  # plain text still read
        ("9", "Answer $$ \n 9 \n $$", Status.CORRECT),  # display math may cross lines
        ("9", "Answer \\[ \n 9 \n \\]", Status.CORRECT),
        ("[-2, 7]", r"So $-2 \le x \le 7$.", Status.CORRECT),
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


@pytest.mark.parametrize("response", ["Answer $ \n 9 \n $", "Answer \\( \n 9 \n \\)"])
def test_inline_math_broken_across_lines_states_no_answer(verifier, response):
    """math-verify's LaTeX reading refuses inline math that crosses a line, and its suite
    (``test_latex_notation``) says these responses do not answer 9: the plain-text reading
    does not find the 9 inside the refused span either."""
    outcome = verifier.verify("$9$", response)
    assert outcome.status is not Status.CORRECT, outcome


def test_only_inline_math_that_crosses_a_line_is_dropped():
    assert readable_prose("Answer $ \n 9 \n $ so 8") == "Answer   so 8"
    assert readable_prose("Answer \\( \n 9 \n \\)") == "Answer  "
    for kept in ["Answer $9$\nnext", "Answer $$ \n 9 \n $$", "Answer \\[ \n 9 \n \\]", "costs 5$\nor $6"]:  # fmt: skip
        assert readable_prose(kept) == kept
