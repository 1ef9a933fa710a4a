"""Environments pickle at any point of an episode (vector envs and forks need it)."""

import pickle

import gymnasium as gym
import pytest
from gymnasium.envs.registration import registry

import forkgym.envs  # noqa: F401
from forkgym.verifiers import MathVerifier, Status
from tests.system import env_params

ENV_IDS = env_params(sorted(k for k in registry if k.startswith("forkgym/")))


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


@pytest.mark.parametrize("shared_memory", [True, False])
def test_an_async_vector_env_hands_back_forks(shared_memory):
    envs = gym.make_vec(
        "forkgym/Arithmetic-v0", num_envs=2, vectorization_mode="async",
        vector_kwargs={"shared_memory": shared_memory},
    )  # fmt: skip
    try:
        envs.reset(seed=0)
        forks = envs.call("fork")
    finally:
        envs.close()
    assert [f.step(f.gold_action())[1] for f in forks] == [1.0, 1.0]


def test_async_vector_envs_work_by_default_and_match_sync():
    """Shared memory is Gymnasium's default: chat observations go through it (one byte slot
    per env) and come out equal to the synchronous vector env's, tool calls and all."""
    calls = [
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>',
        "$\\boxed{1}$",
        "<tool_call>\n{broken\n</tool_call>",
    ]
    results = {}
    for mode in ("async", "sync"):
        envs = gym.make_vec("forkgym/Calculator-v0", num_envs=3, vectorization_mode=mode)
        try:
            first, _ = envs.reset(seed=[4, 4, 9])
            second = envs.step(calls)
            third = envs.step(calls)  # env 1 ended: Gymnasium's next-step autoreset
            results[mode] = (first, second[0], second[1].tolist(), third[0])
        finally:
            envs.close()
    assert results["async"] == results["sync"]
    first, second, rewards, _ = results["async"]
    assert rewards == [0.0, 0.0, 0.0]  # two tool calls and a wrong answer
    assert first["messages"][0] == first["messages"][1] != first["messages"][2]
    assert second["messages"][0][-1]["content"] == "42"
    assert second["messages"][0][-2]["tool_calls"][0]["id"] == "call_1_0"


def test_an_observation_too_large_for_its_slot_is_a_clear_error():
    """An env's observation bound (max_chars) sizes its slot; a conversation past it (the env
    does not cut actions to max_chars) fails loudly, naming the way out."""
    envs = gym.make_vec(
        "forkgym/Calculator-v0", num_envs=1, vectorization_mode="async", max_chars=64
    )
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"shared-memory slot.*shared_memory"):
            envs.step(["x" * 100_000])
    finally:
        envs.close(terminate=True)
