"""CISPO against its paper's objective (and GMPO beside it in the transcription and on-policy
tests): hand-computed examples and loop transcriptions under every reduction."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.agents.learner.losses import get_loss
from forkgym.agents.learner.reductions import REDUCTIONS
from tests.agents.learner.loss_inputs import one_response_per_row as _inputs
from tests.agents.learner.test_losses import MAX_NEW, reference_reduce

# formulas compared in floating point: CI runs them again under the scalar kernels
pytestmark = pytest.mark.float_sensitive

# ---------------------------------------------------------------------------------------------
# CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4-5): -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi


def test_cispo_hand_computed_example():
    """Ratios 0.5, 1, 1.5 with A = 2, eps 0.2 / 0.28: weights 0.8, 1, 1.28. The objective is
    (1/3) sum_t w_t A log pi_t (token_mean), and every token keeps a gradient, the clipped
    ones included: d loss / d log pi_t = -w_t A / 3."""
    x, old, adv, mask = _inputs([[math.log(0.5), 0.0, math.log(1.5)]], [2.0])
    loss, m = get_loss("cispo", eps_low=0.2, eps_high=0.28)(x, old, adv, mask)
    w = torch.tensor([0.8, 1.0, 1.28], dtype=torch.float64)
    expected = -(w * 2.0 * math.log(0.5)).sum() / 3
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(grad[0], -w * 2.0 / 3)
    assert m["clip_frac_low"] == pytest.approx(1 / 3)
    assert m["clip_frac_high"] == pytest.approx(1 / 3)
    assert m["weight_clip_frac"] == pytest.approx(2 / 3)


def test_cispo_default_has_no_lower_bound_and_clipped_tokens_still_learn():
    """The paper sets no lower bound (eps_low = 1): a ratio of 0.1 keeps its weight 0.1. Where
    every token is clipped above, PPO's gradient is 0 and CISPO's is -(1 + eps_high) A / n."""
    x, old, adv, mask = _inputs([[math.log(0.1), math.log(3.0), math.log(4.0)]], [1.0])
    loss, m = get_loss("cispo")(x, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(grad[0], -torch.tensor([0.1, 1.28, 1.28], dtype=torch.float64) / 3)
    assert m["clip_frac_low"] == 0.0 and m["weight_clip_frac"] == pytest.approx(2 / 3)
    x2, old2, adv2, mask2 = _inputs([[math.log(3.0), math.log(4.0)]], [1.0])
    ppo, _ = get_loss("ppo_clip")(x2, old2, adv2, mask2)
    assert torch.autograd.grad(ppo, x2)[0].abs().sum() == 0  # PPO: every token frozen
    cispo, m2 = get_loss("cispo")(x2, old2, adv2, mask2)
    torch.testing.assert_close(torch.autograd.grad(cispo, x2)[0][0], torch.full((2,), -1.28 / 2, dtype=torch.float64))  # fmt: skip
    assert m2["weight_clip_frac"] == 1.0


def test_cispo_zero_advantage_is_zero_loss_and_gradient():
    x, old, adv, mask = _inputs([[0.3, -0.2]], [0.0])
    loss, _ = get_loss("cispo")(x, old, adv, mask)
    assert loss.item() == 0.0
    assert torch.autograd.grad(loss, x)[0].abs().sum() == 0


# ---------------------------------------------------------------------------------------------
# Both, against loop transcriptions under every reduction, and on-policy


def _reference(name, logp, old, adv, mask, eps_low, eps_high):
    seqs = []
    for i in range(logp.size(0)):
        toks = [t for t in range(logp.size(1)) if mask[i, t]]
        if not toks:
            continue
        a = adv[i]
        if name == "cispo":
            terms = []
            for t in toks:
                r = (logp[i, t] - old[i, t]).exp().detach()
                w = min(max(r.item(), 1 - eps_low), 1 + eps_high)
                terms.append(-w * a * logp[i, t])
        else:
            logs = []
            for t in toks:
                lr = logp[i, t] - old[i, t]
                c = lr.clamp(-eps_low, eps_high)
                logs.append(torch.minimum(lr, c) if a > 0 else torch.maximum(lr, c) if a < 0 else lr * 0)  # fmt: skip
            s = torch.exp(sum(logs) / len(toks))
            terms = [-a * s for _ in toks]
        seqs.append(terms)
    return seqs


@pytest.mark.parametrize("name,eps", [("cispo", (0.3, 0.2)), ("gmpo", (0.15, 0.2))])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("seed", range(3))
def test_matches_a_transcription_of_the_formula(name, eps, reduction, seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 7
    logp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    old = logp + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    adv[1] = 0.0
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    x = logp.clone().requires_grad_()
    loss_fn = get_loss(name, eps_low=eps[0], eps_high=eps[1], reduction=reduction, max_episode_tokens=MAX_NEW)  # fmt: skip
    loss, _ = loss_fn(x, old, adv, mask)
    y = logp.clone().requires_grad_()
    expected = reference_reduce(_reference(name, y, old, adv, mask, *eps), reduction)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(
        torch.autograd.grad(loss, x)[0], torch.autograd.grad(expected, y)[0], rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("name", ["cispo", "gmpo"])
def test_on_policy_each_is_the_policy_gradient(name):
    """At pi = pi_old every weight is 1 (CISPO) and every ratio 1 (GMPO): the gradient is
    REINFORCE's under the loss's own reduction."""
    g = torch.Generator().manual_seed(4)
    logp = -torch.rand(4, 6, generator=g, dtype=torch.float64)
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 3:] = False
    loss_fn = get_loss(name)
    x = logp.clone().requires_grad_()
    got = torch.autograd.grad(loss_fn(x, logp, adv, mask)[0], x)[0]
    y = logp.clone().requires_grad_()
    pg = get_loss("vanilla_pg", reduction=loss_fn.reduction)(y, logp, adv, mask)[0]
    torch.testing.assert_close(got, torch.autograd.grad(pg, y)[0])


@pytest.mark.parametrize("name,kwargs", [("cispo", {"eps_low": 1.5}), ("cispo", {"eps_high": -0.1}), ("gmpo", {"eps_low": -1.0})])  # fmt: skip
def test_bad_options_are_refused(name, kwargs):
    with pytest.raises(ValueError, match="eps_low"):
        get_loss(name, **kwargs)
