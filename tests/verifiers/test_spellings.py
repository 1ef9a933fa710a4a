"""Spellings math-verify misreads (issue 48's shared misses), read as meant, and their near
misses still wrong."""

from __future__ import annotations

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.spellings import respell


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=0, cache_size=0) as v:
        yield v


@pytest.mark.parametrize(
    ("text", "spelled"),
    [
        (r"1\,000\,000", "1000000"),
        (r"12\,345.5", "12345.5"),
        (r"x\,y", r"x\,y"),  # a thin space between symbols stays
        (r"1\,00", r"1\,00"),  # not a group of three digits
        (r"0.\overline{3}", r"\frac{1}{3}"),
        (r"1.2\overline{45}", r"\frac{137}{110}"),  # 1.2454545... = 137/110
        (r"2.\overline{9}", r"\frac{3}{1}"),
        ("12 dollars", r"12 \text{dollars}"),
        ("12 x", "12 x"),  # a one-letter word is a symbol
        ("12 dollars and 5 cents", "12 dollars and 5 cents"),  # not one number and one word
    ],
)
def test_respell(text, spelled):
    assert respell(text) == spelled


@pytest.mark.parametrize(
    ("reference", "response", "status"),
    [
        ("1000000", r"\boxed{1\,000\,000}", Status.CORRECT),
        ("1000001", r"\boxed{1\,000\,000}", Status.INCORRECT),
        (r"\frac{1}{3}", r"\boxed{0.\overline{3}}", Status.CORRECT),
        (r"\frac{1}{3}", r"\boxed{0.\overline{4}}", Status.INCORRECT),
        ("0.3", r"\boxed{0.\overline{3}}", Status.INCORRECT),  # 0.333... is not 0.3
        ("12", r"\boxed{12 dollars}", Status.CORRECT),
        ("13", r"\boxed{12 dollars}", Status.INCORRECT),
        (r"\frac{137}{110}", r"\boxed{1.2\overline{45}}", Status.CORRECT),
    ],
)
def test_graded_as_meant(verifier, reference, response, status):
    assert verifier.verify(reference, response).status is status
