"""The part of math grading that runs inside a worker process (math-verify + sympy).

This module is preloaded by the pool's fork server, so every worker starts with math-verify
imported and warmed. It returns plain strings and dicts only: sympy objects are never pickled
or stringified here (printing some of them can hang), and math-verify's own ``signal.alarm``
timeouts are switched off because the pool enforces a hard wall-clock limit from outside.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from .exact_numbers import differ, within_written_precision
from .relations import same_interval

__all__ = ["grade", "warm_up"]

for _name in ("math_verify", "latex2sympy2_extended"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

_CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())


def _complete_the_antlr_4_9_parser() -> None:
    """latex2sympy2_extended (1.11) ships a parser per ANTLR runtime; the one for 4.9.3 (the
    runtime beside hydra-core, hence verl) was generated from a grammar whose ``atom`` rule
    lacks the ``FUNC_GAMMA`` alternative the shared visitor asks about before percentages, so
    every ``50\\%`` raised AttributeError and graded wrong (``50\\%`` against ``50``: incorrect
    under 4.9.3, correct under 4.13.2). That method is the only difference between the two
    generated parsers' contexts; the missing alternative is answered "absent", as a parser
    whose rule lacks it would."""
    from latex2sympy2_extended import antlr_parser

    atom = antlr_parser.PSParser.AtomContext
    if not hasattr(atom, "FUNC_GAMMA"):
        atom.FUNC_GAMMA = lambda self: None


_complete_the_antlr_4_9_parser()


def _parse(text: str) -> list[Any]:
    # The caller hands over exactly what to parse (see math_verifier.parser_input): an
    # extracted answer inside a box, or a plain-text number as written.
    return parse(text, list(_CONFIG), parsing_timeout=None)


@lru_cache(maxsize=2048)
def _parse_reference(reference: str) -> tuple[Any, ...]:
    return tuple(_parse(reference))


def grade(
    reference: str,
    answer: str,
    float_rounding: int = 6,
    numeric_precision: int = 15,
) -> tuple[str, dict[str, Any]]:
    """Compare an answer with a reference, each the text math-verify is to parse (an answer
    inside ``\\boxed{}``, or a plain-text number); returns ``(status value, details)``."""
    try:
        gold = _parse_reference(reference)
    except MemoryError:
        return "timeout", {"reason": "memory_limit", "stage": "parse_reference"}
    if not gold:
        return "error", {"reason": "reference_unparseable"}
    try:
        pred = _parse(answer)
    except MemoryError:
        return "timeout", {"reason": "memory_limit", "stage": "parse_answer"}
    if not pred:
        return "invalid", {"reason": "unparseable_answer"}
    try:
        if differ(reference, answer, gold[0], pred[0]):  # never equal by rounding
            return "incorrect", {"compared": "exactly"}
        if within_written_precision(reference, answer, gold[0], pred[0]):
            return "correct", {"compared": "written_precision"}
    except (MemoryError, RecursionError):
        return "timeout", {"reason": "memory_limit", "stage": "exact"}
    try:
        ok = verify(
            list(gold),
            pred,
            float_rounding=float_rounding,
            numeric_precision=numeric_precision,
            timeout_seconds=None,
        )
        if not ok and same_interval(gold[0], pred[0]):  # a relation against its interval
            return "correct", {"compared": "as_interval"}
    except MemoryError:
        return "timeout", {"reason": "memory_limit", "stage": "verify"}
    return ("correct" if ok else "incorrect"), {}


def warm_up() -> None:
    """Exercise the parsers once so the first real request does not pay for lazy set-up."""
    grade("\\boxed{\\frac{1}{2}}", "\\boxed{0.5}")
    grade("\\boxed{x^2+1}", "\\boxed{1+x^2}")
    grade("\\boxed{[0,1)}", "\\boxed{(1,2)}")


warm_up()
