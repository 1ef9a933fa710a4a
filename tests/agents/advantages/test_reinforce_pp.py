"""REINFORCE++ and REINFORCE++-baseline (Hu et al. 2025, arXiv:2501.03262) by hand."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.agents.advantages.estimators import get_estimator

# formulas compared in floating point: CI runs them again under the scalar kernels
pytestmark = pytest.mark.float_sensitive


def _population(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def test_reinforce_pp_normalises_over_the_whole_batch():
    """A = (R - batch mean) / batch std, one mean and one std for every valid response; an
    invalid response is outside both and gets 0."""
    rewards = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, math.nan]])
    valid = ~rewards.isnan()
    adv, stats = get_estimator("reinforce_pp")(rewards, valid)
    mean, std = _population([1.0, 0.0, 1.0, 0.0, 0.0])
    expected = torch.tensor([[1 - mean, -mean, 1 - mean], [-mean, -mean, 0.0]]) / std
    expected[1, 2] = 0.0
    torch.testing.assert_close(adv, expected)
    assert stats["batch_std"] == pytest.approx(std)


def test_reinforce_pp_baseline_centres_each_group_then_normalises_the_batch():
    """A' = R - group mean; A = (A' - mean A') / std A' over the batch. The std is that of the
    centred values, not of the raw rewards (which ``grpo_batch_std`` divides by); an
    all-equal group gets exact zeros but still counts in the batch's statistics."""
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [3.0, 1.0, 3.0, 1.0]])
    adv, stats = get_estimator("reinforce_pp_baseline")(rewards)
    centred = [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0, 1, -1, 1, -1]
    mean, std = _population(centred)
    assert mean == 0.0
    expected = torch.tensor(centred).view(3, 4) / std
    expected[1] = 0.0
    torch.testing.assert_close(adv, expected)
    assert adv[1].eq(0).all()
    raw_std = _population(rewards.flatten().tolist())[1]
    assert stats["batch_std"] == pytest.approx(std) and std != pytest.approx(raw_std)
    other, _ = get_estimator("grpo_batch_std")(rewards)
    assert not torch.allclose(adv, other)  # a different estimator, not an alias


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_a_constant_batch_gives_zeros(name):
    adv, stats = get_estimator(name)(torch.full((2, 3), 0.3))
    assert adv.eq(0).all() and stats["batch_std_below_eps"] == 1.0


def test_the_declared_needs():
    plain, baseline = (get_estimator(n) for n in ("reinforce_pp", "reinforce_pp_baseline"))
    assert plain.batch_wide and not plain.needs_group  # works with K = 1
    assert baseline.batch_wide and baseline.needs_group
    adv, _ = plain(torch.tensor([[1.0], [0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[1.0], [-1.0]]))
