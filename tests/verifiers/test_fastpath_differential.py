"""The fast path decides only where the full grader would say the same: a differential test.

Numeric strings are generated with the spellings that make numbers ambiguous (thousands
separators, decimal commas, leading zeros, signs, decimals, fractions), paired with each
other and with other spellings of the same value, and graded twice: by the fast path and by
the full grader with the fast path off (math-verify). Wherever the fast path decides, the two
verdicts must be equal.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from forkgym.verifiers import MathVerifier
from forkgym.verifiers.fastpath import fast_compare


@pytest.fixture(scope="module")
def full():
    verifier = MathVerifier(workers=0, cache_size=0, fast_path=False)
    yield verifier
    verifier.close()


digits = st.text("0123456789", min_size=1, max_size=7)
signs = st.sampled_from(["", "", "-", "+"])


@st.composite
def grouped(draw) -> str:
    """Digits with commas every three (or at wrong places), leading zeros allowed."""
    head = draw(st.text("0123456789", min_size=1, max_size=3))
    groups = draw(st.lists(st.text("0123456789", min_size=2, max_size=4), min_size=1, max_size=3))
    return ",".join([head, *groups])


@st.composite
def number(draw) -> str:
    kind = draw(st.sampled_from(["int", "grouped", "decimal", "decimal_comma", "slash", "frac"]))
    sign = draw(signs)
    if kind == "int":
        return sign + draw(digits)
    if kind == "grouped":
        text = draw(grouped())
        if draw(st.booleans()):
            text += "." + draw(digits)
        return sign + text
    if kind == "decimal":
        return sign + draw(st.sampled_from(["", "0"])) + draw(digits) + "." + draw(digits)
    if kind == "decimal_comma":
        return sign + draw(digits) + "," + draw(st.text("0123456789", min_size=1, max_size=4))
    num, den = draw(digits), draw(st.text("123456789", min_size=1, max_size=3))
    if kind == "slash":
        return f"{sign}{num}/{den}"
    return f"{sign}\\frac{{{num}}}{{{den}}}"


def respell(text: str) -> list[str]:
    """Other spellings of what the fast path reads ``text`` as (same value)."""
    from forkgym.verifiers.fastpath import parse_number

    parsed = parse_number(text)
    if parsed is None:
        return []
    value = Fraction(parsed.value)
    out = [
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    ]
    if value.denominator == 1:
        out.append(f"{int(value):,}")
    return out


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reference=number(), answer=number(), same=st.booleans())
@pytest.mark.slow
def test_wherever_the_fast_path_decides_it_agrees_with_the_full_grader(
    full, reference, answer, same
):
    if same:  # half the pairs: the same value spelled otherwise, so "correct" is exercised
        answer = next(iter(respell(reference)), answer)
    response = f"The answer is $\\boxed{{{answer}}}$."
    fast = fast_compare(reference, answer)
    event("fast path decides" if fast is not None else "fast path defers")
    if fast is None:
        return
    verdict = full.verify(reference, response).status.value
    assert verdict in ("correct", "incorrect")
    assert fast == (verdict == "correct"), (reference, answer, verdict)


@pytest.mark.parametrize(
    ("reference", "answer"),
    [("0,111", "111"), ("111", "0,111"), ("0,111", "0.111"), ("00,111", "111")],
)
def test_a_leading_zero_group_is_not_a_thousands_separator(reference, answer):
    assert fast_compare(reference, answer) is None  # the full grader reads a decimal comma


@pytest.mark.parametrize(
    ("reference", "answer", "status"),
    [
        ("1,22", r"\boxed{1.22}", "correct"),  # math-verify reads a bare 1,22 as 1.22 ...
        ("12,5", r"\boxed{12.5}", "correct"),
        ("1,22", r"\boxed{1.23}", "incorrect"),
        ("1,234", r"\boxed{1234}", "correct"),  # ... and 1,234 as 1234, boxed or not
        ("0,111", r"\boxed{0.111}", "correct"),
    ],
)
def test_a_reference_means_what_it_says_however_it_is_wrapped(full, reference, answer, status):
    assert full.verify(reference, answer).status.value == status
