"""Drift statistics and the train/serve corrections, on hand-made log-probs."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.agents.learner.drift import correction_weights, drift_metrics
from forkgym.agents.learner.losses import get_loss

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set

MASK = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)


def lp(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_drift_statistics_over_action_tokens_only():
    engine = lp([9.0, -1.0, -2.0, -3.0], [9.0, -1.0, -1.0, 5.0], [9.0, 9.0, 9.0, 9.0])
    trainer = lp([0.0, -1.0, -2.0, -2.5], [0.0, -1.2, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0])
    m = drift_metrics(trainer, engine, MASK)
    assert m["drift/tokens"] == 5
    assert m["drift/logprob_abs_max"] == pytest.approx(0.5)
    assert m["drift/logprob_abs_mean"] == pytest.approx((0.5 + 0.2) / 5)
    assert m["drift/ratio_max"] == pytest.approx(math.exp(0.5))
    assert m["drift/ratio_min"] == pytest.approx(math.exp(-0.2))
    assert m["drift/seq_ratio_max"] == pytest.approx(math.exp(0.5))
    assert m["drift/geo_ratio_min"] == pytest.approx(math.exp(-0.1))
    assert drift_metrics(trainer, engine, torch.zeros_like(MASK)) == {"drift/tokens": 0.0}


def test_truncated_importance_sampling_clamps_each_token_ratio():
    engine = lp([0.0, -2.0, -1.0, -1.0], [0.0, -1.0, -1.0, 0.0], [0.0] * 4)
    trainer = lp([0.0, -1.0, -1.0, -1.5], [0.0, -1.0, -0.9, 0.0], [0.0] * 4)
    w, m = correction_weights(trainer, engine, MASK, ["tis"], tis_clamp=2.0)
    expected = torch.tensor(
        [[0, 2.0, 1.0, math.exp(-0.5)], [0, 1.0, math.exp(0.1), 0], [0, 0, 0, 0]]
    )
    assert torch.allclose(w, expected)  # e^1 > 2 is clamped; ratios below 1 pass unchanged
    assert m["correction/tis_clipped_frac"] == pytest.approx(1 / 5)


def test_sequence_masks_drop_whole_sequences_outside_the_band():
    engine = lp([0.0, -1.0, -1.0, -1.0], [0.0, -1.0, -1.0, 0.0], [0.0] * 4)
    # row 0: three tokens each +0.3 (product e^0.9 = 2.46, geometric mean e^0.3 = 1.35)
    # row 1: identical
    trainer = lp([0.0, -0.7, -0.7, -0.7], [0.0, -1.0, -1.0, 0.0], [0.0] * 4)
    w, m = correction_weights(trainer, engine, MASK, ["seq_mask"], seq_band=(0.5, 2.0))
    assert w[0].sum() == 0 and torch.equal(w[1], MASK[1].float())
    assert m["correction/masked_sequences_frac"] == pytest.approx(1 / 2)
    assert m["correction/masked_tokens_frac"] == pytest.approx(3 / 5)
    # the product is inside a wide band, the geometric mean is not inside a narrow one
    w, _ = correction_weights(trainer, engine, MASK, ["seq_mask"], seq_band=(0.1, 3.0))
    assert w[0].sum() == 3
    w, _ = correction_weights(trainer, engine, MASK, ["geo_mask"], geo_band=(0.9, 1.2))
    assert w[0].sum() == 0 and w[1].sum() == 2


def test_corrections_combine_and_refuse_bad_settings():
    engine = lp([0.0, -1.0, -1.0, -1.0], [0.0, -3.0, -1.0, 0.0], [0.0] * 4)
    trainer = lp([0.0, -1.0, -1.0, -1.0], [0.0, -1.0, -1.0, 0.0], [0.0] * 4)
    w, _ = correction_weights(trainer, engine, MASK, ["tis", "geo_mask"], geo_band=(0.5, 2.0))
    assert torch.equal(w[0], MASK[0].float())
    assert w[1].sum() == 0  # e^1 geometric mean: masked, whatever the clamp did
    with pytest.raises(ValueError, match="unknown"):
        correction_weights(trainer, engine, MASK, ["icepop"])
    with pytest.raises(ValueError, match="tis_clamp"):
        correction_weights(trainer, engine, MASK, ["tis"], tis_clamp=0.5)
    with pytest.raises(ValueError, match="seq_band"):
        correction_weights(trainer, engine, MASK, ["seq_mask"], seq_band=(1.5, 2.0))


@pytest.mark.parametrize("loss_name", ["ppo_clip", "gspo", "sapo", "vanilla_pg"])
def test_weights_scale_the_policy_term_and_not_the_kl_term(loss_name):
    torch.manual_seed(0)
    logprobs = (torch.randn(3, 4) * 0.1 - 1).requires_grad_()
    old = logprobs.detach() + torch.randn(3, 4) * 0.01
    adv = torch.tensor([1.0, -0.5, 0.0])
    mask = MASK.clone()
    mask[2, 1] = True
    weights = torch.tensor([[0, 2.0, 0.5, 1], [0, 0, 1, 0], [0, 3, 0, 0]])
    loss = get_loss(loss_name, kl_coef=0.1)
    ref = logprobs.detach() - 0.05
    plain, _, extra = loss.terms(logprobs, old, adv, mask, ref_logprobs=ref)
    scaled, _, _ = loss.terms(logprobs, old, adv, mask, ref_logprobs=ref, is_weights=weights)
    kl = 0.1 * extra["kl"]
    assert torch.allclose(scaled - kl, (plain - kl) * torch.where(mask, weights, 0.0), atol=1e-6)
    assert torch.equal(scaled[~mask], torch.zeros_like(scaled[~mask]))
    with pytest.raises(ValueError, match="is_weights"):
        loss.terms(logprobs, old, adv, mask, is_weights=weights[:, :2])
