"""Table-driven grading: every case through the real pool, and fast path vs math-verify."""

from collections import Counter

import pytest

from forkgym.verifiers import reference_answer
from forkgym.verifiers.fastpath import fast_compare
from forkgym.verifiers.math_verifier import parser_input

from .equivalence_cases import CASES

CATEGORIES = {
    "fraction", "decimal", "integer", "thousands", "set", "interval", "tuple", "matrix",
    "symbolic", "equation", "percent", "units", "extraction", "invalid",
}  # fmt: skip


def test_table_covers_every_category():
    assert len(CASES) >= 60
    counts = Counter(category for category, *_ in CASES)
    assert set(counts) == CATEGORIES
    assert all(n >= 3 for n in counts.values()), counts


@pytest.mark.parametrize(("category", "reference", "response", "expected"), CASES)
def test_case_grades_as_expected(pool_verifier, category, reference, response, expected):
    outcome = pool_verifier.verify(reference, response)
    assert outcome.status.value == expected, (outcome.extracted, outcome.details)
    assert outcome.reward == (1.0 if expected == "correct" else 0.0)


def test_verify_many_matches_verify_in_order(pool_verifier):
    pairs = [(ref, resp) for _, ref, resp, _ in CASES]
    outcomes = pool_verifier.verify_many(pairs)
    assert [o.status.value for o in outcomes] == [expected for *_, expected in CASES]


def test_fast_path_and_math_verify_agree_on_the_table():
    """Wherever the fast path decides, math-verify (run directly) reaches the same verdict."""
    from forkgym.verifiers.extract import AnswerExtractor
    from forkgym.verifiers.math_worker import grade

    extract = AnswerExtractor()
    decided = 0
    for _, reference, response, _ in CASES:
        answer = extract(response).answer
        if answer is None:
            continue
        verdict = fast_compare(reference_answer(reference), answer)
        if verdict is None:
            continue
        decided += 1
        status, _ = grade(parser_input(reference_answer(reference)), parser_input(answer))
        assert verdict == (status == "correct"), (reference, answer, status)
    assert decided >= 30  # the agreement must be checked on a real share of the table


def test_inline_and_pool_agree(pool_verifier, inline_verifier):
    pairs = [(ref, resp) for _, ref, resp, _ in CASES]
    pooled = [o.status for o in pool_verifier.verify_many(pairs)]
    inline = [o.status for o in inline_verifier.verify_many(pairs)]
    assert pooled == inline
