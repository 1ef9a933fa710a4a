"""forkgym against math-verify as the oracle, on generated pairs (see ``mathverify_pairs``).

Every pair is graded by forkgym (with the documented whole-text fallback for bare answers)
and by the installed math-verify, called as its own tests call it. Two promises are checked:

1. forkgym never says ``correct`` where math-verify says incorrect;
2. on the pairs inside forkgym's contract (every generated pair: references are plain-text
   numbers, math spans or boxed text; responses state their answer in boxes, math spans or as
   a plain number, with well-formed delimiters) the verdicts agree, except for the deliberate
   differences listed in :data:`DELIBERATE`, each with its reason.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.boxes import has_unclosed_box

from .mathverify_pairs import FAMILIES, WHOLE_TEXT, Pair, generate, math_verify_says

# Where forkgym deliberately differs from math-verify: name -> (reason, does this pair show it)
DELIBERATE = {
    "cut_off_box": (
        "A response whose last box is cut off (it ran out of tokens inside its answer) has no "
        "answer, whatever came before: forkgym says invalid. math-verify reads the rest of the "
        "text as that box's content, or an earlier box, and may pay it.",
        lambda pair, fk, mv: has_unclosed_box(pair.response) and fk == "invalid",
    ),
}


def grade_both(pairs: list[Pair]) -> list[tuple[Pair, str, bool]]:
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    with MathVerifier(workers=0, cache_size=0, extract=["boxed", WHOLE_TEXT]) as verifier:
        outcomes = verifier.verify_many([(p.reference, p.response) for p in pairs])
    return [
        (pair, outcome.status.value, math_verify_says(pair.reference, pair.response))
        for pair, outcome in zip(pairs, outcomes, strict=True)
    ]


def check(graded: list[tuple[Pair, str, bool]]) -> Counter[str]:
    false_positives = [(p, fk) for p, fk, mv in graded if fk == "correct" and not mv]
    assert not false_positives, "forkgym pays what math-verify does not:\n" + "\n".join(
        f"  {p.kind}: {p.reference!r} vs {p.response!r}" for p, _ in false_positives[:10]
    )
    tally: Counter[str] = Counter()
    unexplained = []
    for pair, fk, mv in graded:
        if (fk == "correct") == mv:
            tally["agree"] += 1
            continue
        reasons = [name for name, (_, shows) in DELIBERATE.items() if shows(pair, fk, mv)]
        if not reasons:
            unexplained.append(f"  {pair.kind}: forkgym {fk}, math-verify {mv}: {pair.reference!r} vs {pair.response!r}")  # fmt: skip
        tally[reasons[0] if reasons else "unexplained"] += 1
    assert not unexplained, "disagreements no deliberate difference explains:\n" + "\n".join(unexplained[:10])  # fmt: skip
    return tally


def test_the_generator_covers_every_family_with_both_verdicts():
    """A differential test is only as good as its pairs: each family must produce pairs that
    math-verify pays and pairs it does not (else agreement would be vacuous)."""
    graded = grade_both(generate(400, seed=11))
    verdicts = Counter((p.kind, mv) for p, _, mv in graded)
    for family in FAMILIES:
        if family == "truncated":
            continue
        assert verdicts[family, True] >= 3 and verdicts[family, False] >= 3, (family, verdicts)
    check(graded)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [20261204, 7])
def test_forkgym_agrees_with_math_verify_on_generated_pairs(seed):
    graded = grade_both(generate(1500, seed=seed))
    tally = check(graded)
    agree = tally["agree"] / len(graded)
    print(f"seed {seed}: {len(graded)} pairs, agreement {agree:.1%}, {dict(tally)}")
    assert tally["agree"] + tally["cut_off_box"] == len(graded)


def test_the_deliberate_difference_is_real():
    """The listed difference shows up where it should (the family that makes it)."""
    graded = grade_both([p for p in generate(300, seed=3) if p.kind == "truncated"])
    assert graded and all(fk == Status.INVALID.value for _, fk, _ in graded)
    assert check(graded)["cut_off_box"] > 0
