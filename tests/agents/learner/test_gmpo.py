"""GMPO against its paper's objective (arXiv:2507.20673, eq. 4), by hand."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.agents.learner.losses import get_loss
from tests.agents.learner.loss_inputs import one_response_per_row as _inputs

# formulas compared in floating point: CI runs them again under the scalar kernels
pytestmark = pytest.mark.float_sensitive


def test_gmpo_hand_computed_positive_advantage():
    """log r = (0.1, 0.6), A = 1, eps 0.4: the pessimistic branch keeps 0.1 and clips 0.6 to
    0.4; the response's ratio is exp(0.25), its term -exp(0.25). The clipped token has no
    gradient, the other -exp(0.25) / 2 (seq_mean_token_mean over one response of 2 tokens)."""
    x, old, adv, mask = _inputs([[0.1, 0.6]], [1.0])
    loss, m = get_loss("gmpo")(x, old, adv, mask)
    assert loss.item() == pytest.approx(-math.exp(0.25), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(grad[0], torch.tensor([-math.exp(0.25) / 2, 0.0], dtype=torch.float64))  # fmt: skip
    assert m["clip_frac_high"] == pytest.approx(0.5) and m["clip_frac_low"] == 0.0
    assert m["seq_ratio_mean"] == pytest.approx(math.exp(0.25))


def test_gmpo_hand_computed_negative_advantage():
    """log r = (-0.1, -0.6), A = -2: pessimism takes the larger log ratio, max(-0.6, -0.4) =
    -0.4, so the ratio is exp(-0.25) and the term 2 exp(-0.25); the clipped token is inert."""
    x, old, adv, mask = _inputs([[-0.1, -0.6]], [-2.0])
    loss, m = get_loss("gmpo")(x, old, adv, mask)
    assert loss.item() == pytest.approx(2 * math.exp(-0.25), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(grad[0], torch.tensor([math.exp(-0.25), 0.0], dtype=torch.float64))
    assert m["clip_frac_low"] == pytest.approx(0.5)


def test_gmpo_is_a_geometric_not_an_arithmetic_mean():
    """Unclipped (wide eps), a response's ratio is the geometric mean of its token ratios."""
    ratios = [0.8, 1.1, 1.3]
    x, old, adv, mask = _inputs([[math.log(r) for r in ratios]], [1.0])
    loss, _ = get_loss("gmpo", eps_low=5.0, eps_high=5.0)(x, old, adv, mask)
    assert loss.item() == pytest.approx(-(math.prod(ratios) ** (1 / 3)), rel=1e-12)


def test_gmpo_refuses_token_level_advantages():
    x, old, _, mask = _inputs([[0.1, 0.2]], [1.0])
    with pytest.raises(ValueError, match="per response"):
        get_loss("gmpo")(x, old, torch.ones(1, 2, dtype=torch.float64), mask)
