"""A training run holds its evaluation out by content: every prompt it trains on is on the
train side of the env's partition, every task it evaluates on the eval side."""

from __future__ import annotations

import gymnasium as gym
import pytest

import forkgym.envs  # noqa: F401
from forkgym.agents.generation.episode_log import read_episodes
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.trainer import Trainer
from forkgym.envs.base import content_split
from tests.agents.run.test_trainer import config


def side_of(env, task_id: str) -> str:
    return content_split(env.content_key(env.task_from_id(task_id)), env.eval_fraction)


def test_training_prompts_and_evaluated_tasks_are_on_their_sides(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir, "split", steps=2, log_episodes=True, eval_every=0)
    with Trainer(cfg) as trainer:
        trainer.run()
        generation = trainer.generation
        eval_env = generation.make_eval_env().unwrapped
        evaluated = []
        for seed in range(40):
            eval_env.reset(seed=seed)
            evaluated.append(eval_env.task.task_id)
    probe = gym.make(cfg.env, **cfg.env_kwargs).unwrapped
    trained = {e["task_id"] for e in read_episodes(tmp_path / "split")}
    assert trained and {side_of(probe, t) for t in trained} == {"train"}
    assert {side_of(probe, t) for t in evaluated} == {"eval"}


def test_the_partition_can_be_switched_off_and_is_not_set_twice(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir, "all", held_out=False)
    assert Trainer(cfg).generation.make_eval_env().unwrapped.task_split is None
    split = Trainer(config(tmp_path, tiny_model_dir, "on")).generation
    assert (split.make_env().unwrapped.task_split, split.make_eval_env().unwrapped.task_split) == (
        "train",
        "eval",
    )
    with pytest.raises(ConfigError, match="sets task_split, which held_out=true sets itself"):
        TrainConfig(env_kwargs={"task_split": "train"})
