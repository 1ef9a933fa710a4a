import time
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkgym.envs.exact_eval import ExpressionError, evaluate, evaluate_terms, format_number


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("2^10", 1024),
        ("2**-2", Fraction(1, 4)),
        ("0.1 + 0.2", Fraction(3, 10)),
        ("7 / 3", Fraction(7, 3)),
        ("7 // 2", 3),
        ("-7 % 3", 2),
        ("6 × 7 ÷ 2", 21),
        ("-(3 - 5)", 2),
        ("(-1)^1001", -1),
    ],
)
def test_exact_values(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("1/0", "division by zero"),
        ("0^-1", "division by zero"),
        ("9^9^9^9", "more than"),
        ("10**5000", "more than"),
        ("2^0.5", "integer exponents"),
        ("__import__('os')", "unsupported"),
        ("x + 1", "unsupported"),
        ("1 +", "cannot parse"),
        ("'a' * 3", "unsupported"),
        ("1" * 600, "longer than"),
    ],
)
def test_refusals_are_clear_and_fast(expression, reason):
    start = time.perf_counter()
    with pytest.raises(ExpressionError, match=reason):
        evaluate(expression)
    assert time.perf_counter() - start < 5.0  # a bound far above the cost (~1 ms): no hang


@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=6), st.data())
def test_evaluate_terms_matches_the_parser(numbers, data):
    ops = data.draw(
        st.lists(st.sampled_from("+-*/"), min_size=len(numbers) - 1, max_size=len(numbers) - 1)
    )
    for i, op in enumerate(ops):
        if op == "/" and numbers[i + 1] == 0:
            numbers[i + 1] = 1
    text = str(numbers[0]) + "".join(f" {op} {n}" for op, n in zip(ops, numbers[1:], strict=True))
    assert evaluate_terms(numbers, ops) == evaluate(text)


def test_format_number():
    assert format_number(Fraction(12)) == "12" and format_number(Fraction(-7, 3)) == "-7/3"
