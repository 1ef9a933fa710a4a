"""GMPO (Zhao et al. 2025, arXiv:2507.20673, the GMPO objective, eq. 4).

The geometric mean of a response's token ratios instead of their arithmetic mean. Each
token's log ratio is clipped pessimistically for the sign of A, in log space
(``[-eps_low, eps_high]``, the paper's ``(e^-0.4, e^0.4)``), and the response's ratio is
``exp(mean_t clipped log r_t)``; the term ``-A_i * that`` is the same on every action token of
response i, so the paper's ``(1/G) sum_i`` is the ``seq_mean_token_mean`` reduction. A
geometric mean moves less than an arithmetic one when a few tokens' ratios are extreme.
"""

from __future__ import annotations

from typing import Any

import torch

from .cispo import clip_bounds
from .losses import PolicyLoss, register_loss

__all__ = ["GMPO"]


@register_loss("gmpo")
class GMPO(PolicyLoss):
    """term_i = -A_i * exp(mean_t l_t) on every action token of response i, with
    ``l_t = sgn(A) * min(sgn(A) log r_t, sgn(A) clip(log r_t, -eps_low, eps_high))``
    (arXiv:2507.20673, eq. 4; the clip is PPO's pessimism, per token, in log space).

    Options: ``eps_low``, ``eps_high`` (default 0.4 each: ratios in ``(e^-0.4, e^0.4)``).
    Advantages are per response (the ratio is). Metrics: ``clip_frac_low``/``clip_frac_high``
    (tokens whose clipped branch won, by the advantage's sign, as in ``ppo_clip``) and
    ``seq_ratio_mean`` (the responses' geometric-mean ratio).
    """

    default_reduction = "seq_mean_token_mean"
    token_advantages = False  # one ratio per response, so one advantage per response

    def __init__(self, eps_low: float = 0.4, eps_high: float = 0.4, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eps_low, self.eps_high = clip_bounds(eps_low, eps_high, low_max=float("inf"))

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        sign = torch.sign(adv)  # [B, 1]
        clipped = log_ratio.clamp(-self.eps_low, self.eps_high)
        # the pessimistic branch: for A > 0 the smaller log ratio, for A < 0 the larger
        log_r = sign * torch.minimum(sign * log_ratio, sign * clipped)
        lengths = torch.count_nonzero(mask, dim=1)[:, None].clamp(min=1).to(log_ratio.dtype)
        seq_ratio = (torch.where(mask, log_r, 0.0).sum(1, keepdim=True) / lengths).exp()
        terms = torch.where(mask, -adv * seq_ratio, 0.0)
        lr = log_ratio.detach()
        has = mask.any(1, keepdim=True)
        extra = {
            "ratio": lr.exp(),
            "clip_frac_low": (adv < 0) & (lr < -self.eps_low),
            "clip_frac_high": (adv > 0) & (lr > self.eps_high),
            "seq_ratio_mean": (seq_ratio.detach() * has).sum() / has.sum().clamp(min=1),
        }
        return terms, extra
