import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkgym.verifiers.fastpath import MAX_FAST_CHARS, fast_compare, parse_number


@pytest.mark.parametrize(
    ("text", "value", "decimal"),
    [
        ("42", Fraction(42), False),
        ("-7", Fraction(-7), False),
        ("+5", Fraction(5), False),
        ("05", Fraction(5), False),
        ("1,234,567", Fraction(1234567), False),
        ("10{,}000", Fraction(10000), False),
        (r"10,\!000", Fraction(10000), False),
        ("0.75", Fraction(3, 4), True),
        (".5", Fraction(1, 2), True),
        ("-2.50", Fraction(-5, 2), True),
        ("1,000.5", Fraction(2001, 2), True),
        ("3/4", Fraction(3, 4), False),
        (r"\frac{3}{4}", Fraction(3, 4), False),
        (r"\dfrac{-3}{4}", Fraction(-3, 4), False),
        (r"-\tfrac{3}{4}", Fraction(-3, 4), False),
        (r"-\frac{-3}{4}", Fraction(3, 4), False),
        ("$12$", Fraction(12), False),
    ],
)
def test_parse_number(text, value, decimal):
    parsed = parse_number(text)
    assert parsed is not None
    assert parsed.value == value and parsed.decimal == decimal


@pytest.mark.parametrize(
    "text",
    [
        "1,2",
        "1,0000",
        "5.",
        "1/0",
        r"\frac12",
        "x",
        "2^3",
        r"50\%",
        "1e3",
        "- 3",
        "",
        "1" * (MAX_FAST_CHARS + 1),
    ],
)
def test_not_plain_numbers_are_left_to_math_verify(text):
    assert parse_number(text) is None


@given(st.integers(-(10**40), 10**40), st.integers(-(10**40), 10**40))
def test_integers_compare_exactly(a, b):
    assert fast_compare(str(a), str(b)) is (a == b)
    assert fast_compare(str(a), str(a)) is True


@given(st.integers(min_value=0, max_value=10**12))
def test_thousands_separators(n):
    assert fast_compare(str(n), f"{n:,}") is True


@given(st.integers(-(10**6), 10**6), st.integers(1, 10**6))
def test_fractions_are_exact(p, q):
    assert parse_number(f"{p}/{q}").value == Fraction(p, q)
    assert fast_compare(rf"\frac{{{p}}}{{{q}}}", f"{p}/{q}") is (q != 0)


def test_near_decimals_are_deferred_not_decided():
    assert fast_compare("1/3", "0.333333") is None  # math-verify's rounding rule decides
    assert fast_compare("1/3", "0.33") is None  # right at its written precision: the worker's
    assert fast_compare("1/3", "0.34") is False  # off by more than half a unit of its place
    assert fast_compare("0.33", "1/3") is False  # a reference's decimal is the value it states
    assert fast_compare("1/3", "0.3") is False  # one significant digit is too coarse to pay
    assert fast_compare("2", "2.0") is True
    assert fast_compare("10**20", "1") is None


def test_fast_path_grades_without_importing_sympy():
    code = (
        "import sys\n"
        "from forkgym.verifiers import MathVerifier\n"
        "v = MathVerifier(workers=0)\n"
        "pairs = [('42', r'\\boxed{42}'), ('1,000', r'\\boxed{1000}'), ('3/4', r'\\boxed{0.75}'),\n"
        "         (r'\\frac{1}{3}', r'\\boxed{0.3}'), ('7', r'\\boxed{-7}')]\n"
        "out = v.verify_many(pairs)\n"
        "assert [o.status.value for o in out] == ['correct', 'correct', 'correct', 'incorrect', 'incorrect'], out\n"
        "assert all(o.details['path'] == 'fast' for o in out)\n"
        "assert 'sympy' not in sys.modules and 'math_verify' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("text", ["²", "٣", "１２", "5²"])
def test_unicode_digits_never_reach_int(text):
    assert parse_number(text) is None
    assert fast_compare("2", text) is None
