"""Clip-Cov and KL-Cov: hold back the few tokens that drive the policy's entropy down.

Cui et al. 2025 ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv:2505.22617, section 4) show that the entropy of a softmax policy falls by about
the covariance between a token's log-probability and its advantage, and that a small fraction
of tokens with a large covariance carries most of it. Per action token t of the micro-batch,

    Cov_t = (log pi_t - mean log pi) * (A_t - mean A)

with both means over the micro-batch's N action tokens (log pi detached). Then

* ``clip_cov`` (eq. 9): PPO's clipped surrogate, except that ``max(1, floor(r N))`` tokens
  drawn at random among those PPO did not clip already and whose covariance lies in
  ``(cov_low, cov_high)`` lose their gradient (their term is 0). Paper defaults: r = 2e-4,
  bounds 1 and 5.
* ``kl_cov`` (eq. 10): the unclipped surrogate ``-r A``, plus ``kl_coef * |log r|`` on the
  ``max(1, floor(r N))`` tokens of largest covariance. Paper defaults: r = 2e-3, coefficient 1.

The means and the count are over the micro-batch (on a data-parallel rank, its share), as in
the authors' code, where the loss sees one micro-batch at a time. Clip-Cov's draw is keyed by
the micro-batch's behaviour log-probs (:func:`forkgym.agents.seeds.content_generator`), so a
run is reproducible and the draw never depends on what ran before.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..seeds import content_generator
from .losses import PolicyLoss, PPOClip, register_loss

__all__ = ["ClipCov", "KLCov", "covariance", "selection_size"]


def covariance(logprobs: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` float64: each action token's centred log-prob times its centred advantage
    (means over the action tokens of the call); 0 off the mask."""
    n = torch.count_nonzero(mask).clamp(min=1)
    lp = torch.where(mask, logprobs.detach().to(torch.float64), 0.0)
    a = torch.where(mask, adv.detach().to(torch.float64).expand_as(lp), 0.0)
    centred = (lp - lp.sum() / n) * (a - a.sum() / n)
    return torch.where(mask, centred, 0.0)


def selection_size(fraction: float, tokens: int) -> int:
    """How many of ``tokens`` action tokens a fraction selects: ``floor(fraction * tokens)``,
    at least 1 when there is a token (the authors' rounding), 0 when there is none."""
    return 0 if tokens == 0 else max(1, math.floor(fraction * tokens))


def _fraction(value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError(f"the selected fraction must be in [0, 1], got {value}")
    return float(value)


@register_loss("clip_cov")
class ClipCov(PPOClip):
    """PPO's clipped surrogate with a random few high-covariance tokens detached (eq. 9).

    Options: ``fraction`` (r, default 2e-4), ``cov_low``/``cov_high`` (default 1 and 5: the
    covariance band a token must lie in to be drawn), and ``ppo_clip``'s ``eps_low``,
    ``eps_high``, ``dual_clip``. Metrics: ``cov_selected_frac`` (tokens detached, as a
    fraction of action tokens), ``cov_mean`` and PPO's clip fractions.
    """

    def __init__(
        self,
        fraction: float = 2e-4,
        cov_low: float = 1.0,
        cov_high: float = 5.0,
        eps_low: float = 0.2,
        eps_high: float = 0.28,
        **kwargs: Any,
    ) -> None:
        super().__init__(eps_low=eps_low, eps_high=eps_high, **kwargs)
        if cov_low >= cov_high:
            raise ValueError(f"need cov_low < cov_high, got {cov_low}, {cov_high}")
        self.fraction, self.cov_low, self.cov_high = _fraction(fraction), cov_low, cov_high

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        terms, extra = super().policy_terms(logprobs, log_ratio, adv, mask)
        cov = covariance(logprobs, adv, mask)
        clipped = extra["clip_frac_low"] | extra["clip_frac_high"]
        if isinstance(extra["clip_frac_dual"], torch.Tensor) and extra["clip_frac_dual"].ndim:
            clipped = clipped | extra["clip_frac_dual"]
        eligible = mask & ~clipped & (cov > self.cov_low) & (cov < self.cov_high)
        count = selection_size(self.fraction, int(torch.count_nonzero(mask)))
        candidates = eligible.flatten().nonzero().squeeze(1)
        behaviour = torch.where(mask, logprobs.detach() - log_ratio.detach(), 0.0)
        generator = content_generator("clip-cov", behaviour)
        order = torch.randperm(candidates.numel(), generator=generator)
        drawn = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        drawn[candidates[order[:count].to(candidates.device)]] = True
        drawn = drawn.view_as(mask)
        extra["cov_selected_frac"] = drawn
        extra["cov_mean"] = cov.sum() / torch.count_nonzero(mask).clamp(min=1)
        return torch.where(drawn, 0.0, terms), extra


@register_loss("kl_cov")
class KLCov(PolicyLoss):
    """``-r A``, plus ``kl_coef * |log r|`` on the highest-covariance tokens (eq. 10).

    Options: ``fraction`` (r, default 2e-3), ``cov_kl_coef`` (the penalty's coefficient,
    default 1; not the config's ``kl_coef``, which is the KL to a reference model).
    Metrics: ``cov_selected_frac`` (tokens penalised, as a fraction of action tokens),
    ``cov_mean``.
    """

    default_reduction = "token_mean"

    def __init__(self, fraction: float = 2e-3, cov_kl_coef: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if cov_kl_coef < 0:
            raise ValueError(f"cov_kl_coef must be >= 0, got {cov_kl_coef}")
        self.fraction, self.cov_kl_coef = _fraction(fraction), float(cov_kl_coef)

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        ratio = log_ratio.exp()
        cov = covariance(logprobs, adv, mask)
        count = selection_size(self.fraction, int(torch.count_nonzero(mask)))
        ranked = torch.where(mask, cov, -torch.inf).flatten()
        top = torch.topk(ranked, count).indices if count else ranked.new_zeros(0, dtype=torch.long)
        chosen = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        chosen[top] = True
        chosen = chosen.view_as(mask)
        penalty = torch.where(chosen, self.cov_kl_coef * log_ratio.abs(), 0.0)
        terms = torch.where(mask, -ratio * adv, 0.0) + penalty
        extra = {
            "ratio": ratio,
            "cov_selected_frac": chosen,
            "cov_mean": cov.sum() / torch.count_nonzero(mask).clamp(min=1),
        }
        return terms, extra
