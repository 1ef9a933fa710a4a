"""Exact, bounded evaluation of arithmetic expressions (the calculator tool; task answers).

Parses with :mod:`ast` (never ``eval``) and computes with :class:`fractions.Fraction`, so
``0.1 + 0.2`` is exactly ``3/10``. Only numbers, ``+ - * / // % **`` (``^`` means power), unary
signs and parentheses are allowed. Sizes are bounded before computing: an expression may not
exceed ``max_chars``, and a power whose result would exceed ``max_digits`` digits is refused
rather than attempted, so ``9^9^9^9`` costs microseconds, not the machine.
"""

from __future__ import annotations

import ast
import math
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .task import Draws

__all__ = [
    "ExpressionError",
    "check_expression_shape",
    "evaluate",
    "evaluate_terms",
    "expression_key",
    "format_number",
    "random_expression",
]


class ExpressionError(ValueError):
    """The expression is malformed, unsupported, too large, or divides by zero."""


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}


def _digits(x: Fraction) -> int:
    return max(len(str(abs(x.numerator))), len(str(x.denominator)))


def evaluate(expression: str, *, max_chars: int = 500, max_digits: int = 2000) -> Fraction:
    """The exact value of ``expression``; raises :class:`ExpressionError` with a reason."""
    if not isinstance(expression, str):
        raise ExpressionError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > max_chars:
        raise ExpressionError(f"expression longer than {max_chars} characters")
    try:
        tree = ast.parse(
            expression.replace("^", "**").replace("×", "*").replace("÷", "/"), mode="eval"
        )
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse expression: {exc.msg}") from None

    def visit(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return visit(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(str(node.value))  # from the literal's text: 0.1 is exactly 1/10
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            value = visit(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return _power(visit(node.left), visit(node.right), max_digits)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = visit(node.left), visit(node.right)
            if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
                raise ExpressionError("division by zero")
            result = _BINARY[type(node.op)](left, right)
            if _digits(result) > max_digits:
                raise ExpressionError(f"result has more than {max_digits} digits")
            return result
        raise ExpressionError(f"unsupported syntax: {type(node).__name__}")

    return visit(tree)


def _power(base: Fraction, exponent: Fraction, max_digits: int) -> Fraction:
    if exponent.denominator != 1:
        raise ExpressionError("only integer exponents are exact")
    e = exponent.numerator
    if base == 0 and e < 0:
        raise ExpressionError("division by zero")
    if base in (0, 1) or e == 0:
        return base**e if base != 0 or e > 0 else Fraction(1)
    if base == -1:
        return Fraction(1 if e % 2 == 0 else -1)
    size = max(math.log10(abs(base.numerator) or 1), math.log10(base.denominator)) * abs(e)
    if size > max_digits:
        raise ExpressionError(f"result has more than {max_digits} digits")
    return base**e


def evaluate_terms(numbers: list[int], ops: list[str]) -> Fraction:
    """``n0 op0 n1 op1 ...`` with ``* /`` before ``+ -``, exactly; what :func:`evaluate` gives
    for the same text, without parsing it (task generators call this on every reset)."""
    if len(ops) != len(numbers) - 1:
        raise ValueError("need exactly one operator between each pair of numbers")
    exact = "/" in ops  # integers are much faster than Fractions when nothing divides
    total = 0
    term: int | Fraction = Fraction(numbers[0]) if exact else numbers[0]
    sign = 1
    for op, n in zip(ops, numbers[1:], strict=True):
        if op == "*":
            term *= n
        elif op == "/":
            if n == 0:
                raise ExpressionError("division by zero")
            term /= n
        elif op in "+-":
            total += sign * term
            sign, term = (1 if op == "+" else -1), (Fraction(n) if exact else n)
        else:
            raise ExpressionError(f"unsupported operator {op!r}")
    return Fraction(total + sign * term)


def expression_key(expression: str) -> str:
    """The problem a flat expression (``n0 op0 n1 op1 ...``, numbers and ``+ - * /`` apart by
    spaces, as :func:`random_expression` writes it) poses, whatever order its commutative parts
    are written in: a sum of signed terms, each term its multiplied and divided factors, every
    multiset sorted. ``45 + 23`` and ``23 + 45`` have one key, as have ``2 * 3 - 4 / 5`` and
    ``-4 / 5 + 3 * 2`` would; two expressions with one key have one value."""
    parts = expression.split()
    numbers, ops = parts[::2], parts[1::2]
    if not numbers or len(numbers) != len(ops) + 1 or not set(ops) <= set("+-*/"):
        raise ValueError(f"not a flat expression of numbers and + - * /: {expression!r}")
    terms: list[str] = []
    sign, above, below = "+", [numbers[0]], []  # the term being read
    for op, n in zip([*ops, "+"], [*numbers[1:], ""], strict=True):
        if op == "*":
            above.append(n)
        elif op == "/":
            below.append(n)
        else:
            factors = "*".join(sorted(above, key=_number_order))
            if below:
                factors += "/" + "*".join(sorted(below, key=_number_order))
            terms.append(sign + factors)
            sign, above, below = op, [n], []
    return " ".join(sorted(terms))


def _number_order(text: str) -> tuple[int, str]:
    return (len(text), text)


def format_number(value: Fraction) -> str:
    """``12``, ``-7/3``: the exact form the math verifier's fast path reads."""
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )


def check_expression_shape(digits: int, terms: int, operations: str) -> str:
    """Validate the knobs of a random expression; returns the operations, sorted."""
    if digits < 1 or terms < 2:
        raise ValueError("need digits >= 1 and terms >= 2")
    if not operations or set(operations) - set("+-*/"):
        raise ValueError(f"operations must be a non-empty subset of '+-*/', got {operations!r}")
    return "".join(sorted(set(operations)))


def random_expression(
    draw: Draws, digits: int, terms: int, operations: str
) -> tuple[str, str, list[str]]:
    """``(expression, exact answer, operators)``: ``terms`` numbers of ``digits`` digits.

    Divisions by zero are avoided by construction (a zero divisor becomes 1).
    """
    low, high = (10 ** (digits - 1) if digits > 1 else 0), 10**digits
    numbers = [draw.between(low, high) for _ in range(terms)]
    ops = [draw.pick(operations) for _ in range(terms - 1)]
    for i, op in enumerate(ops):
        if op == "/" and numbers[i + 1] == 0:
            numbers[i + 1] = 1
    expression = str(numbers[0]) + "".join(
        f" {op} {n}" for op, n in zip(ops, numbers[1:], strict=True)
    )
    return expression, format_number(evaluate_terms(numbers, ops)), ops
