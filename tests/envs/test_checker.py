"""check_llm_env must fail on the classic mistakes, with a message naming the check."""

import pytest

from forkgym.envs import LLMEnvCheckError, check_llm_env

PREFIX = "tests.envs.broken_envs:forkgymtest"


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("GlobalRandom", "gymnasium check_env"),  # unseeded global random: caught in-process
        ("SetOrder", "cross-process determinism"),  # set order follows PYTHONHASHSEED
        ("HashSeeded", "cross-process determinism"),
        ("Forgetful", "fork equivalence"),
    ],
)
def test_broken_envs_are_caught(name, check):
    with pytest.raises(LLMEnvCheckError, match=check):
        check_llm_env(f"{PREFIX}/{name}-v0", cross_process_seeds=8, seeds=2)
