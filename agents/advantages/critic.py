"""Learned-critic pieces for the PPO baseline (docs/design.md, S19).

A multi-turn episode is one token stream in which only the policy's tokens are actions; tool
outputs and observations sit between turns. GAE here runs over ACTION tokens only: a
non-action token is neither a step nor a discount, and the value of the next action token is
carried across it as the bootstrap, so a tool call's result enters through the value of the
policy's next token rather than as a fake step of the policy.
"""

from __future__ import annotations

import torch

from ..learner.reductions import Normaliser, build_normaliser

__all__ = [
    "clipped_value_loss",
    "critic_group_centered",
    "explained_variance",
    "gae",
    "group_centered_rows",
    "terminal_rewards",
    "whitened",
]


def _bool(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def terminal_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` token rewards: each response's score on its LAST action token, 0 elsewhere."""
    m = _bool(mask)
    if scores.shape != m.shape[:1]:
        raise ValueError(f"scores must be [B] = [{m.size(0)}], got {tuple(scores.shape)}")
    dtype = scores.dtype if scores.is_floating_point() else torch.float64
    t = torch.arange(m.size(1), device=m.device).expand_as(m)
    last = torch.where(m, t, -1).amax(1)
    placed = torch.where(last >= 0, scores.detach().to(dtype), 0.0)
    out = torch.zeros(m.shape, dtype=dtype, device=m.device)
    return out.scatter_(1, last.clamp(min=0)[:, None], placed[:, None])


@torch.no_grad()
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the action tokens of each row.

    ``rewards, values, mask [B, T]``; each row is one episode that ends after its last token
    (bootstrap value 0). For consecutive ACTION tokens t < t' (any non-action tokens between
    them skipped): ``delta_t = r_t + gamma V_t' - V_t`` and ``A_t = delta_t + gamma lam A_t'``.
    Returns detached ``(advantages, returns = advantages + values)``, 0 off the mask.
    Rewards on non-action tokens are refused: put outcomes on the last action token
    (:func:`terminal_rewards`). The loop runs over token positions (the recursion is
    sequential in time), vectorised over the batch.
    """
    m = _bool(mask)
    if not (rewards.shape == values.shape == m.shape) or m.ndim != 2:
        raise ValueError("rewards, values and mask must share one [B, T] shape")
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    r = torch.where(m, rewards.to(values.dtype), zero)
    if (torch.where(m, zero, rewards.to(values.dtype)) != 0).any():
        raise ValueError("a reward sits on a non-action token; move it to an action token")
    v = torch.where(m, values.detach(), zero)
    adv = torch.zeros_like(v)
    next_value = torch.zeros(v.size(0), dtype=v.dtype, device=v.device)
    next_adv = torch.zeros_like(next_value)
    for t in range(v.size(1) - 1, -1, -1):
        act = m[:, t]
        delta = r[:, t] + gamma * next_value - v[:, t]
        a_t = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(act, a_t, zero)
        next_value = torch.where(act, v[:, t], next_value)  # carried across non-action tokens
        next_adv = torch.where(act, a_t, next_adv)
    returns = torch.where(m, adv + v, zero)
    return adv, returns


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float | None = 0.2,
    reduction: str = "token_mean",
    normaliser: Normaliser | None = None,
    max_episode_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped value loss ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, ±eps) - R)^2)``.

    ``clip_eps=None`` gives the plain squared error. Reduced over action tokens with a named
    reduction; pass the step's :class:`Normaliser` when there are several micro-batches.
    """
    m = _bool(mask)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    err = torch.where(m, values - returns.detach(), zero)
    loss_t = err.square()
    clipped = torch.zeros_like(m)
    if clip_eps is not None:
        old = old_values.detach()
        v_clip = old + (values - old).clamp(-clip_eps, clip_eps)
        err_c = torch.where(m, v_clip - returns.detach(), zero)
        clipped = m & (err_c.square() > loss_t)
        loss_t = torch.maximum(loss_t, err_c.square())
    if normaliser is None:
        normaliser = build_normaliser(
            reduction, m, max_episode_tokens=max_episode_tokens, distributed=False
        )
    loss = normaliser.reduce(0.5 * loss_t, m)
    n = m.sum().clamp(min=1)
    ret = returns.detach()[m].to(torch.float64)
    metrics = {
        "value_loss": float(loss.detach()),
        "value_clip_frac": float(clipped.sum() / n),
        "value_mean": float(values.detach()[m].mean()) if m.any() else 0.0,
        "return_mean": float(ret.mean()) if m.any() else 0.0,
        "explained_variance": explained_variance(ret, values.detach()[m].to(torch.float64)),
    }
    return loss, metrics


def explained_variance(returns: torch.Tensor, values: torch.Tensor) -> float | None:
    """``1 - Var(returns - values) / Var(returns)`` over matching 1-D tensors.

    None where it is undefined: fewer than two returns, or returns without variance (an
    untrained policy whose rewards are all 0; float32 rounding of equal returns included). Logged as null there, it enters no mean: a
    convention such as scikit-learn's 1.0 for a perfect fit would report a critic that learned
    nothing as a perfect one.
    """
    if returns.numel() < 2:
        return None
    returns, values = returns.double(), values.double()
    total = returns.var(unbiased=False)
    # returns rebuilt in float32 as advantage + value (GAE) differ by rounding when every
    # reward is equal: a variance at that level is none, not a denominator
    scale = float(returns.abs().max()) ** 2
    if total <= 1e-10 * max(scale, 1.0):
        return None
    residual = (returns - values).var(unbiased=False)
    return float(1.0 - residual / total)


def critic_group_centered(
    token_advantages: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    valid: torch.Tensor | None = None,
    *,
    mode: str = "loo",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Critic advantages with an extra group centering ("critic + group centering" hybrid).

    Rows are grouped as ``[P * K]`` with ``K = group_size`` (prompt-major, like the
    estimators' ``[P, K]``). Let ``c_j`` be the mean GAE advantage over the action tokens of
    response j. Each action token of response i gets ``A_it - b_i`` with

    * ``mode="loo"``: ``b_i = mean_{j != i} c_j`` over the valid responses of i's group;
    * ``mode="mean"``: ``b_i = mean_j c_j`` including i itself.

    Bias, stated: GAE is itself biased whenever ``lam < 1`` or the critic is wrong; the
    centering adds to that as follows. With ``"loo"``, ``b_i`` depends only on the other
    responses, which are sampled independently of response i given the prompt, so
    ``E[b_i * grad log pi(y_i | x)] = 0``: NO extra bias, provided every token of i is
    weighted by a constant that does not depend on response i (``seq_sum``,
    ``dr_grpo_constant``). Under ``seq_mean_token_mean`` (weight 1/L_i) or ``token_mean``
    (weight 1/sum L) the weights depend on the sampled lengths and the term
    ``E[b_i * w(y_i) * grad log pi(y_i | x)]`` is generally non-zero. With ``"mean"`` the
    baseline contains ``c_i / K``, an action-dependent term (S2): the estimator gains the extra
    term ``-(1/K) E[c_i * grad log pi(y_i | x)]``, generally non-zero, whatever the reduction.

    Invalid responses (``valid [P, K]`` False) get 0 and enter no baseline; responses of
    groups with fewer than 2 valid members keep their plain GAE advantages (no baseline).
    """
    if mode not in ("loo", "mean"):
        raise ValueError(f"mode must be 'loo' or 'mean', got {mode!r}")
    m = _bool(mask)
    b, _ = m.shape
    if group_size < 2 or b % group_size:
        raise ValueError(f"{b} rows cannot form groups of {group_size} (need K >= 2)")
    p = b // group_size
    has = m.any(1).view(p, group_size)
    v = has if valid is None else has & valid.to(torch.bool).view(p, group_size)
    zero = torch.zeros((), dtype=token_advantages.dtype, device=token_advantages.device)
    a = torch.where(m, token_advantages.detach(), zero)
    c = (a.sum(1) / m.sum(1).clamp(min=1)).view(p, group_size).to(torch.float64)
    c = torch.where(v, c, 0.0)
    n = v.sum(1, keepdim=True).to(torch.float64)
    total = c.sum(1, keepdim=True)
    others = (total - c) / (n - 1).clamp(min=1)  # leave-one-out
    base = others if mode == "loo" else total / n.clamp(min=1)
    base = torch.where(v & (n >= 2), base, 0.0).view(b, 1).to(a.dtype)
    out = torch.where(m & v.view(b, 1), a - base, zero)
    stats = {
        "groups_under_filled": float((n < 2).sum()),
        "baseline_abs_mean": float(base.abs().mean()) if b else 0.0,
    }
    return out, stats


def group_centered_rows(
    adv: torch.Tensor,
    action_mask: torch.Tensor,
    index: torch.Tensor,
    valid: torch.Tensor,
    *,
    mode: str = "loo",
) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`critic_group_centered` for the rows of a token batch (``adv``, ``action_mask``
    ``[N, T]``, row ``i`` at flat grid position ``index[i]`` of ``valid [P, K]``): laid out
    as the full ``[P * K]`` grid (invalid rows empty), centred, and read back."""
    rows, width = valid.numel(), adv.size(1)
    full = torch.zeros((rows, width), dtype=adv.dtype)
    full_mask = torch.zeros((rows, width), dtype=torch.bool)
    full[index], full_mask[index] = adv, action_mask
    centred, stats = critic_group_centered(full, full_mask, valid.size(1), valid, mode=mode)
    return centred[index], stats


def whitened(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Advantages shifted and scaled to zero mean and unit standard deviation over the action
    tokens of ``mask`` (0 elsewhere); a batch whose advantages are all equal becomes all 0.

    The usual PPO normalisation: it keeps the policy's step size independent of the reward's
    scale and of how far the critic is from the returns, at the price of a batch-dependent
    shift (a batch-wide baseline) and scale."""
    m = _bool(mask)
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    if int(m.sum()) < 2:
        return torch.where(m, advantages, zero)
    picked = advantages[m].double()
    mean, std = picked.mean(), picked.std(unbiased=False)
    out = (advantages.double() - mean) / (std + eps)
    return torch.where(m, out.to(advantages.dtype), zero)
