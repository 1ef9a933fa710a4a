"""CISPO (MiniMax-M1, Chen et al. 2025, arXiv:2506.13585, the CISPO objective, eq. 4-5).

Clip the importance weight, not the update. With ``r = pi / pi_old`` per token and
``w = clip(r, 1 - eps_low, 1 + eps_high)``, the term is ``-sg(w) * A * log pi``: every token
keeps the policy gradient ``-w A grad log pi``, a clipped one with a bounded weight instead of
none, as PPO's clip gives it. The paper sets no lower bound (``eps_low = 1``: weights in
``[0, 1 + eps_high]``) and tunes only ``eps_high``; its objective is normalised by all tokens
of the batch (``token_mean``).
"""

from __future__ import annotations

from typing import Any

import torch

from .losses import PolicyLoss, register_loss

__all__ = ["CISPO", "clip_bounds"]


def clip_bounds(eps_low: float, eps_high: float, *, low_max: float) -> tuple[float, float]:
    """(eps_low, eps_high) as floats, refused unless 0 <= eps_low <= low_max, eps_high >= 0."""
    if not (0 <= eps_low <= low_max and eps_high >= 0):
        raise ValueError(
            f"need 0 <= eps_low <= {low_max} and eps_high >= 0, got {eps_low}, {eps_high}"
        )
    return float(eps_low), float(eps_high)


@register_loss("cispo")
class CISPO(PolicyLoss):
    """term = -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi (arXiv:2506.13585, eq. 4-5).

    Options: ``eps_low`` (default 1.0: no lower bound, as in the paper), ``eps_high``
    (default 0.28). Metrics: ``weight_clip_frac`` (tokens whose weight was clipped, either
    side), ``clip_frac_low`` (r < 1 - eps_low), ``clip_frac_high`` (r > 1 + eps_high), each
    as a fraction of action tokens whatever the advantage's sign: a clipped weight still
    carries gradient, so the sign does not decide whether a token learns.
    """

    default_reduction = "token_mean"

    def __init__(self, eps_low: float = 1.0, eps_high: float = 0.28, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eps_low, self.eps_high = clip_bounds(eps_low, eps_high, low_max=1.0)

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        ratio = log_ratio.detach().exp()  # exactly 1 off the mask
        lo, hi = 1.0 - self.eps_low, 1.0 + self.eps_high
        weight = ratio.clamp(lo, hi)
        low, high = ratio < lo, ratio > hi
        terms = torch.where(mask, logprobs, 0.0) * (-weight * adv)
        extra = {"clip_frac_low": low, "clip_frac_high": high, "weight_clip_frac": low | high}
        return terms, extra
