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


# 1-digit sums, short prompts, compact answers: what the warm model below was trained on.
WARM_ENV_KWARGS = {
    "system_prompt": None,
    "operations": "+",
    "digits": 1,
    "solution_style": "compact",
    "instruction": False,
}


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model after 16k tokens of SFT on 1-digit sums (~20% greedy accuracy, a few
    seconds): rollouts of it mix right and wrong answers, so advantages and updates are not
    all zero, which an untrained model's are."""
    from forkgym.agents.sft import sft

    out = tmp_path_factory.mktemp("warm-model") / "model"
    sft(
        str(tiny_model_dir),
        "forkgym/Arithmetic-v0",
        tokens=16_000,
        out=out,
        batch_size=16,
        env_kwargs=WARM_ENV_KWARGS,
    )
    return out
