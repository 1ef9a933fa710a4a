"""Numbers compared exactly, and a decimal at the precision it is written to (runs in the
grading worker).

math-verify compares two numbers after rounding both to ``float_rounding`` decimals (6), so
``\\frac{1}{2^{99}}`` equals ``\\frac{1}{2^{98}}`` (both round to 0), ``\\frac{1}{2006!}``
equals ``\\frac{1}{2004!}``, and ``0.5000001`` equals ``0.5``: a policy on a probability task
would be paid for being off by a factor, while ``0.33`` for ``\\frac{1}{3}``, right to the two
places it claims, is not paid. Before math-verify decides, two rules look at the two parsed sides:

:func:`differ` says ``True`` only when they are certainly different numbers:

* both written exactly (no decimal point, no percent sign) and both evaluate, within size
  bounds, to rationals that differ, or to reals whose difference at 60 significant digits is
  far from 0;
* one side a plain decimal written to more places than math-verify's rounding keeps, and the
  other side (written exactly, or a decimal with fewer places) further from it than half a
  unit in its last written place.

:func:`within_written_precision` says ``True`` when the answer is a plain decimal with at
least two significant digits, the reference is written exactly and is a rational number, and
its value lies closer than half a unit of the decimal's last written place (``0.33`` and
``0.333`` for ``\\frac{1}{3}``; not ``0.34``, nor ``0.3``, whose one digit would pay anything
from 0.25 to 0.35). An irrational reference (``\\pi``, ``\\sqrt{2}``) asks for itself: a
decimal for it is math-verify's to judge at 6 places, as before (``3.14`` is not ``\\pi``).
A decimal in the reference is the value it states (a dataset's ``0.5`` is one half), so it is
not widened this way; two decimals match only within half a unit of the finer one's last
written place.

Everything else (percentages, symbols, sets, intervals, expressions too large to evaluate
here) is left to math-verify.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import sympy

from .fastpath import right_at_written_precision

__all__ = ["differ", "within_written_precision"]

# bounds on what is evaluated exactly: a power's result size in bits, a factorial's argument
MAX_POWER_BITS = 200_000
MAX_FACTORIAL = 5_000
DIGITS = 60  # significant digits of the numeric comparison of irrational values
_DECIMAL = re.compile(r"\d[.,](\d+)")  # a decimal point, or a comma (a decimal comma?)
_PLAIN_DECIMAL = re.compile(r"[+-]?\d*\.\d+")
_BOX = re.compile(r"\\boxed\{(.*)\}", re.S)


def _inner(text: str) -> str:
    """The text inside the parser input's box (or the plain number as written)."""
    m = _BOX.fullmatch(text.strip())
    return (m.group(1) if m else text).strip().strip("$").strip()


def _bounded(expr: Any) -> bool:
    """Whether every power and factorial of ``expr`` is small enough to evaluate exactly."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow):
            base, exp = node.args
            if not exp.is_Rational:  # a tower or a symbolic exponent
                return False
            if abs(int(exp.p)) * max(1, _bits(base)) > MAX_POWER_BITS:
                return False
        elif isinstance(node, sympy.factorial):
            arg = node.args[0]
            if not arg.is_Integer or abs(int(arg)) > MAX_FACTORIAL:
                return False
    return True


def _bits(base: Any) -> int:
    if base.is_Rational:
        return max(abs(int(base.p)).bit_length(), abs(int(base.q)).bit_length())
    return 64


def _value(expr: Any) -> Any | None:
    """``expr`` evaluated exactly (a sympy number), or None when it is not a plain number."""
    if not isinstance(expr, sympy.Expr) or not expr.is_number or expr.has(sympy.Float):
        return None  # a float is an approximation, whatever its text looked like
    if not _bounded(expr):
        return None
    value = expr.doit()
    return value if value.is_number and value.is_real else None


def _numeric(value: Any) -> Fraction | None:
    """A value as a Fraction: exact for a rational, 60 significant digits otherwise."""
    if value.is_Rational:
        return Fraction(int(value.p), int(value.q))
    approx = value.evalf(DIGITS)
    if not approx.is_Float:
        return None
    return Fraction(str(approx))


def _exactly_written(text: str) -> bool:
    return "%" not in text and not _DECIMAL.search(text)


def differ(reference: str, answer: str, gold: Any, pred: Any) -> bool:
    """True when the reference and the answer (parser inputs, and their first parsed values)
    are certainly different real numbers; False when that is not certain (see the module)."""
    ref, ans = _inner(reference), _inner(answer)
    if "%" in ref or "%" in ans:
        return False
    if _exactly_written(ref) and _exactly_written(ans):
        return _exact_values_differ(gold, pred)
    if _PLAIN_DECIMAL.fullmatch(ref) and _PLAIN_DECIMAL.fullmatch(ans):
        fine, coarse = sorted((ref, ans), key=_places, reverse=True)
        return _finer_than_rounding_differs(fine, Fraction(coarse))
    for decimal, other, other_parsed in ((ref, ans, pred), (ans, ref, gold)):
        if _PLAIN_DECIMAL.fullmatch(decimal) and _exactly_written(other):
            exact = _exact_number(other_parsed)
            return exact is not None and _finer_than_rounding_differs(decimal, exact)
    return False


def within_written_precision(reference: str, answer: str, gold: Any, pred: Any) -> bool:
    """True when the answer is a plain decimal with at least two significant digits, the
    reference is written exactly and is a rational number, and its value lies closer than
    half a unit of the decimal's last written place (see the module)."""
    ref, ans = _inner(reference), _inner(answer)
    if "%" in ref or not _PLAIN_DECIMAL.fullmatch(ans) or not _exactly_written(ref):
        return False
    value = _value(gold)
    if value is None or not value.is_Rational:
        return False  # an irrational reference (\pi, \sqrt{2}) asks for itself
    exact = Fraction(int(value.p), int(value.q))
    return right_at_written_precision(Fraction(ans), _places(ans), exact)


def _exact_number(parsed: Any) -> Fraction | None:
    """A side written exactly, as a Fraction (see :func:`_numeric`), or None."""
    value = _value(parsed)
    return _numeric(value) if value is not None else None


def _places(decimal: str) -> int:
    return len(decimal.split(".")[1])


def _exact_values_differ(gold: Any, pred: Any) -> bool:
    g, p = _value(gold), _value(pred)
    if g is None or p is None:
        return False
    if g.is_Rational and p.is_Rational:
        return bool(g != p)
    a, b = _numeric(g), _numeric(p)
    if a is None or b is None:
        return False
    scale = max(abs(a), abs(b))
    return abs(a - b) > scale * Fraction(1, 10 ** (DIGITS - 10))


def _finer_than_rounding_differs(decimal: str, other: Fraction) -> bool:
    """A decimal written to more than 6 places against a value: different when they are more
    than half a unit of its last written place apart."""
    places = _places(decimal)
    if places <= 6:
        return False  # within math-verify's rounding: its rule decides
    return abs(Fraction(decimal) - other) > Fraction(1, 2 * 10**places)
