"""Reward shaping: DAPO's overlong punishment and KL in the reward, reachable from the config."""

import pytest
import torch

from forkgym.agents.advantages.shaping import RewardShaping
from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from forkgym.verifiers import Outcome


def grid_batch(lengths, statuses, greedy_length=None):
    groups = []
    for g, (row, srow) in enumerate(zip(lengths, statuses, strict=True)):
        eps = [
            Episode(g, b, "sampled", "t", [1] + [2] * n, [0] + [1] * n, [0.0] * (n + 1), 1,
                    outcome=Outcome.from_status(s))
            for b, (n, s) in enumerate(zip(row, srow, strict=True))
        ]  # fmt: skip
        greedy = None
        if greedy_length is not None:
            n = greedy_length
            greedy = Episode(g, 9, "greedy", "t", [1] + [2] * n, [0] + [1] * n, [0.0] * (n + 1), 1, outcome=Outcome.from_status("correct"))  # fmt: skip
        groups.append(Group("t", g, eps, greedy))
    return RolloutBatch.from_groups(groups, len(lengths[0]))


def test_off_by_default_it_hands_back_the_same_batch():
    cfg = TrainConfig(max_new_tokens=10)
    batch = grid_batch([[3, 9]], [["correct", "incorrect"]])
    shaped, metrics = RewardShaping(cfg, None, max_episode_tokens=10)(
        batch, TokenBatch.from_rollouts(batch, 0)
    )
    assert shaped is batch and metrics == {}


def test_overlong_punishment_on_valid_responses_and_the_greedy_branch():
    cfg = TrainConfig(max_new_tokens=10, overlong_buffer=4)  # 0 up to 6 tokens, -1 at 10
    batch = grid_batch([[3, 8, 10, 10]], [["correct", "correct", "incorrect", "error"]], greedy_length=8)  # fmt: skip
    shaping = RewardShaping(cfg, None, max_episode_tokens=10)
    shaped, metrics = shaping(batch, TokenBatch.from_rollouts(batch, 0))
    assert shaped.rewards[0, :3].tolist() == [1.0, 0.5, -1.0]
    assert torch.isnan(shaped.rewards[0, 3])  # no reward to shape: it stays out
    assert shaped.greedy_rewards.tolist() == [0.5]
    assert batch.rewards[0, 1] == 1.0  # the env's rewards are not changed
    assert metrics["shaping/overlong_penalized_of_responses"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="exceeds"):  # longer than a 1-turn env's budget
        RewardShaping(
            TrainConfig(max_new_tokens=10, overlong_buffer=12), None, max_episode_tokens=10
        )


def test_kl_in_the_reward_replaces_kl_in_the_loss(tmp_path, tiny_model_dir):
    cfg = TrainConfig(
        model=str(tiny_model_dir), env_kwargs={"system_prompt": None, "operations": "+"},
        steps=1, prompts_per_step=2, k=2, max_new_tokens=6, eval_every=0,
        kl_coef=0.1, kl_in_reward=True, out=str(tmp_path / "r"), progress=False,
    )  # fmt: skip
    trainer = Trainer(cfg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move the policy away from the reference, as training would
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    trainer.run()
    last = read_metrics(tmp_path / "r")[-1]
    assert last["shaping/kl_penalty_mean"] > 0 and "loss/kl" not in last
    # the estimator saw rewards the penalty made unequal, the env's rewards are all 0
    assert last["reward_mean"] == 0.0 and last["est/adv_nonzero"] > 0


def test_shaping_options_are_validated():
    from forkgym.agents.run.config import ConfigError

    with pytest.raises(ConfigError, match="kl_in_reward=True needs kl_coef > 0"):
        TrainConfig(kl_in_reward=True)
    with pytest.raises(ConfigError, match="overlong_buffer=-1"):
        TrainConfig(overlong_buffer=-1)
    with pytest.raises(ConfigError, match="overlong_max_tokens=4 needs overlong_buffer > 0 and must be >= overlong_buffer"):  # fmt: skip
        TrainConfig(overlong_buffer=5, overlong_max_tokens=4)
    with pytest.raises(ConfigError, match="overlong_max_tokens=4 needs overlong_buffer > 0"):
        TrainConfig(overlong_max_tokens=4)
