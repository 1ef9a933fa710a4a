"""Dynamic sampling: kept groups carry a signal, and every round's tokens are accounted for."""

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.collect import Collector, rollout_metrics
from forkgym.agents.generation.dapo import groups_with_signal
from forkgym.agents.generation.rollout import Rollouts
from forkgym.agents.models import load_policy_model
from tests.conftest import WARM_ENV_KWARGS


def collector(model_dir, **kwargs):
    model, tokenizer = load_policy_model(model_dir)
    rollouts = Rollouts(
        lambda: gym.make("forkgym/Arithmetic-v0", **WARM_ENV_KWARGS),
        HFPolicy(model, tokenizer),
        tokenizer,
        k=4,
        greedy=kwargs.pop("greedy", False),
        max_new_tokens=12,
        seed=5,
    )
    return Collector(rollouts, seed=5, prompts_per_step=6, **kwargs)


def test_dynamic_sampling_keeps_groups_with_signal_and_counts_every_round(warm_model_dir):
    c = collector(warm_model_dir, dynamic_sampling=True, max_resample_rounds=3, greedy=True)
    batch, ledger = c.collect(step=0)
    assert 0 < batch.prompts <= 6
    assert groups_with_signal(batch.rewards, batch.valid).all()
    assert ledger.rounds >= 2  # a warm model at ~20% leaves some groups all wrong
    assert ledger.prompts_sampled == 6 * ledger.rounds
    assert ledger.tokens_sampled + ledger.greedy_tokens == batch.cost.tokens_generated
    assert ledger.greedy_responses == ledger.prompts_sampled  # greedy branches of every round
    # accepted means trained on: groups with signal beyond the step's prompts are discarded
    assert ledger.prompts_accepted == batch.prompts
    assert ledger.tokens_accepted == int(batch.lengths.sum())
    metrics = rollout_metrics(batch, ledger)
    assert metrics["episodes"] == batch.prompts * 4
    assert metrics["gen/tokens_generated"] == metrics["tokens_generated"]
    assert sum(metrics[f"status/{s}"] for s in ("correct", "incorrect", "invalid", "truncated")) == metrics["episodes"]  # fmt: skip
    again, _ = collector(warm_model_dir, dynamic_sampling=True, greedy=True).collect(step=0)
    assert [g.task_seed for g in again.groups] == [g.task_seed for g in batch.groups]
    assert torch.equal(again.lengths, batch.lengths)  # the same step draws the same everything


def test_without_dynamic_sampling_every_group_is_kept(warm_model_dir):
    batch, ledger = collector(warm_model_dir).collect(step=3)
    assert batch.prompts == 6 and ledger.rounds == 1 and ledger.prompts_accepted == 6
    assert ledger.tokens_accepted == ledger.tokens_sampled == int(batch.lengths.sum())
