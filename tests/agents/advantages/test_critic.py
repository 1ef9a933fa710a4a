"""Learned-critic pieces (S19): GAE across tool turns, value clipping, the centered hybrid."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.advantages.critic import (
    clipped_value_loss,
    critic_group_centered,
    gae,
    terminal_rewards,
    whitened,
)


def textbook_gae(rewards, values, gamma, lam):
    """GAE (Schulman et al. 2016) for one episode of consecutive steps, a Python loop."""
    adv, nxt_v, nxt_a = [0.0] * len(rewards), 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * nxt_v - values[t]
        nxt_a = delta + gamma * lam * nxt_a
        adv[t], nxt_v = nxt_a, values[t]
    return adv


@st.composite
def episodes(draw):
    b, t = draw(st.integers(1, 5)), draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, t, generator=g) < draw(st.floats(0.2, 1.0))  # False: tool/observation
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    rewards = torch.where(mask, torch.randn(b, t, generator=g, dtype=torch.float64), 0.0)
    return rewards, values, mask, draw(st.floats(0.5, 1.0)), draw(st.floats(0.0, 1.0))


@settings(max_examples=40, deadline=None)
@given(episodes())
def test_gae_skips_non_action_tokens(ep):
    """GAE over a stream with tool tokens equals textbook GAE over its action tokens alone."""
    rewards, values, mask, gamma, lam = ep
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    for i in range(rewards.size(0)):
        idx = mask[i].nonzero().flatten().tolist()
        ref = textbook_gae([rewards[i, t].item() for t in idx],
                           [values[i, t].item() for t in idx], gamma, lam)  # fmt: skip
        got = [adv[i, t].item() for t in idx]
        assert got == pytest.approx(ref, abs=1e-9)
        assert torch.count_nonzero(adv[i][~mask[i]]) == 0
    torch.testing.assert_close(ret, torch.where(mask, adv + values, 0.0))


def test_gae_refuses_rewards_on_tool_tokens_and_places_terminal_rewards():
    mask = torch.tensor([[True, True, False, True, False], [False, False, False, False, False]])
    r = terminal_rewards(torch.tensor([2.0, 5.0]), mask)
    assert r.tolist() == [[0, 0, 0, 2.0, 0], [0] * 5]
    bad = torch.zeros(2, 5)
    bad[0, 2] = 1.0
    with pytest.raises(ValueError, match="non-action"):
        gae(bad, torch.zeros(2, 5), mask)
    adv, _ = gae(r, torch.zeros(2, 5), mask, gamma=0.5, lam=1.0)
    assert adv[0].tolist() == [0.5, 1.0, 0.0, 2.0, 0.0]  # discounted per action step only


def test_clipped_value_loss_matches_ppo_formula():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 6, generator=g, dtype=torch.float64)
    old = values + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    returns = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 6, generator=g) < 0.7
    v = values.clone().requires_grad_()
    loss, m = clipped_value_loss(v, old, returns, mask, clip_eps=0.2)
    w = values.clone().requires_grad_()
    terms, clipped = [], 0
    for i in range(4):
        for t in range(6):
            if mask[i, t]:
                vc = old[i, t] + torch.clamp(w[i, t] - old[i, t], -0.2, 0.2)
                a, b = (w[i, t] - returns[i, t]) ** 2, (vc - returns[i, t]) ** 2
                terms.append(0.5 * max(a, b))
                clipped += int(b > a)
    expected = sum(terms) / len(terms)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(torch.autograd.grad(loss, v)[0], torch.autograd.grad(expected, w)[0])
    assert m["value_clip_frac"] == pytest.approx(clipped / len(terms))
    plain, _ = clipped_value_loss(values, old, returns, mask, clip_eps=None)
    assert plain.item() == pytest.approx(0.5 * ((values - returns)[mask] ** 2).mean().item())


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 5), st.integers(1, 4))
def test_hybrid_loo_centering_excludes_self(seed, k, p):
    g = torch.Generator().manual_seed(seed)
    b, t = p * k, 6
    mask = torch.rand(b, t, generator=g) < 0.7
    mask[:, 0] = True
    tok = torch.randn(b, t, generator=g, dtype=torch.float64)
    valid = torch.rand(p, k, generator=g) < 0.8
    out, stats = critic_group_centered(tok, mask, k, valid, mode="loo")
    c = [(tok[i][mask[i]].mean().item()) for i in range(b)]
    for i in range(b):
        grp, j = divmod(i, k)
        members = [grp * k + m for m in range(k) if valid[grp, m]]
        if not valid[grp, j]:
            assert torch.count_nonzero(out[i]) == 0
            continue
        others = [c[m] for m in members if m != i]
        base = sum(others) / len(others) if len(members) >= 2 else 0.0
        torch.testing.assert_close(out[i][mask[i]], tok[i][mask[i]] - base)
    assert stats["groups_under_filled"] == (valid.sum(1) < 2).sum().item()


def test_hybrid_mean_mode_is_the_scaled_self_including_variant():
    tok = torch.tensor([[1.0, 1.0], [3.0, 3.0], [8.0, 8.0]])
    mask = torch.ones(3, 2, dtype=torch.bool)
    loo, _ = critic_group_centered(tok, mask, 3, mode="loo")
    mean, _ = critic_group_centered(tok, mask, 3, mode="mean")
    torch.testing.assert_close(mean, (2 / 3) * loo)  # c_i - mean = (K-1)/K (c_i - loo_i)
    with pytest.raises(ValueError, match="groups"):
        critic_group_centered(tok, mask, 2)
    with pytest.raises(ValueError, match="mode"):
        critic_group_centered(tok, mask, 3, mode="median")


def test_a_two_turn_episode_by_hand_with_separate_lambdas():
    """Turn 1 (2 tokens), a tool result (2 observation tokens), turn 2 (2 tokens), reward 1.
    Action steps t0, t1, t4, t5 with values 0.5, 0.4, 0.6, 0.8; gamma 1.
    lam 0.5: A5 = 1 - 0.8 = 0.2; A4 = (0.8 - 0.6) + 0.5 * 0.2 = 0.3;
    A1 = (0.6 - 0.4) + 0.5 * 0.3 = 0.35; A0 = (0.4 - 0.5) + 0.5 * 0.35 = 0.075.
    lam 1 (the critic's targets): the Monte-Carlo return 1 on every action token."""
    mask = torch.tensor([[True, True, False, False, True, True]])
    values = torch.tensor([[0.5, 0.4, 9.0, 9.0, 0.6, 0.8]], dtype=torch.float64)
    rewards = terminal_rewards(torch.tensor([1.0], dtype=torch.float64), mask)
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert adv[0].tolist() == pytest.approx([0.075, 0.35, 0, 0, 0.3, 0.2])
    assert ret[0].tolist() == pytest.approx([0.575, 0.75, 0, 0, 0.9, 1.0])
    _, targets = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert targets[0].tolist() == pytest.approx([1, 1, 0, 0, 1, 1])


def test_the_hybrid_on_degenerate_groups():
    """All-equal group: every centred advantage is 0 (no signal, as for RLOO); a group with
    one valid member keeps its plain GAE advantages; an invalid member gets 0."""
    mask = torch.tensor([[1, 1, 0, 1]] * 6, dtype=torch.bool)
    tok = torch.tensor([[1.0, 1.0, 0.0, 1.0]] * 3 + [[0.5, 0.5, 0.0, 0.5], [2.0, 2.0, 0.0, 2.0], [7.0, 7.0, 0.0, 7.0]])  # fmt: skip
    valid = torch.tensor([[True, True, True], [True, False, False]])
    out, stats = critic_group_centered(tok, mask, 3, valid, mode="loo")
    assert torch.count_nonzero(out[:3]) == 0  # equal members: nothing left
    torch.testing.assert_close(out[3], tok[3])  # alone in its group: no baseline
    assert torch.count_nonzero(out[4:]) == 0  # invalid members
    assert stats["groups_under_filled"] == 1


def test_explained_variance_is_undefined_without_variance_in_the_returns():
    from forkgym.agents.advantages.critic import explained_variance

    flat = torch.zeros(6, dtype=torch.float64)
    assert explained_variance(flat, flat) is None  # not 1.0: nothing was explained
    assert explained_variance(torch.ones(1), torch.ones(1)) is None
    returns = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    assert explained_variance(returns, returns) == 1.0
    assert explained_variance(returns, torch.full((4,), 0.5, dtype=torch.float64)) == 0.0
    # equal rewards come back from GAE as value + advantage in float32, differing by rounding:
    # still no variance to explain (a run logged -4.7e12 here before)
    rounded = torch.tensor([3e-8, -3e-8, 0.0, 6e-8])
    assert explained_variance(rounded, torch.tensor([0.3, -0.2, 0.7, 0.1])) is None


def test_whitening_uses_action_tokens_only_and_leaves_a_constant_batch_at_zero():
    adv = torch.tensor([[1.0, 2.0, 99.0], [3.0, 4.0, -50.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    out = whitened(adv, mask)
    kept = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    expected = (kept - kept.mean()) / kept.std(unbiased=False)
    assert torch.allclose(out[mask].double(), expected, atol=1e-6)
    assert out[~mask].eq(0).all()
    assert whitened(torch.full((2, 3), 0.7), mask).eq(0).all()
    assert torch.equal(whitened(adv, torch.zeros_like(mask)), torch.zeros_like(adv))
