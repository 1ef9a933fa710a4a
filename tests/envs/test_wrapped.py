"""Forks through wrappers, outcomes for TimeLimit cuts, and a quiet checker."""

import gymnasium as gym
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics

import forkgym.envs
from forkgym.envs import episode_outcome, fork
from forkgym.verifiers import Status

WRONG = "$\\boxed{-1}$"


def test_fork_keeps_the_wrappers_and_their_state():
    env = RecordEpisodeStatistics(
        gym.make("forkgym/Arithmetic-v0", max_episode_steps=3, max_attempts=5)
    )
    env.reset(seed=1)
    env.step(WRONG)
    twin = fork(env)
    assert [type(w).__name__ for w in (twin, twin.env)] == ["RecordEpisodeStatistics", "TimeLimit"]
    assert twin.unwrapped is not env.unwrapped
    assert twin.unwrapped.verifier is env.unwrapped.verifier  # shared, not rebuilt
    assert twin.env._elapsed_steps == env.env._elapsed_steps == 1
    # the two go on identically, and the copied TimeLimit still cuts at step 3
    for _ in range(2):
        a, b = env.step(WRONG), twin.step(WRONG)
        assert a[0] == b[0] and a[1:4] == b[1:4]
    assert a[3] is True and b[3] is True
    # the original is untouched by the fork's steps
    bare = forkgym.envs.fork(gym.make("forkgym/Arithmetic-v0"))
    assert type(bare).__name__ == "ArithmeticEnv"
    with pytest.raises(TypeError, match="not a forkgym environment"):
        fork(gym.make("CartPole-v1"))


def test_a_timelimit_cut_gets_a_truncated_outcome():
    env = gym.make("forkgym/Arithmetic-v0", max_episode_steps=2, max_attempts=5)
    env.reset(seed=3)
    _, _, _, truncated, info = env.step(WRONG)
    assert episode_outcome(env, info, truncated) is None  # mid-episode
    _, _, terminated, truncated, info = env.step(WRONG)
    assert truncated and not terminated and "outcome" not in info  # TimeLimit's cut
    outcome = episode_outcome(env, info, truncated)
    assert outcome.status is Status.TRUNCATED and outcome.details["reason"] == "time_limit"
    assert info["outcome"] is outcome and info["status"] == "truncated"
    assert outcome.reward == env.unwrapped.rewards.reward(Status.TRUNCATED)
    # an outcome the env gave is returned as is
    env.reset(seed=3)
    _, _, terminated, truncated, info = env.step(env.unwrapped.gold_action())
    assert episode_outcome(env, info, truncated).status is Status.CORRECT


def test_check_llm_env_is_quiet_unless_asked(capsys):
    kwargs = {"seeds": 1, "cross_process_seeds": 2, "vector_envs": 2}
    forkgym.envs.check_llm_env("forkgym/Arithmetic-v0", **kwargs)
    assert capsys.readouterr().out == ""
    forkgym.envs.check_llm_env("forkgym/Arithmetic-v0", verbose=True, **kwargs)
    assert "Put your final answer" in capsys.readouterr().out
