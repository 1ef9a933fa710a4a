"""DAPO's parts: dynamic sampling's filter, overlong punishment and filtering (S10, S16)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.advantages.estimators import get_estimator
from forkgym.agents.generation.dapo import (
    apply_overlong_penalty,
    filter_groups,
    groups_with_signal,
    mask_truncated,
    overlong_penalty,
)
from forkgym.agents.generation.ledger import GenerationLedger
from forkgym.agents.learner.reductions import build_normaliser
from tests.agents.strategies import grids


@settings(max_examples=40, deadline=None)
@given(grids())
def test_signal_filter_keeps_exactly_the_groups_with_non_constant_valid_rewards(grid):
    rewards, valid = grid
    keep = groups_with_signal(rewards, valid)
    for p in range(rewards.size(0)):
        members = [rewards[p, k].item() for k in range(rewards.size(1)) if valid[p, k]]
        assert keep[p].item() == (len(members) >= 2 and max(members) != min(members))
    adv, _ = get_estimator("rloo")(rewards, valid)
    assert torch.count_nonzero(adv[~keep]) == 0  # what is dropped had no signal anyway


def test_groups_beyond_the_room_left_are_discarded_not_accepted():
    ledger = GenerationLedger()
    rewards = torch.tensor([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    lengths = torch.tensor([[1, 2], [3, 4], [5, 6], [7, 8]])
    keep = filter_groups(rewards, None, lengths, ledger, room=2)
    assert keep.tolist() == [True, False, True, False]  # the first two with signal
    assert ledger.prompts_accepted == 2 and ledger.tokens_accepted == 3 + 11
    assert filter_groups(rewards, None, lengths, room=0).tolist() == [False] * 4


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 4000), st.integers(0, 8000))
def test_overlong_penalty_is_dapos_piecewise_formula(max_length, cache, length):
    cache = min(cache, max_length)
    got = overlong_penalty(torch.tensor([length]), max_length, cache).item()
    if length <= max_length - cache:
        expected = 0.0
    elif length <= max_length:
        expected = ((max_length - cache) - length) / cache
    else:
        expected = -1.0
    assert got == pytest.approx(expected, abs=1e-12)
    assert -1.0 <= got <= 0.0


def test_overlong_penalty_leaves_infrastructure_failures_alone():
    rewards = torch.tensor([[1.0, math.nan, 1.0]])
    valid = torch.tensor([[True, False, True]])
    lengths = torch.tensor([[80, 120, 120]])  # 80 = max_length - cache_length: no penalty yet
    shaped = apply_overlong_penalty(rewards, lengths, valid, max_length=120, cache_length=40)
    assert shaped[0, 0] == 1.0 and math.isnan(shaped[0, 1]) and shaped[0, 2] == 0.0
    with pytest.raises(ValueError):
        overlong_penalty(lengths, 10, 20)


def test_truncated_responses_leave_the_loss_but_not_the_statistics():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    truncated = torch.tensor([True, False, False])
    rewards = torch.tensor([0.5, 1.0, 0.0])
    new, stats = mask_truncated(mask, truncated, rewards)
    assert new.tolist() == [[False] * 3, [True, True, False], [True, False, False]]
    assert stats == {
        "truncated_responses": 1.0,
        "truncated_fraction": pytest.approx(1 / 3),
        "truncated_tokens_masked": 3.0,
        "truncated_reward_mean": 0.5,
    }
    norm = build_normaliser("seq_mean_token_mean", new)
    assert norm.sequences == 2  # the truncated response is no sequence of the loss
    # ...but its reward still shapes its group's baseline (it is a valid, policy-made outcome)
    adv, _ = get_estimator("rloo")(rewards[None, :])
    assert adv[0, 1].item() == pytest.approx(1.0 - 0.25)
    _, no_trunc = mask_truncated(mask, torch.zeros(3, dtype=torch.bool), rewards)
    assert "truncated_reward_mean" not in no_trunc
