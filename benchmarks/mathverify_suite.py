"""forkgym against math-verify's own parametrized test suite (the acceptance measurement).

math-verify's repository tests its grader with about 270 parametrized rows of (gold, prediction,
expected). This script reads those rows from a copy of that ``tests`` folder (not shipped with
forkgym: pass its path; ``pip download math-verify==0.9.0 --no-binary :all: --no-deps`` gives a
source archive holding it), grades every row twice, and prints the agreement:

* math-verify, exactly as the row's test calls it (``parse`` + ``verify`` with the test's
  extraction targets, precision, ``strict`` and ``allow_set_relation_comp``): a sanity check
  that the copy and the installed version agree (0.9.0 passes every row);
* forkgym's :class:`~forkgym.verifiers.MathVerifier` with the documented whole-text fallback
  (``extract=["boxed", "(?s).+"]``: the last boxes, else the whole text is the answer) and the
  row's precision as ``float_rounding``; ``gold`` is the reference, ``pred`` the response.

How rows are read: each test function's ``pytest.mark.parametrize`` values are taken from the
imported module, and the function is run once per row with ``compare_strings`` (or ``parse``)
replaced by a recorder, so the options a row is graded with are the ones its test passes.

Which rows are inside forkgym's contract (decided from the row's text and options alone, never
from a verdict):

* the test uses no option forkgym lacks: ``strict=False`` and ``allow_set_relation_comp=True``
  are out (forkgym always grades strictly and never reads a relation as a set);
* each side is a boxed answer (it contains ``\\boxed``/``\\fbox``) or a bare answer: one math
  span (``$..$``, ``\\(..\\)``, ``\\[..\\]``), several math spans joined only by ``,``, ``;``,
  ``and`` or ``or``, or text without math delimiters and without a word of four or more letters
  outside LaTeX commands. Anything else is prose that math-verify searches for an answer
  ("Final Answer: The largest $n$ is 34.", "the number is not 10 which is 1,000.99€"), which
  forkgym deliberately does not do.

Rows whose label is mathematically wrong are named in :data:`WRONG_LABELS` with the reason;
the suite's own labels give the main figures, and the same figures with those rows corrected
are printed beside them.

Run: ``python benchmarks/mathverify_suite.py PATH/TO/math_verify/tests [--show] [--preset P]``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import time
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WHOLE_TEXT = r"(?s).+"  # the documented whole-text fallback pattern
LIST_JOINERS = re.compile(r"^(?:\s|,|;|\band\b|\bor\b|\\text\{\s*(?:and|or)\s*\}|\\quad|\\qquad)*$")
MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
WORD = re.compile(r"[A-Za-z]{4,}")
# Rows whose expected verdict is mathematically wrong, with why (source, gold, pred -> reason).
# The plain lines keep the suite's own labels; the "labels corrected" lines count these rows
# by the right verdict.
WRONG_LABELS = {
    ("test_yujianll.py::test_string_extraction", r"$1 - \frac{1}{\mathrm{e}}$", r"$1 + \frac{1}{\mathrm{e}}$"):
        "1 - 1/e and 1 + 1/e differ; math-verify cannot parse \\mathrm{e}, reads both sides as 1 "
        "and passes the row",
}  # fmt: skip


@dataclass
class Row:
    source: str  # test file and function
    gold: str
    pred: str
    expected: int
    options: dict[str, Any] = field(default_factory=dict)
    mv: int | None = None
    forkgym: str | None = None

    @property
    def boxes(self) -> int:
        return max(_box_count(self.gold), _box_count(self.pred))

    @property
    def right(self) -> int:
        """The right verdict: the suite's label, unless :data:`WRONG_LABELS` names the row."""
        wrong = (self.source, self.gold, self.pred) in WRONG_LABELS
        return 1 - self.expected if wrong else self.expected


class _Captured(Exception):
    def __init__(self, **options: Any) -> None:
        self.options = options


def _box_count(text: str) -> int:
    return text.count("\\boxed") + text.count("\\fbox")


def _record_compare(gold, pred, match_types=("latex", "expr"), precision=6, strict=True,
                    allow_set_relation_comp=False):  # fmt: skip
    raise _Captured(
        gold=gold, pred=pred, match_types=tuple(match_types), precision=precision,
        strict=strict, allow_set_relation_comp=allow_set_relation_comp, call="compare_strings",
    )  # fmt: skip


class _Parsed(str):
    """What the recording ``parse`` returns: the text it was given."""


def _record_parse(text, *args, **kwargs):
    return _Parsed(text)


def _record_verify(gold, pred, *args, **kwargs):
    raise _Captured(gold=str(gold), pred=str(pred), match_types=("default",), precision=6,
                    strict=True, allow_set_relation_comp=False, call="parse+verify")  # fmt: skip


def load_rows(tests_dir: Path) -> tuple[list[Row], list[str]]:
    """Every parametrized (gold, pred, expected) row of the suite, with its test's options."""
    package = types.ModuleType("tests")  # the suite imports `tests.test_all`
    package.__path__ = [str(tests_dir)]  # type: ignore[attr-defined]
    sys.modules["tests"] = package
    rows: list[Row] = []
    skipped: list[str] = []
    for path in sorted(tests_dir.glob("test_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        if hasattr(module, "compare_strings"):
            module.compare_strings = _record_compare
        if hasattr(module, "verify"):
            module.verify = _record_verify
        if hasattr(module, "parse"):
            module.parse = _record_parse
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if not name.startswith("test_"):
                continue
            for mark in getattr(fn, "pytestmark", []):
                if mark.name != "parametrize":
                    continue
                names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])  # fmt: skip
                if "gold" not in names or "pred" not in names:
                    continue
                for values in mark.args[1]:
                    where = f"{path.name}::{name}"
                    if len(values) != len(names):  # pytest refuses such a row at collection
                        skipped.append(f"{where}: {len(values)} values for {len(names)} names")
                        continue
                    kwargs = dict(zip(names, values, strict=True))
                    try:
                        fn(**kwargs)
                    except _Captured as captured:
                        options = captured.options
                    else:
                        skipped.append(f"{where}: the test compared nothing")
                        continue
                    expected = kwargs.get("expected", kwargs.get("result"))
                    rows.append(
                        Row(where, options.pop("gold"), options.pop("pred"), int(expected), options)
                    )
    return rows, skipped


def math_verify_verdict(row: Row) -> int:
    """The row graded by math-verify the way its test grades it."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    opts = row.options
    if opts["call"] == "parse+verify":
        return int(verify(parse(row.gold), parse(row.pred)))
    targets = []
    for kind in opts["match_types"]:
        if kind == "latex":
            targets.append(LatexExtractionConfig(boxed_match_priority=0))
        elif kind == "expr":
            targets.append(ExprExtractionConfig())
    ok = verify(
        parse(row.gold, targets),
        parse(row.pred, targets),
        float_rounding=opts["precision"],
        strict=opts["strict"],
        allow_set_relation_comp=opts["allow_set_relation_comp"],
    )
    return int(ok)


def side_shape(text: str) -> str:
    """``boxed``, ``bare`` or ``prose`` (see the module docstring)."""
    if _box_count(text):
        return "boxed"
    s = text.strip()
    spans = list(MATH_SPAN.finditer(s))
    if spans:
        outside = MATH_SPAN.sub(" ", s)
        return "bare" if LIST_JOINERS.match(outside) else "prose"
    if "$" in s:
        return "prose"  # a stray dollar: a currency sign in a sentence
    words = WORD.findall(LATEX_COMMAND.sub(" ", s))
    return "prose" if words else "bare"


def contract(row: Row) -> str | None:
    """Why a row is outside forkgym's contract, or None when it is inside."""
    if not row.options["strict"]:
        return "option strict=False"
    if row.options["allow_set_relation_comp"]:
        return "option allow_set_relation_comp=True"
    shapes = {side_shape(row.gold), side_shape(row.pred)}
    if "prose" in shapes:
        return "prose to search for an answer"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", type=Path, help="math-verify's tests folder (a copy)")
    parser.add_argument("--workers", type=int, default=0, help="forkgym workers (0: in-process)")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--show", action="store_true", help="list every disagreement")
    parser.add_argument(
        "--preset", default=None, help="grade with this extraction preset (e.g. mathverify)"
    )
    args = parser.parse_args()
    if not (args.tests / "test_all.py").is_file():
        parser.error(f"{args.tests} has no test_all.py: pass math-verify's tests folder")

    import logging

    logging.disable(logging.CRITICAL)  # math-verify logs every parse failure
    rows, skipped = load_rows(args.tests)
    from forkgym.verifiers import MathVerifier

    start = time.perf_counter()
    for row in rows:
        row.mv = math_verify_verdict(row)
    verifiers: dict[int, MathVerifier] = {}
    by_precision: dict[int, list[Row]] = {}
    for row in rows:
        by_precision.setdefault(row.options["precision"], []).append(row)
    for precision, group in by_precision.items():
        extraction = {"preset": args.preset} if args.preset else {"extract": ["boxed", WHOLE_TEXT]}
        verifier = verifiers[precision] = MathVerifier(
            timeout=args.timeout, workers=args.workers, float_rounding=precision, cache_size=0,
            **extraction,
        )  # fmt: skip
        with verifier:
            outcomes = verifier.verify_many([(r.gold, r.pred) for r in group])
        for row, outcome in zip(group, outcomes, strict=True):
            row.forkgym = outcome.status.value
    elapsed = time.perf_counter() - start

    mv_passes = sum(r.mv == r.expected for r in rows)
    print(f"math-verify suite: {len(rows)} rows from {args.tests}")
    for note in skipped:
        print(f"  not a row: {note}")
    print(f"installed math-verify reproduces {mv_passes}/{len(rows)} expected verdicts")
    reasons = Counter(contract(r) for r in rows)
    for reason, n in sorted(reasons.items(), key=lambda kv: (kv[0] is not None, str(kv[0]))):
        print(f"  {'inside the contract' if reason is None else 'outside: ' + reason}: {n}")

    def line(label: str, group: list[Row], corrected: bool = False) -> None:
        if not group:
            return
        wrong = [r for r in group if (r.forkgym == "correct") != bool(r.right if corrected else r.expected)]  # fmt: skip
        false_pos = sum(r.forkgym == "correct" for r in wrong)
        statuses = Counter(r.forkgym for r in wrong)
        detail = ", ".join(f"{k} x{n}" for k, n in sorted(statuses.items())) or "-"
        agree = 1 - len(wrong) / len(group)
        print(f"{label:44} {len(group):>5} {agree:>9.1%} {false_pos:>6}   {detail}")

    inside = [r for r in rows if contract(r) is None]
    print()
    print(f"{'rows (forkgym vs the expected verdict)':44} {'rows':>5} {'agreement':>9} {'false+':>6}   disagreeing forkgym statuses")  # fmt: skip
    line("all rows", rows)
    line("inside the contract", inside)
    line("  of those, at most one box on each side", [r for r in inside if r.boxes <= 1])
    line("  of those, several boxes on a side", [r for r in inside if r.boxes > 1])
    line("outside the contract", [r for r in rows if contract(r) is not None])
    found = {(r.source, r.gold, r.pred) for r in rows} & set(WRONG_LABELS)
    print(f"with the suite's wrong labels corrected ({len(found)} of {len(WRONG_LABELS)} named rows found):")  # fmt: skip
    line("all rows", rows, corrected=True)
    line("inside the contract", inside, corrected=True)
    print(f"graded in {elapsed:.1f} s (math-verify and forkgym, workers={args.workers})")

    if args.show:
        print("\ndisagreements (expected vs forkgym):")
        for r in rows:
            if (r.forkgym == "correct") != bool(r.expected):
                where = contract(r) or "inside"
                print(f"- [{where}] {r.source} expected={r.expected} forkgym={r.forkgym}")
                if r.right != r.expected:
                    print(f"    the label is wrong: {WRONG_LABELS[r.source, r.gold, r.pred]}")
                print(f"    gold: {r.gold[:160]!r}")
                print(f"    pred: {r.pred[:160]!r}")
    false_positives = [r for r in inside if r.forkgym == "correct" and not r.expected]
    return 1 if false_positives else 0


if __name__ == "__main__":
    sys.exit(main())
