"""Per-batch diagnostics (S8, S20): fractions that partition, strata that add up."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.advantages.estimators import get_estimator
from forkgym.agents.generation.dapo import filter_groups
from forkgym.agents.generation.ledger import GenerationLedger
from forkgym.agents.learner.diagnostics import (
    batch_diagnostics,
    group_outcome_fractions,
    reward_std_distribution,
    sequence_losses,
    stratify,
)
from forkgym.agents.learner.losses import get_loss
from tests.agents.strategies import grids


def test_group_fractions_on_a_hand_made_batch():
    rewards = torch.tensor(
        [
            [1.0, 1.0, 1.0],  # all correct
            [0.0, 0.0, 0.0],  # all wrong
            [1.0, 0.0, 1.0],  # mixed
            [1.0, math.nan, math.nan],  # under-filled by infrastructure failures
            [0.0, 1.0, math.nan],  # mixed, with one failure
        ]
    )
    valid = ~torch.isnan(rewards)
    f = group_outcome_fractions(rewards, valid)
    assert f["groups"] == 5
    assert f["all_correct_of_groups"] == 0.2 and f["all_wrong_of_groups"] == 0.2
    assert f["mixed_of_groups"] == 0.4 and f["under_filled_of_groups"] == 0.2
    assert f["with_infra_failure_of_groups"] == 0.4
    assert f["infra_failed_of_responses"] == pytest.approx(3 / 15)
    assert f["all_equal_reward_of_groups"] == 0.4


def test_correctness_can_come_from_statuses_rather_than_rewards():
    rewards = torch.tensor([[1.0, 1.0], [-0.5, 0.0]])  # invalid scored -0.5, incorrect 0
    correct = torch.tensor([[True, True], [False, False]])
    f = group_outcome_fractions(rewards, correct=correct)
    assert f["all_correct_of_groups"] == 0.5 and f["all_wrong_of_groups"] == 0.5
    assert f["all_equal_reward_of_groups"] == 0.5  # the wrong group still has a reward spread


@settings(max_examples=40, deadline=None)
@given(grids())
def test_group_categories_partition_the_batch(grid):
    rewards, valid = grid
    f = group_outcome_fractions(rewards, valid)
    parts = ("all_correct", "all_wrong", "mixed", "under_filled")
    assert sum(f[f"{p}_of_groups"] for p in parts) == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(grids())
def test_reward_std_distribution_matches_a_loop(grid):
    rewards, valid = grid
    d = reward_std_distribution(rewards, valid, quantiles=(0.5,))
    stds = []
    for p in range(rewards.size(0)):
        members = [rewards[p, k].item() for k in range(rewards.size(1)) if valid[p, k]]
        if len(members) >= 2:
            m = sum(members) / len(members)
            stds.append(0.0 if max(members) == min(members) else
                        math.sqrt(sum((x - m) ** 2 for x in members) / len(members)))  # fmt: skip
    assert d["reward_std_groups"] == len(stds)
    if stds:
        assert d["reward_std_mean"] == pytest.approx(sum(stds) / len(stds), abs=1e-9)
        assert d["reward_std_zero_of_groups"] == pytest.approx(stds.count(0.0) / len(stds))
        assert d["reward_std_p50"] == pytest.approx(torch.tensor(stds).quantile(0.5).item())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(-10, 10)), max_size=40))
def test_stratify_matches_a_loop(items):
    names = ["a", "b", "c", "d", "e"]
    labels = torch.tensor([i for i, _ in items], dtype=torch.int64)
    values = torch.tensor([v for _, v in items], dtype=torch.float64)
    out = stratify(values, labels, names, "x")
    for i, name in enumerate(names):
        vals = [v for j, v in items if j == i]
        if not vals:
            assert f"x/{name}/count" not in out
            continue
        assert out[f"x/{name}/count"] == len(vals)
        assert out[f"x/{name}/mean"] == pytest.approx(sum(vals) / len(vals), abs=1e-9)
        assert out[f"x/{name}/abs_mean"] == pytest.approx(
            sum(abs(v) for v in vals) / len(vals), abs=1e-9
        )


def test_batch_diagnostics_end_to_end():
    gen = torch.Generator().manual_seed(0)
    p, k, t = 6, 4, 40
    rewards = (torch.rand(p, k, generator=gen) < 0.5).float()
    rewards[0] = 1.0
    rewards[1, 2:] = math.nan
    valid = ~torch.isnan(rewards)
    lengths = torch.randint(1, t + 1, (p, k), generator=gen)
    mask = torch.arange(t)[None, :] < lengths.reshape(-1, 1)
    adv, _ = get_estimator("grpo")(rewards, valid)
    logp = -torch.rand(p * k, t, generator=gen)
    old = logp + 0.2 * torch.randn(p * k, t, generator=gen)
    loss_fn = get_loss("ppo_clip")
    _, metrics = loss_fn(logp, old, adv.reshape(-1), mask)
    terms, bmask, _ = loss_fn.terms(logp, old, adv.reshape(-1), mask)
    per_seq = sequence_losses(terms, bmask).reshape(p, k)
    ledger = GenerationLedger()
    filter_groups(rewards, valid, lengths, ledger)
    d = batch_diagnostics(
        rewards, valid, adv, lengths=lengths, losses=per_seq, ledger=ledger, loss_metrics=metrics,
        length_edges=(10, 20, 30), std_edges=(0.3,),
    )  # fmt: skip
    assert all(isinstance(v, float) for v in d.values())
    n_valid = valid.sum().item()
    for what in ("adv", "loss"):
        for stratum in ("by_group_size", "by_reward_std", "by_length"):
            counts = [v for key, v in d.items() if key.startswith(f"{what}/{stratum}/")
                      and key.endswith("/count")]  # fmt: skip
            assert sum(counts) == n_valid, (what, stratum)
    assert d["adv/by_group_size/2/count"] == 2  # the group with two failures
    assert d["adv/by_reward_std/0/abs_mean"] == 0.0  # all-equal groups carry no advantage
    assert d["gen/tokens_sampled"] == lengths.sum().item()
    assert d["loss/clip_frac_low"] == metrics["clip_frac_low"]
    buckets = {key.split("/")[2] for key in d if key.startswith("adv/by_length/")}
    assert buckets <= {"[0,10)", "[10,20)", "[20,30)", "[30,inf)"} and buckets
    in_first = (lengths < 10)[valid].sum().item()
    assert d.get("adv/by_length/[0,10)/count", 0.0) == in_first
    # per-response losses average the token terms over each response's own action tokens
    row = 3
    expected = terms[row][bmask[row]].mean()
    assert per_seq.reshape(-1)[row].item() == pytest.approx(expected.item())
    with pytest.raises(ValueError, match="like rewards"):
        batch_diagnostics(rewards, valid, adv.reshape(-1))
