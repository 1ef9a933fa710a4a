"""A relation in one variable against the interval it describes (runs in the grading worker).

math-verify compares a relation in the reference with an interval in the answer as sets
(``-2 \\le x \\le 7`` for the reference pays ``[-2, 7]``), but not the other way round: its
option for that, ``allow_set_relation_comp``, also reads a membership such as
``x \\in [-2, 7]`` in the reference as the set, which its own suite marks wrong without the
option. :func:`same_interval` is the narrow rule instead, for either side: the two parsed sides
(math-verify's sympy objects) are the same interval when one is

* a chained pair of inequalities in one variable with a number on each end
  (``a < x < b``, ``a \\le x \\le b``, mixed, or mirrored: ``b \\ge x > a``), or
* one inequality between the variable and a number (``x \\ge a``, ``x > a``, ``x < b``, ...),
  the interval reaching to infinity on its open side,

and the other is an interval with equal endpoints and the same open and closed ends. Anything
else (two variables, an equation, a membership ``x \\in [a, b]``, a set ``\\{a, b\\}``, a
bound that is not a number) is not this rule's, so it can only turn an ``incorrect`` into a
``correct`` for exactly these shapes.
"""

from __future__ import annotations

from typing import Any

import sympy

__all__ = ["as_interval", "same_interval"]

_INEQUALITIES = (sympy.StrictLessThan, sympy.LessThan, sympy.StrictGreaterThan, sympy.GreaterThan)
_STRICT = (sympy.StrictLessThan, sympy.StrictGreaterThan)


def _number(expr: Any) -> bool:
    return isinstance(expr, sympy.Expr) and not expr.free_symbols and expr.is_finite is True and expr.is_real is True  # fmt: skip


def _bound(relation: Any) -> tuple[Any, Any, bool, bool] | None:
    """``(variable, number, is_lower_bound, strict)`` for ``variable <op> number`` or
    ``number <op> variable``; None for any other relation."""
    if not isinstance(relation, _INEQUALITIES):
        return None
    small, big = relation.lts, relation.gts  # small < big (or <=), however it is written
    strict = isinstance(relation, _STRICT)
    if isinstance(big, sympy.Symbol) and _number(small):
        return big, small, True, strict
    if isinstance(small, sympy.Symbol) and _number(big):
        return small, big, False, strict
    return None


def as_interval(expr: Any) -> sympy.Interval | None:
    """The interval a one-variable relation describes (see the module), or None."""
    relations = expr.args if isinstance(expr, sympy.And) else (expr,)
    if not 1 <= len(relations) <= 2:
        return None
    bounds = [_bound(r) for r in relations]
    if any(b is None for b in bounds) or len({b[0] for b in bounds}) != 1:  # type: ignore[index]
        return None
    lower = [b for b in bounds if b[2]]  # type: ignore[index]
    upper = [b for b in bounds if not b[2]]  # type: ignore[index]
    if len(lower) > 1 or len(upper) > 1:
        return None
    start, left_open = (lower[0][1], lower[0][3]) if lower else (sympy.S.NegativeInfinity, True)
    end, right_open = (upper[0][1], upper[0][3]) if upper else (sympy.S.Infinity, True)
    interval = sympy.Interval(start, end, left_open, right_open)
    return interval if isinstance(interval, sympy.Interval) else None


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b) or bool(a.is_finite and b.is_finite and (a - b).is_zero is True)


def same_interval(gold: Any, pred: Any) -> bool:
    """True when one side is a one-variable relation and the other the interval it describes,
    with equal endpoints and the same open and closed ends."""
    for relation, other in ((gold, pred), (pred, gold)):
        if not isinstance(other, sympy.Interval):
            continue
        interval = as_interval(relation)
        if interval is None:
            continue
        same_ends = (interval.left_open, interval.right_open) == (other.left_open, other.right_open)  # fmt: skip
        if same_ends and _equal(interval.start, other.start) and _equal(interval.end, other.end):
            return True
    return False
