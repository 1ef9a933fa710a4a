"""Shared fixtures. Worker pools are expensive to start, so tests share them per session."""

from __future__ import annotations

import pytest

from forkgym.verifiers import MathVerifier


@pytest.fixture(scope="session")
def pool_verifier() -> MathVerifier:
    """A real 2-worker verifier (fork server, hard limits), the default production shape."""
    with MathVerifier(timeout=5.0, workers=2, cache_size=0) as verifier:
        yield verifier


@pytest.fixture(scope="session")
def inline_verifier() -> MathVerifier:
    """Grades in the test process: for cases known to be benign."""
    verifier = MathVerifier(workers=0, cache_size=0)
    yield verifier
    verifier.close()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The default tiny model, built once per session (offline, a few seconds)."""
    from forkgym.agents.models import init_model

    return init_model(tmp_path_factory.mktemp("tiny-model") / "model", corpus_seeds=8)
