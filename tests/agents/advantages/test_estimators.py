"""Estimator invariants (docs/design.md, S1-S8, S11, S12), as properties over random reward grids."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.advantages import estimators as est_mod
from forkgym.agents.advantages.estimators import (
    ESTIMATORS,
    get_estimator,
)
from tests.agents.strategies import VALUES, grids

PROPS = settings(max_examples=40, deadline=None)
GREEDY_FREE = sorted(n for n, cls in ESTIMATORS.items() if not cls.needs_greedy)
GROUP = sorted(n for n, cls in ESTIMATORS.items() if cls.needs_group)


# RLOO and GRPO written the plain way (no masks, no float64, no exact equality checks): the
# textbook formulas the estimators must agree with on complete groups.
def critic_free_advantage(reward, estimator, eps=1e-6):
    if reward.ndim != 2 or reward.size(1) < 2:
        raise ValueError("expected [prompt, rollout], K >= 2")
    if estimator == "rloo":
        other = (reward.sum(1, keepdim=True) - reward) / (reward.size(1) - 1)
        return (reward - other).detach()
    if estimator == "grpo":
        centered = reward - reward.mean(1, keepdim=True)
        std = reward.std(1, keepdim=True, unbiased=False)
        return torch.where(std > eps, centered / std, torch.zeros_like(centered)).detach()
    raise ValueError(estimator)


def _call(name: str, rewards, valid=None, **kw):
    """Fresh estimator (reinforce_ema is stateful); remax gets a greedy reward of 0.5."""
    greedy = torch.full((rewards.size(0),), 0.5) if name == "remax" else None
    return get_estimator(name, **kw)(rewards, valid, greedy=greedy)


# ---------------------------------------------------------------------------------------------
# RLOO and the group mean (S5, S6, seed diagnostic 1)


@PROPS
@given(grids())
def test_rloo_baseline_is_the_mean_of_the_others(grid):
    rewards, valid = grid
    adv, _ = get_estimator("rloo")(rewards, valid)
    for p in range(rewards.size(0)):
        members = [rewards[p, j].item() for j in range(rewards.size(1)) if valid[p, j]]
        if len(members) < 2 or max(members) == min(members):
            assert torch.count_nonzero(adv[p]) == 0
            continue
        for i in range(rewards.size(1)):
            if not valid[p, i]:
                assert adv[p, i] == 0
                continue
            others = [
                rewards[p, j].item() for j in range(rewards.size(1)) if valid[p, j] and j != i
            ]
            baseline = rewards[p, i].item() - adv[p, i].item()
            assert baseline == pytest.approx(sum(others) / len(others), abs=1e-5)


@PROPS
@given(grids(), st.data())
def test_rloo_baseline_does_not_move_with_own_reward(grid, data):
    rewards, valid = grid
    p = data.draw(st.integers(0, rewards.size(0) - 1))
    i = data.draw(st.integers(0, rewards.size(1) - 1))
    valid[p, i] = True
    bumped = rewards.clone()
    bumped[p, i] += data.draw(st.floats(0.5, 3.0))
    a0, _ = get_estimator("rloo")(rewards, valid)
    a1, _ = get_estimator("rloo")(bumped, valid)

    def has_signal(r: torch.Tensor) -> bool:
        members = r[p][valid[p]]
        return members.numel() >= 2 and bool(members.max() != members.min())

    if has_signal(rewards) and has_signal(bumped):
        b0 = rewards[p, i] - a0[p, i].double()
        b1 = bumped[p, i] - a1[p, i].double()
        assert b0.item() == pytest.approx(b1.item(), abs=1e-5)


@PROPS
@given(grids())
def test_group_mean_is_scaled_rloo(grid):
    """S6: R_i - mean = (n-1)/n * A_i(RLOO), n the valid members of the group."""
    rewards, valid = grid
    centred, _ = get_estimator("dr_grpo")(rewards, valid)
    rloo, _ = get_estimator("rloo")(rewards, valid)
    n = valid.sum(1, keepdim=True).double()
    expected = ((n - 1) / n.clamp(min=1)) * rloo.double()
    torch.testing.assert_close(centred.double(), expected, rtol=1e-6, atol=1e-6)


def test_reinforce_mean_is_flagged_and_scaled():
    """S2: the self-including batch mean is (N-1)/N times leave-one-out, and says so."""
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]])
    adv, stats = get_estimator("reinforce_mean")(rewards)
    rloo, _ = get_estimator("rloo")(rewards)
    torch.testing.assert_close(adv, (4 / 5) * rloo)
    assert stats["action_dependent_baseline"] == 1.0
    assert stats["loo_scale"] == pytest.approx(4 / 5)


# ---------------------------------------------------------------------------------------------
# The seed's reference snippet


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(2, 16),
    st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_seed_reference_snippet_agrees(p, k, dtype, seed, binary):
    gen = torch.Generator().manual_seed(seed)
    if binary:
        rewards = (torch.rand(p, k, generator=gen) < 0.5).to(dtype)
    else:
        rewards = torch.randn(p, k, generator=gen, dtype=dtype)
    for name in ("rloo", "grpo"):
        ours, _ = get_estimator(name)(rewards)
        ref = critic_free_advantage(rewards, name)
        assert ours.dtype == rewards.dtype
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_seed_reference_examples():
    """The seed's own asserts, against forkgym's estimators."""
    r = torch.tensor([[0.0, 1.0, 2.0], [4.0, 4.0, 4.0]])
    a_rloo, _ = get_estimator("rloo")(r)
    a_grpo, _ = get_estimator("grpo")(r)
    torch.testing.assert_close(a_rloo[0], 1.5 * (r[0] - r[0].mean()))
    torch.testing.assert_close(a_grpo.mean(1), torch.zeros(2))
    assert torch.count_nonzero(a_grpo[1]) == 0 and not a_rloo.requires_grad


# ---------------------------------------------------------------------------------------------
# Degenerate groups (S7, S8)


@pytest.mark.parametrize("value", [0.3, 0.35, 1 / 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k", [2, 8, 16])
@pytest.mark.parametrize("eps", [0.0, 1e-12, 1e-9, 1e-6, 1e-4])
def test_constant_groups_give_exact_zeros(value, dtype, k, eps):
    rewards = torch.full((3, k), value, dtype=dtype)
    rewards[1] = torch.tensor(value * 2, dtype=dtype)  # another constant group
    for name in ("grpo", "grpo_batch_std"):
        adv, stats = get_estimator(name, eps=eps)(rewards)
        assert torch.count_nonzero(adv) == 0, (name, adv)
        assert stats["groups_all_equal"] == 3
        assert stats["groups_with_signal"] == 0
    for name in ("rloo", "dr_grpo"):
        adv, _ = get_estimator(name)(rewards)
        assert torch.count_nonzero(adv) == 0


def test_epsilon_guarded_float32_std_is_the_trap_we_avoid():
    """Eight float32 0.3s: (R - mean) / (std + 1e-9) is about 0.9, forkgym's grpo is 0."""
    rewards = torch.full((1, 8), 0.3, dtype=torch.float32)
    naive = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-9)
    assert naive.abs().max() > 0.5  # the anchors' bug is real on this input
    ours, _ = get_estimator("grpo", eps=1e-9)(rewards)
    assert torch.count_nonzero(ours) == 0


def test_constant_groups_among_mixed_ones():
    rewards = torch.tensor([[0.3] * 8, [0.0, 1.0] * 4], dtype=torch.float32)
    adv, stats = get_estimator("grpo")(rewards)
    assert torch.count_nonzero(adv[0]) == 0
    torch.testing.assert_close(adv[1], torch.tensor([-1.0, 1.0] * 4))
    assert (stats["groups_all_equal"], stats["groups_with_signal"]) == (1, 1)


def test_tiny_spread_below_eps_gives_zeros_and_is_counted():
    rewards = torch.tensor([[0.0, 1e-9, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    adv, stats = get_estimator("grpo", eps=1e-6)(rewards)
    assert torch.count_nonzero(adv[0]) == 0
    assert adv[1].abs().max() > 1
    assert stats["groups_std_below_eps"] == 1
    adv, stats = get_estimator("grpo", eps=0.0)(rewards)  # without the guard: a real signal
    assert adv[0].abs().max() == pytest.approx(math.sqrt(3))


@pytest.mark.parametrize("name", GROUP)
def test_group_estimators_refuse_one_rollout(name):
    with pytest.raises(ValueError, match="K >= 2"):
        get_estimator(name)(torch.zeros(4, 1))


@pytest.mark.parametrize("name", sorted(set(ESTIMATORS) - set(GROUP)))
def test_single_rollout_estimators_accept_one_rollout(name):
    adv, _ = _call(name, torch.tensor([[1.0], [0.0]]))
    assert adv.shape == (2, 1)


@pytest.mark.parametrize("name", GROUP)
def test_under_filled_groups_get_zeros_and_are_counted(name):
    rewards = torch.tensor([[1.0, 0.0, 5.0], [1.0, 0.0, 0.0]])
    valid = torch.tensor([[True, False, False], [True, True, True]])
    adv, stats = get_estimator(name)(rewards, valid)
    assert torch.count_nonzero(adv[0]) == 0
    assert torch.count_nonzero(adv[1]) == 3
    assert stats["groups_under_filled"] == 1
    assert stats["responses_invalid"] == 2
    assert stats["groups_with_infra_failure"] == 1


# ---------------------------------------------------------------------------------------------
# Infrastructure failures (S12, invariant 2)


@PROPS
@given(grids(), st.sampled_from(sorted(ESTIMATORS)), st.data())
def test_invalid_entries_never_change_another_members_advantage(grid, name, data):
    rewards, valid = grid
    other = rewards.clone()
    junk = st.sampled_from([math.nan, math.inf, -math.inf, 1e30, 0.0, -7.0])
    for p, k in (~valid).nonzero().tolist():
        other[p, k] = data.draw(junk)
    a0, s0 = _call(name, rewards, valid)
    a1, s1 = _call(name, other, valid)
    assert torch.equal(a0, a1)
    assert torch.count_nonzero(a0[~valid]) == 0
    assert s0 == s1


def test_nan_rewards_need_a_valid_mask():
    rewards = torch.tensor([[1.0, math.nan]])
    with pytest.raises(ValueError, match="valid"):
        get_estimator("rloo")(rewards)
    with pytest.raises(ValueError, match="non-finite"):
        get_estimator("rloo")(rewards, torch.tensor([[True, True]]))


# ---------------------------------------------------------------------------------------------
# ReMax (S3)


@PROPS
@given(grids(min_k=1), st.data())
def test_remax_is_sampled_minus_greedy_and_ignores_group_equality(grid, data):
    rewards, valid = grid
    p = rewards.size(0)
    greedy = torch.tensor(data.draw(st.lists(VALUES["few"], min_size=p, max_size=p)))
    greedy_valid = torch.tensor(data.draw(st.lists(st.booleans(), min_size=p, max_size=p)))
    adv, stats = get_estimator("remax")(rewards, valid, greedy=greedy, greedy_valid=greedy_valid)
    expected = torch.where(valid & greedy_valid[:, None], rewards - greedy[:, None], 0.0)
    torch.testing.assert_close(adv.double(), expected)
    assert stats["greedy_invalid"] == (~greedy_valid).sum().item()


def test_remax_gives_a_constant_group_a_signal():
    rewards = torch.full((1, 4), 1.0)
    adv, stats = get_estimator("remax")(rewards, greedy=torch.tensor([0.0]))
    torch.testing.assert_close(adv, torch.ones(1, 4))
    assert stats["groups_all_equal"] == 1  # counted, and still not zeroed


def test_remax_needs_greedy_and_masks_failed_greedy():
    with pytest.raises(ValueError, match="greedy"):
        get_estimator("remax")(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="greedy_valid"):
        get_estimator("remax")(torch.zeros(1, 3), greedy=torch.tensor([math.nan]))
    adv, stats = get_estimator("remax")(
        torch.ones(1, 3), greedy=torch.tensor([math.nan]), greedy_valid=torch.tensor([False])
    )
    assert torch.count_nonzero(adv) == 0 and stats["greedy_invalid"] == 1


# ---------------------------------------------------------------------------------------------
# Other estimators


def test_reinforce_ema_uses_earlier_batches_only():
    ema = get_estimator("reinforce_ema", decay=0.5)
    first = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv, stats = ema(first)
    torch.testing.assert_close(adv, first)  # no earlier batch: baseline = init = 0
    assert stats["baseline"] == 0.0 and ema.baseline == pytest.approx(0.75)
    second = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    state = ema.state_dict()
    adv2, stats2 = ema(second)
    assert stats2["baseline"] == pytest.approx(0.75)  # read before this batch was seen
    torch.testing.assert_close(adv2, second - 0.75)
    assert ema.baseline == pytest.approx(0.5 * 0.75 + 0.5 * 0.25)
    # the current batch's own rewards never move its baseline
    ema.load_state_dict(state)
    adv3, _ = ema(second + 10.0)
    torch.testing.assert_close(adv3 - adv2, torch.full_like(adv2, 10.0))


def test_reinforce_ema_skips_batches_without_valid_rewards():
    ema = get_estimator("reinforce_ema")
    ema(torch.tensor([[math.nan]]), torch.tensor([[False]]))
    assert ema.baseline is None and ema.batches == 0


@PROPS
@given(grids())
def test_grpo_batch_std_matches_a_direct_transcription(grid):
    rewards, valid = grid
    adv, _ = get_estimator("grpo_batch_std", eps=1e-6)(rewards, valid)
    everything = [rewards[p, k].item() for p, k in valid.nonzero().tolist()]
    m = sum(everything) / max(len(everything), 1)
    batch_std = math.sqrt(sum((x - m) ** 2 for x in everything) / max(len(everything), 1))
    for p in range(rewards.size(0)):
        members = [rewards[p, k].item() for k in range(rewards.size(1)) if valid[p, k]]
        for k in range(rewards.size(1)):
            expect = 0.0
            if (
                valid[p, k]
                and len(members) >= 2
                and max(members) != min(members)
                and batch_std > 1e-6
            ):
                expect = (rewards[p, k].item() - sum(members) / len(members)) / batch_std
            assert adv[p, k].item() == pytest.approx(expect, abs=1e-5)


@PROPS
@given(grids())
def test_grpo_matches_a_direct_transcription(grid):
    rewards, valid = grid
    adv, _ = get_estimator("grpo")(rewards, valid)
    for p in range(rewards.size(0)):
        members = [rewards[p, k].item() for k in range(rewards.size(1)) if valid[p, k]]
        for k in range(rewards.size(1)):
            expect = 0.0
            if valid[p, k] and len(members) >= 2 and max(members) != min(members):
                mean = sum(members) / len(members)
                std = math.sqrt(sum((x - mean) ** 2 for x in members) / len(members))
                expect = (rewards[p, k].item() - mean) / std if std > 1e-6 else 0.0
            assert adv[p, k].item() == pytest.approx(expect, abs=1e-5)


# ---------------------------------------------------------------------------------------------
# Interface


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize(
    ("dtype", "out"),
    [
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_output_is_detached_with_documented_dtype(name, dtype, out):
    rewards = torch.tensor([[0.0, 1.0, 0.5], [1.0, 1.0, 0.0]], dtype=dtype, requires_grad=True)
    adv, stats = _call(name, rewards)
    assert adv.dtype == out and not adv.requires_grad and adv.shape == rewards.shape
    assert all(isinstance(v, float) for v in stats.values())


def test_registry_and_errors():
    assert set(ESTIMATORS) == {
        "reinforce", "reinforce_mean", "reinforce_ema", "remax",
        "rloo", "grpo", "dr_grpo", "grpo_batch_std", "reinforce_pp", "reinforce_pp_baseline",
    }  # fmt: skip
    with pytest.raises(ValueError, match="unknown estimator"):
        get_estimator("ppo")
    with pytest.raises(ValueError, match=r"\[prompt, rollout\]"):
        get_estimator("rloo")(torch.zeros(6))
    with pytest.raises(TypeError):
        get_estimator("rloo")(torch.zeros(2, 2, dtype=torch.int64))


def test_stats_count_everything():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, math.nan], [1.0, math.nan, math.nan]])
    valid = ~torch.isnan(rewards)
    _, stats = get_estimator("grpo")(rewards, valid)
    assert stats["groups"] == 3 and stats["responses"] == 9
    assert stats["responses_invalid"] == 3
    assert stats["groups_with_infra_failure"] == 2
    assert stats["groups_under_filled"] == 1
    assert stats["groups_all_equal"] == 1
    assert stats["groups_with_signal"] == 1
    assert stats["adv_nonzero"] == 2
    assert stats["reward_mean"] == pytest.approx(5 / 6)


def test_no_python_loop_in_any_estimator():
    """Every estimator is tensor ops over [P, K]: no for/while/comprehension in their code."""
    functions = [est_mod._prepare, est_mod._batch_mean, est_mod._batch_constant]
    functions += [cls.compute for cls in ESTIMATORS.values()]
    functions += [est_mod.Estimator.__call__, est_mod._prepare_greedy]
    loops = (ast.For, ast.While, ast.comprehension, ast.AsyncFor)
    for fn in functions:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        found = [type(n).__name__ for n in ast.walk(tree) if isinstance(n, loops)]
        assert not found, (fn.__qualname__, found)
