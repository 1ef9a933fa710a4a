"""Environments pickle at any point of an episode (vector envs and forks need it)."""

import pickle

import gymnasium as gym
import pytest
from gymnasium.envs.registration import registry

import forkgym.envs  # noqa: F401
from forkgym.verifiers import MathVerifier, Status

ENV_IDS = sorted(k for k in registry if k.startswith("forkgym/"))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_an_env_pickles_after_a_step_and_the_copy_goes_on_identically(env_id):
    env = gym.make(env_id)
    env.reset(seed=5)
    first = env.unwrapped.gold_action()
    _, _, terminated, truncated, _ = env.step(first)  # the step that once broke pickling
    if terminated or truncated:
        env.reset(seed=6)
    copy = pickle.loads(pickle.dumps(env))
    action = env.unwrapped.gold_action()
    a, b = env.step(action), copy.step(action)
    assert a[0] == b[0] and a[1:4] == b[1:4]


def test_a_pickled_verifier_is_a_fresh_one_with_the_same_settings():
    with MathVerifier(timeout=2.0, workers=1, extract=["answer_is", "boxed"]) as verifier:
        assert verifier.verify("1/2", r"\boxed{\frac{2}{4}}").status is Status.CORRECT
        copy = pickle.loads(pickle.dumps(verifier))
        try:
            assert copy.timeout == 2.0 and copy.extractor.names == ["answer_is", "boxed"]
            assert copy.verify("42", "The answer is 42.").status is Status.CORRECT
            assert copy.verify("1/2", r"\boxed{\sin(x)^2 + \cos(x)^2 - 1/2}").status is Status.CORRECT  # fmt: skip
        finally:
            copy.close()


def test_an_async_vector_env_hands_back_forks():
    envs = gym.make_vec(
        "forkgym/Arithmetic-v0", num_envs=2, vectorization_mode="async",
        vector_kwargs={"shared_memory": False},
    )  # fmt: skip
    try:
        envs.reset(seed=0)
        forks = envs.call("fork")
    finally:
        envs.close()
    assert [f.step(f.gold_action())[1] for f in forks] == [1.0, 1.0]
