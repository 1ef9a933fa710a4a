"""TextEnv.state_key: an exact digest of the world state, for every registered env."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest

from forkgym.envs import ENVIRONMENTS
from forkgym.envs.base import observation_key
from forkgym.envs.checked_steps import CheckedStepsEnv
from tests.system import env_params

ENV_IDS = env_params(list(ENVIRONMENTS))


def gold_keys(env_id: str, seed: int) -> list[str]:
    """The state key at the reset and after each gold action to the end of the episode."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=seed)
    keys = [env.state_key()]
    done = False
    while not done:
        *_, terminated, truncated, _ = env.step(env.gold_action())
        keys.append(env.state_key())
        done = terminated or truncated
    return keys


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_forks_at_one_state_share_a_key_and_progress_or_rng_changes_it(env_id):
    env = gym.make(env_id).unwrapped
    env.reset(seed=11)
    first, second = env.fork(), env.fork()
    assert first.state_key() == second.state_key() == env.state_key()
    before = env.state_key()
    first.step(env.gold_action())  # progress (and, for a tool call, the tool's state)
    assert first.state_key() != before
    second.np_random.random()  # the same episode with its RNG moved on
    assert second.state_key() != before
    # the same actions from the same state: the same keys, step after step
    keys = gold_keys(env_id, 11)
    assert keys == gold_keys(env_id, 11) and len(set(keys)) == len(keys)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_key_is_the_same_in_another_process(env_id):
    code = (
        "import json, sys\nimport forkgym.envs\nfrom tests.envs.test_state_key import gold_keys\n"
        "print(json.dumps(gold_keys(sys.argv[1], 5)))"
    )
    environ = {**os.environ, "PYTHONHASHSEED": "977"}
    done = subprocess.run([sys.executable, "-c", code, env_id], capture_output=True, text=True, env=environ, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == gold_keys(env_id, 5)


def steps_env(**kwargs) -> CheckedStepsEnv:
    env = gym.make("forkgym/CheckedSteps-v0", steps=2, digits=1, **kwargs).unwrapped
    env.reset(seed=3)
    return env


def report(env: CheckedStepsEnv, value: int, worked: bool = False) -> str:
    call = env.format_call("submit", value=value)
    return f"I work it out first.\n{call}" if worked else call


def test_the_wording_of_a_report_is_not_part_of_the_state():
    env = steps_env()
    right = env.task.data["values"][0]
    terse, wordy = env.fork(), env.fork()
    terse.step(report(env, right))
    wordy.step(report(env, right, worked=True))
    assert terse.get_state()["messages"] != wordy.get_state()["messages"]
    assert terse.state_key() == wordy.state_key()


@pytest.mark.parametrize("feedback", [True, False])
def test_a_right_and_a_wrong_report_are_two_states_whatever_the_env_says(feedback):
    env = steps_env(feedback=feedback)
    right = env.task.data["values"][0]
    good, bad = env.fork(), env.fork()
    good_obs, *_ = good.step(report(env, right))
    bad_obs, *_ = bad.step(report(env, right + 1))
    assert good.state_key() != bad.state_key()  # the tool result decides the outcome
    same_text = observation_key(good_obs["messages"]) == observation_key(bad_obs["messages"])
    assert same_text is not feedback  # without feedback both read "Recorded. Next: ..."


def test_inventory_keys_what_was_fetched_not_the_order_it_was_fetched_in():
    env = gym.make("forkgym/Inventory-v0").unwrapped
    env.reset(seed=2)
    records = env.task.data["records"]
    first, second = records[0]["sku"], records[1]["sku"]
    one, two = env.fork(), env.fork()
    one.step(env.format_call("get_item", sku=first) + "\n" + env.format_call("get_item", sku=second))  # fmt: skip
    two.step(env.format_call("get_item", sku=second) + "\n" + env.format_call("get_item", sku=first))  # fmt: skip
    assert one.episode["known"] != two.episode["known"]
    assert one.state_key() == two.state_key()


def test_an_env_that_keeps_state_elsewhere_has_no_key():
    class Elsewhere(CheckedStepsEnv):
        exact_state = False

    env = Elsewhere(steps=2, digits=1)
    env.reset(seed=0)
    with pytest.raises(NotImplementedError, match="no exact state key"):
        env.state_key()


def test_observation_key_reads_what_the_env_said_since_the_last_assistant_message():
    prompt = [{"role": "user", "content": "Start with 5"}]
    said = [*prompt, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "ok"}]
    other = [*prompt, {"role": "assistant", "content": "b"}, {"role": "tool", "content": "ok"}]
    assert observation_key(said) == observation_key(other) != observation_key(prompt)
