"""Exact grading of plain numbers without sympy: integers, decimals and simple fractions.

Most answers in arithmetic and GSM8K-style tasks are plain numbers; parsing them with
:class:`fractions.Fraction` is three orders of magnitude cheaper than a symbolic library and
exact. The fast path only *decides* when the verdict cannot differ from the full grader's:

* both sides parse as rationals and are equal -> correct;
* both differ and neither is a decimal within rounding distance of the other -> incorrect;
* anything else (units, percentages, near-equal decimals such as ``0.333333`` for ``1/3``,
  which the full grader accepts under its rounding rule, and a decimal answer within half a
  unit of its last written place of a fraction, ``0.33`` for ``1/3``, which it accepts at
  that precision) -> ``None``: ask the full grader.

Inputs longer than :data:`MAX_FAST_CHARS` are never parsed here (Python's int parsing is
quadratic in the digit count and capped by ``sys.int_info``), so the fast path is bounded.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "MAX_FAST_CHARS",
    "FastNumber",
    "fast_compare",
    "parse_number",
    "right_at_written_precision",
]

MAX_FAST_CHARS = 64
# Decimals closer than this (relative) to the other side may be accepted by the full grader's
# rounding rule (it keeps ~6 significant decimals); such pairs are never decided here.
_NEAR = Fraction(1, 10**4)
# A decimal answer is right at its written precision only with this many significant digits:
# 0.3 for 1/3 (one digit) would pay everything from 0.25 to 0.35.
MIN_DIGITS = 2

_INT = (
    r"(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)"  # 1234 or 1,234 (groups of three; 0,111 is a decimal comma)
)
# re.ASCII: \d would also match other scripts' digits, which int() accepts and which are the
# full grader's business, not the fast path's.
_DECIMAL = re.compile(rf"([+-]?)({_INT})(?:\.(\d+))?|([+-]?)\.(\d+)", re.ASCII)
_SLASH = re.compile(r"([+-]?)(\d+)/(\d+)", re.ASCII)
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{([+-]?)(\d+)\}\{(\d+)\}", re.ASCII)


class FastNumber:
    """A parsed plain number: its exact value (an int when it is one), whether it was written
    as a decimal, and to how many places."""

    __slots__ = ("decimal", "places", "value")

    def __init__(self, value: int | Fraction, decimal: bool, places: int = 0) -> None:
        self.value = value
        self.decimal = decimal
        self.places = places

    def __repr__(self) -> str:
        return f"FastNumber({self.value!s}, decimal={self.decimal})"


def _normalise(text: str) -> str:
    s = text.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    if "{" in s or "\\" in s:  # TeX spellings of a thousands separator: 10{,}000, 10,\!000
        s = s.replace("{,}", ",").replace(",\\!", ",")
    return s


def parse_number(text: str) -> FastNumber | None:
    """Parse ``text`` if it is a plain integer, decimal or simple fraction; else ``None``."""
    if len(text) > MAX_FAST_CHARS:
        return None
    if text.isascii() and text.isdigit():  # the common case: an integer, no regex or Fraction
        return FastNumber(int(text), decimal=False)
    s = _normalise(text)
    m = _DECIMAL.fullmatch(s)
    if m:
        if m.group(2) is not None:
            if m.group(1) == "+" and "," in m.group(2):
                return None  # math-verify does not read "+1,000" as 1000: not ours to decide
            sign, whole, frac = m.group(1), m.group(2).replace(",", ""), m.group(3)
        else:
            sign, whole, frac = m.group(4), "0", m.group(5)
        value: int | Fraction = int(whole)
        if frac:
            value += Fraction(int(frac), 10 ** len(frac))
        return FastNumber(-value if sign == "-" else value, bool(frac), len(frac or ""))
    m = _SLASH.fullmatch(s) or _FRAC.fullmatch(s)
    if m:
        groups = m.groups()
        signs, num, den = groups[:-2], int(groups[-2]), int(groups[-1])
        if den == 0:
            return None
        negative = sum(sign == "-" for sign in signs) % 2 == 1
        value = Fraction(num, den)
        return FastNumber(-value if negative else value, decimal=False)
    return None


def fast_compare(reference: str, answer: str) -> bool | None:
    """True/False when both sides are plain numbers and the verdict is certain, else None."""
    ref = parse_number(reference)
    if ref is None:
        return None
    got = parse_number(answer)
    if got is None:
        return None
    if ref.value == got.value:
        return True
    if ref.decimal or got.decimal:
        scale = max(abs(ref.value), abs(got.value), Fraction(1))
        if abs(ref.value - got.value) <= _NEAR * scale:
            return None  # a rounding question: the full grader's rule decides
        answer_right = (
            got.decimal
            and not ref.decimal
            and right_at_written_precision(Fraction(got.value), got.places, Fraction(ref.value))
        )
        if answer_right:
            return None  # at its written precision: the full grader decides (it reads the texts)
    return False


def right_at_written_precision(decimal: Fraction, places: int, exact: Fraction) -> bool:
    """Whether a decimal written to ``places`` places, with at least :data:`MIN_DIGITS`
    significant digits, is closer to ``exact`` than half a unit of its last place (``0.33``
    and ``0.333`` for 1/3; not ``0.34``, nor ``0.3`` with its one digit)."""
    digits = len(str(abs(decimal) * 10**places)) if decimal else 0  # 0.016: "16", 2 digits
    return digits >= MIN_DIGITS and abs(decimal - exact) < Fraction(1, 2 * 10**places)
