"""Symbolic grading holds under each ANTLR runtime forkgym allows (issue 26: verl's hydra-core
pins antlr4-python3-runtime 4.9.*, forkgym had pinned 4.13, and with both installed omegaconf
failed to import). The main environment resolves the newest, 4.13.2; the integrations
environment installs hydra-core beside forkgym and so runs the 4.9.3 case."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from forkgym.verifiers import MathVerifier, reference_answer
from forkgym.verifiers.extract import AnswerExtractor
from forkgym.verifiers.fastpath import fast_compare

from .equivalence_cases import CASES

# latex2sympy2_extended ships a parser for these runtimes only (and picks it by version)
GRAMMARS = {"4.9.3": "antlr4_9_3", "4.11": "antlr4_11_0", "4.13.2": "antlr4_13_2"}


def runtime() -> str:
    return importlib.metadata.version("antlr4-python3-runtime")


def grammar_for(version: str) -> str:
    return next(name for prefix, name in GRAMMARS.items() if version.startswith(prefix))


def symbolic_cases() -> list[tuple[str, str, str]]:
    """The table's cases that the exact fast path leaves to math-verify's LaTeX parser."""
    extract = AnswerExtractor()
    out = []
    for _, reference, response, expected in CASES:
        answer = extract(response).answer
        if answer is not None and fast_compare(reference_answer(reference), answer) is None:
            out.append((reference, response, expected))
    return out


def check_grading() -> None:
    from latex2sympy2_extended import antlr_parser
    from math_verify import parse

    assert grammar_for(runtime()) in antlr_parser.PSParser.__module__
    assert parse(r"$\frac{\sqrt{2}}{2}$")  # a LaTeX parse: the grammar loads and runs
    cases = symbolic_cases()
    assert len(cases) >= 15  # a real share of the table reaches the parser
    with MathVerifier(workers=1, timeout=10.0, cache_size=0) as verifier:
        got = [o.status.value for o in verifier.verify_many([(r, a) for r, a, _ in cases])]
    assert got == [expected for *_, expected in cases]


def test_the_installed_runtime_is_one_math_verify_has_a_grammar_for():
    version = runtime()
    assert any(version.startswith(prefix) for prefix in GRAMMARS), version


def test_symbolic_grading_under_the_installed_runtime():
    check_grading()


@pytest.mark.integrations
def test_beside_hydra_core_the_runtime_is_4_9_3_and_grading_holds():
    if importlib.util.find_spec("hydra") is None:
        pytest.skip("needs hydra-core (forkgym[verl]): python3 dev.py test-integrations")
    from omegaconf import OmegaConf

    assert runtime().startswith("4.9.3")
    # omegaconf's interpolation grammar is ANTLR's too: it imports and resolves
    assert OmegaConf.create({"a": "${b}", "b": 3}).a == 3
    check_grading()
