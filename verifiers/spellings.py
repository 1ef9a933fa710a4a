"""Spellings of an answer that math-verify misreads, rewritten to ones it reads as meant.

Each rewrite keeps the value the writer meant and nothing else, and applies to the reference
and the response alike, before parsing:

* a thin space between digit groups is a thousands separator: ``1\\,000\\,000`` is 1000000
  (math-verify reads 1 times 0 times 0);
* a repeating decimal is its exact fraction: ``0.\\overline{3}`` is ``\\frac{1}{3}``,
  ``1.2\\overline{45}`` is ``\\frac{137}{110}`` (math-verify cannot read ``\\overline``);
* a number followed by one plain word is a number with a unit: ``12 dollars`` is
  ``12 \\text{dollars}``, which math-verify reads as 12 (it reads the bare word as a product of
  single-letter symbols).
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["respell"]

_THIN_THOUSANDS = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\overline\{(\d+)\}")
_UNIT = re.compile(r"([+-]?\d+(?:\.\d+)?)[ \t]+([A-Za-z]{3,})")


def _fraction(match: re.Match[str]) -> str:
    whole, fixed, period = match.group(1) or "0", match.group(2), match.group(3)
    # 0.fixed(period)... = (fixed.period - fixed) / (10^len(fixed) * (10^len(period) - 1))
    repeat = Fraction(int(fixed + period) - int(fixed or "0"), 10 ** len(fixed) * (10 ** len(period) - 1))  # fmt: skip
    value = int(whole) + repeat
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def respell(text: str) -> str:
    """``text`` with the spellings above rewritten (unchanged when it has none of them)."""
    if "\\," in text:
        text = _THIN_THOUSANDS.sub("", text)
    if "\\overline" in text:
        text = _REPEATING.sub(_fraction, text)
    if _UNIT.fullmatch(text.strip()):
        number, word = _UNIT.fullmatch(text.strip()).groups()  # type: ignore[union-attr]
        text = f"{number} \\text{{{word}}}"
    return text
