"""Clip-Cov and KL-Cov (arXiv:2505.22617, section 4, eq. 9-10) against hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.agents.learner.covariance import covariance, selection_size
from forkgym.agents.learner.losses import get_loss
from forkgym.agents.learner.reductions import REDUCTIONS

# formulas compared in floating point: CI runs them again under the scalar kernels
pytestmark = pytest.mark.float_sensitive

# one response of four tokens: log-probs -1, -2, -3, -4 (mean -2.5), advantage per token
LOGP = [[-1.0, -2.0, -3.0, -4.0]]


def _tensors(logp, log_ratio, adv):
    x = torch.tensor(logp, dtype=torch.float64)
    old = x - torch.tensor(log_ratio, dtype=torch.float64)
    a = torch.tensor(adv, dtype=torch.float64)
    return x.clone().requires_grad_(), old, a, torch.ones_like(x, dtype=torch.bool)


def test_covariance_is_the_centred_product_over_the_action_tokens():
    """Cov_t = (log pi_t - mean log pi) (A_t - mean A): token-level advantages (2, 0, 0, -2)
    have mean 0, log-probs mean -2.5, so Cov = (1.5*2, 0, 0, -1.5*-2) = (3, 0, 0, 3)."""
    x = torch.tensor(LOGP, dtype=torch.float64)
    adv = torch.tensor([[2.0, 0.0, 0.0, -2.0]], dtype=torch.float64)
    mask = torch.ones_like(x, dtype=torch.bool)
    torch.testing.assert_close(covariance(x, adv, mask), torch.tensor([[3.0, 0, 0, 3.0]], dtype=torch.float64))  # fmt: skip
    # padding is outside both means and gets 0
    padded = torch.cat([x, torch.full((1, 2), 7.0, dtype=torch.float64)], 1)
    pmask = torch.cat([mask, torch.zeros(1, 2, dtype=torch.bool)], 1)
    padv = torch.cat([adv, torch.full((1, 2), 9.0, dtype=torch.float64)], 1)
    torch.testing.assert_close(covariance(padded, padv, pmask)[:, :4], covariance(x, adv, mask))
    assert covariance(padded, padv, pmask)[:, 4:].abs().sum() == 0


@pytest.mark.parametrize("fraction,tokens,size", [(2e-4, 100, 1), (2e-4, 10_000, 2), (0.25, 10, 2), (0.3, 10, 3), (1.0, 7, 7), (0.5, 0, 0), (0.0, 5, 1)])  # fmt: skip
def test_the_selection_rounds_down_but_selects_at_least_one(fraction, tokens, size):
    assert selection_size(fraction, tokens) == size


def test_kl_cov_hand_computed_example():
    """Two responses of two tokens, A = (1, -1): log-probs (-1, -3 | -2, -2), mean -2, so
    Cov = (1*1, -1*1 | 0*-1, 0*-1) = (1, -1, 0, 0). With fraction 0.25 of 4 tokens, one token
    is penalised: the first. Its term is -r A + |log r|; the loss is the token mean."""
    log_ratio = [[0.2, -0.1], [0.3, 0.0]]
    x, old, _, mask = _tensors([[-1.0, -3.0], [-2.0, -2.0]], log_ratio, [[0.0]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, m = get_loss("kl_cov", fraction=0.25, cov_kl_coef=0.5)(x, old, adv, mask)
    r = torch.tensor(log_ratio, dtype=torch.float64).exp()
    terms = -r * adv[:, None]
    terms[0, 0] += 0.5 * 0.2
    assert loss.item() == pytest.approx(terms.mean().item(), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, x)
    expected = -r * adv[:, None]
    expected[0, 0] += 0.5  # d|log r|/d log pi = sign(log r) = 1
    torch.testing.assert_close(grad, expected / 4)
    assert m["cov_selected_frac"] == pytest.approx(0.25)
    assert m["cov_mean"] == pytest.approx(0.0)


def test_kl_cov_without_selection_is_the_unclipped_surrogate():
    x, old, adv, mask = _tensors(LOGP, [[0.5, -0.4, 0.9, 0.0]], [1.5])
    loss, _ = get_loss("kl_cov", cov_kl_coef=0.0)(x, old, adv, mask)
    r = torch.tensor([[0.5, -0.4, 0.9, 0.0]], dtype=torch.float64).exp()
    assert loss.item() == pytest.approx((-r * 1.5).mean().item(), rel=1e-12)


def test_clip_cov_detaches_only_drawn_tokens_in_the_band_that_ppo_did_not_clip():
    """Token advantages come from one response per row here: rows (A = 2, A = -2). Tokens
    whose covariance is in (1, 5) and whose ratio PPO left alone can be drawn; with fraction
    1 every such token is drawn and loses its gradient, every other token keeps PPO's."""
    logp = [[-1.0, -4.0], [-4.0, -1.0]]
    log_ratio = [[0.0, 0.0], [0.0, math.log(0.5)]]  # the last token: A < 0, r < 0.8, clipped
    x, old, _, mask = _tensors(logp, log_ratio, [[0.0]])
    adv = torch.tensor([2.0, -2.0], dtype=torch.float64)
    cov = covariance(x, adv[:, None], mask)  # means -2.5 and 0: (1.5*2, -1.5*2 | -1.5*-2, 1.5*-2)
    torch.testing.assert_close(cov, torch.tensor([[3.0, -3.0], [3.0, -3.0]], dtype=torch.float64))
    loss, m = get_loss("clip_cov", fraction=1.0)(x, old, adv, mask)
    ppo, _ = get_loss("ppo_clip")(x, old, adv, mask)
    (g_cov,) = torch.autograd.grad(loss, x)
    (g_ppo,) = torch.autograd.grad(ppo, x, retain_graph=True)
    drawn = torch.tensor([[True, False], [True, False]])
    assert (g_cov[drawn] == 0).all() and (g_ppo[drawn] != 0).all()
    torch.testing.assert_close(g_cov[~drawn], g_ppo[~drawn])
    assert m["cov_selected_frac"] == pytest.approx(0.5)
    assert m["clip_frac_low"] == pytest.approx(0.25)  # PPO's clip still reported


def test_clip_cov_draws_at_most_the_selection_size_and_the_draw_is_keyed_by_content():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(8, 50, generator=g, dtype=torch.float64) * 4
    old = logp + 0.05 * torch.randn(8, 50, generator=g, dtype=torch.float64)
    adv = torch.randn(8, generator=g, dtype=torch.float64) * 3
    mask = torch.ones(8, 50, dtype=torch.bool)
    loss_fn = get_loss("clip_cov", fraction=0.01)
    eligible = (covariance(logp, adv[:, None], mask) > 1) & (covariance(logp, adv[:, None], mask) < 5)  # fmt: skip
    assert eligible.sum() > 4  # premise: more eligible tokens than the draw takes
    draws = [loss_fn(logp.clone().requires_grad_(), old, adv, mask)[1] for _ in range(2)]
    assert draws[0] == draws[1]  # same micro-batch, same draw
    assert draws[0]["cov_selected_frac"] == pytest.approx(4 / 400)  # floor(0.01 * 400)
    x = logp.clone().requires_grad_()
    loss, _ = loss_fn(x, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, x)
    ppo_grad = torch.autograd.grad(get_loss("ppo_clip")(x, old, adv, mask)[0], x)[0]
    differs = grad != ppo_grad
    assert differs.sum() == 4 and eligible[differs].all()


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_zero_advantage_selects_nothing_that_changes_the_loss(name):
    """With A = 0 every covariance is 0: Clip-Cov's band (1, 5) is empty, and KL-Cov's
    penalty falls on tokens whose |log r| is 0 on-policy."""
    x, _, adv, mask = _tensors(LOGP, [[0.0] * 4], [0.0])
    loss, m = get_loss(name, fraction=0.5)(x, x.detach(), adv, mask)
    assert loss.item() == 0.0
    assert torch.autograd.grad(loss, x)[0].abs().sum() == 0
    assert m["cov_selected_frac"] == (0.0 if name == "clip_cov" else 0.5)


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_reduction_and_padding_garbage(name, reduction):
    """Padding holding NaN/inf reaches neither loss nor gradient, under every reduction."""
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    old = logp + 0.2 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    adv = torch.randn(4, generator=g, dtype=torch.float64) * 3
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 5, 1])[:, None]
    loss_fn = get_loss(name, fraction=0.2, reduction=reduction, max_episode_tokens=8)
    clean = logp.clone().requires_grad_()
    a, _ = loss_fn(clean, old, adv, mask)
    dirty_vals, dirty_old = logp.clone(), old.clone()
    dirty_vals[~mask], dirty_old[~mask] = float("nan"), float("inf")
    dirty = dirty_vals.requires_grad_()
    b, m = loss_fn(dirty, dirty_old, adv, mask)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(torch.autograd.grad(a, clean)[0], torch.autograd.grad(b, dirty)[0])
    assert all(math.isfinite(v) for v in m.values())


@pytest.mark.parametrize("name,kwargs,match", [("clip_cov", {"fraction": 1.5}, "fraction"), ("clip_cov", {"cov_low": 5, "cov_high": 1}, "cov_low"), ("kl_cov", {"cov_kl_coef": -1}, "cov_kl_coef")])  # fmt: skip
def test_bad_options_are_refused(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        get_loss(name, **kwargs)
