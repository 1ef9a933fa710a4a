"""Held out by content: the train and eval sides of an env never share a problem."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import forkgym.envs  # noqa: F401
from forkgym.envs.base import content_split, derived_pcg64_state


def keys(env_id: str, side: str | None, seeds: int, **kwargs) -> list[str]:
    env = gym.make(env_id, task_split=side, **kwargs).unwrapped
    out = []
    for seed in range(seeds):
        env.reset(seed=seed)
        out.append(env.content_key(env.task))
    return out


def test_the_sides_are_disjoint_and_cover_the_problems():
    train, held = set(keys("forkgym/Arithmetic-v0", "train", 400)), set(keys("forkgym/Arithmetic-v0", "eval", 400))  # fmt: skip
    assert not train & held
    everything = keys("forkgym/Arithmetic-v0", None, 4000)
    eval_share = sum(content_split(k, 0.2) == "eval" for k in everything) / len(everything)
    assert 0.17 < eval_share < 0.23  # the hash splits about eval_fraction of the problems


def test_the_side_depends_on_the_problem_not_its_presentation():
    """With or without the answer-format sentence, a problem is on the same side, so a warm
    start on one presentation and RL on another cannot share held-out problems."""
    plain = keys("forkgym/Arithmetic-v0", "eval", 200, instruction=False)
    worded = keys("forkgym/Arithmetic-v0", "eval", 200)
    assert plain == worded  # the same draws, the same problems


def test_a_split_env_is_reproducible_and_forks_on_its_side():
    env = gym.make("forkgym/Calculator-v0", task_split="eval").unwrapped
    first = [env.reset(seed=s)[0]["prompt"] for s in range(20)]
    assert first == [env.reset(seed=s)[0]["prompt"] for s in range(20)]
    env.reset(seed=3)
    twin = env.fork()
    assert twin.task_split == "eval" and twin.task.task_id == env.task.task_id
    assert twin.fingerprint == env.fingerprint != gym.make("forkgym/Calculator-v0").unwrapped.fingerprint  # fmt: skip


def test_an_unsplit_env_draws_as_before_and_a_split_one_its_first_on_side_draw():
    """``task_split=None`` (the default) takes the first task id ``np_random`` draws, as before
    splits existed (recorded runs and tokenizers do not move); a split env the first whose
    problem is on its side."""
    plain = gym.make("forkgym/Arithmetic-v0").unwrapped
    held = gym.make("forkgym/Arithmetic-v0", task_split="eval").unwrapped
    for seed in range(30):
        rng = np.random.Generator(np.random.PCG64(0))
        rng.bit_generator.state = derived_pcg64_state("reset", seed)
        draws = [plain.sample_task_id(rng) for _ in range(60)]
        plain.reset(seed=seed)
        assert plain.task.task_id == draws[0]
        held.reset(seed=seed)
        first = next(t for t in draws if content_split(plain.content_key(plain.task_from_id(t)), 0.2) == "eval")  # fmt: skip
        assert held.task.task_id == first


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"task_split": "test"}, "task_split must be one of"),
    ({"task_split": "eval", "eval_fraction": 1.0}, "eval_fraction must be in"),
])  # fmt: skip
def test_bad_split_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("forkgym/Arithmetic-v0", **kwargs)
