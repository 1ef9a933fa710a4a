"""Per-batch diagnostics of critic-free training (docs/design.md, S8, S20), as plain float dicts.

What the seed asks every run to show: how many groups carry any signal (all-correct,
all-wrong, mixed, under-filled by infrastructure failures), what generation cost versus what
was trained on, how reward dispersion is distributed, and whether advantages and losses
depend on group size, response length or reward std. Every fraction names its denominator in
its key (``..._of_groups``); stratified entries carry their own ``count``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..generation.ledger import GenerationLedger

__all__ = [
    "batch_diagnostics",
    "group_outcome_fractions",
    "reward_std_distribution",
    "sequence_losses",
    "stratify",
]

DEFAULT_LENGTH_EDGES: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
DEFAULT_STD_EDGES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5)


def _valid(rewards: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    if valid is None:
        return torch.ones_like(rewards, dtype=torch.bool)
    if valid.shape != rewards.shape:
        raise ValueError(f"valid {tuple(valid.shape)} != rewards {tuple(rewards.shape)}")
    return valid.to(torch.bool)


def group_outcome_fractions(
    rewards: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    correct: torch.Tensor | None = None,
    success: float = 1.0,
) -> dict[str, float]:
    """Partition of the batch's groups, as fractions of all groups (S8).

    ``under_filled``: fewer than 2 valid members (infrastructure failures); the others are
    ``all_correct``, ``all_wrong`` or ``mixed`` by correctness of their valid members.
    ``correct [P, K]`` should come from statuses; without it a response is correct when its
    reward is ``>= success``. ``all_equal_reward`` counts groups whose valid rewards are all
    equal (no signal for any group estimator) and may exceed all-correct + all-wrong when
    rewards are not binary.
    """
    v = _valid(rewards, valid)
    r = rewards.detach().to(torch.float64)
    c = (r >= success) if correct is None else correct.to(torch.bool)
    c = c & v
    n = v.sum(1)
    nc = c.sum(1)
    under = n < 2
    all_correct = ~under & (nc == n)
    all_wrong = ~under & (nc == 0)
    mixed = ~under & ~all_correct & ~all_wrong
    hi = torch.where(v, r, -math.inf).amax(1)
    lo = torch.where(v, r, math.inf).amin(1)
    equal = ~under & (hi == lo)
    p = max(r.size(0), 1)
    out = {
        "groups": float(r.size(0)),
        "all_correct_of_groups": float(all_correct.sum()) / p,
        "all_wrong_of_groups": float(all_wrong.sum()) / p,
        "mixed_of_groups": float(mixed.sum()) / p,
        "under_filled_of_groups": float(under.sum()) / p,
        "all_equal_reward_of_groups": float(equal.sum()) / p,
        "with_infra_failure_of_groups": float((~v).any(1).sum()) / p,
        "infra_failed_of_responses": float((~v).sum()) / max(v.numel(), 1),
    }
    return out


def _group_std(rewards: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(population std of valid rewards per group [P], groups with >= 2 valid members [P])."""
    r = torch.where(valid, rewards.detach().to(torch.float64), 0.0)
    n = valid.sum(1).to(torch.float64)
    mean = r.sum(1) / n.clamp(min=1)
    hi = torch.where(valid, r, -math.inf).amax(1)
    lo = torch.where(valid, r, math.inf).amin(1)
    var = torch.where(valid, r - mean[:, None], 0.0).square().sum(1) / n.clamp(min=1)
    std = torch.where(hi == lo, 0.0, var.sqrt())  # exact zero for all-equal groups
    return std, n >= 2


def reward_std_distribution(
    rewards: torch.Tensor,
    valid: torch.Tensor | None = None,
    quantiles: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 0.9),
) -> dict[str, float]:
    """Distribution of the within-group reward std over groups with >= 2 valid members."""
    v = _valid(rewards, valid)
    std, filled = _group_std(rewards, v)
    s = std[filled]
    out = {"reward_std_groups": float(s.numel())}
    if s.numel() == 0:
        return out
    out["reward_std_mean"] = float(s.mean())
    out["reward_std_zero_of_groups"] = float((s == 0).double().mean())
    qs = torch.quantile(s, torch.tensor(list(quantiles), dtype=torch.float64))
    for q, val in zip(quantiles, qs.tolist(), strict=True):
        out[f"reward_std_p{round(q * 100):02d}"] = val
    return out


def stratify(
    values: torch.Tensor, labels: torch.Tensor, names: Sequence[str], prefix: str
) -> dict[str, float]:
    """``{prefix/name/count, mean, abs_mean}`` per stratum present; no loop over items.

    ``values [N]`` float, ``labels [N]`` int in ``range(len(names))``.
    """
    if values.shape != labels.shape or values.ndim != 1:
        raise ValueError("values and labels must be 1-D and of the same length")
    k = len(names)
    x = values.detach().to(torch.float64)
    lab = labels.to(torch.int64)
    count = torch.bincount(lab, minlength=k)
    total = torch.bincount(lab, weights=x, minlength=k)
    abs_total = torch.bincount(lab, weights=x.abs(), minlength=k)
    out: dict[str, float] = {}
    for i, (c, s, a) in enumerate(
        zip(count.tolist(), total.tolist(), abs_total.tolist(), strict=True)
    ):
        if c:  # strata, a handful; never groups
            out[f"{prefix}/{names[i]}/count"] = float(c)
            out[f"{prefix}/{names[i]}/mean"] = s / c
            out[f"{prefix}/{names[i]}/abs_mean"] = a / c
    return out


def _length_buckets(lengths: torch.Tensor, edges: Sequence[int]) -> tuple[torch.Tensor, list[str]]:
    e = list(edges)
    names = [f"[{lo},{hi})" for lo, hi in zip([0, *e[:-1]], e, strict=True)] + [f"[{e[-1]},inf)"]
    idx = torch.bucketize(lengths.to(torch.int64), torch.tensor(e, dtype=torch.int64), right=True)
    return idx, names


def _std_buckets(std: torch.Tensor, edges: Sequence[float]) -> tuple[torch.Tensor, list[str]]:
    """Bucket 0 is exactly zero (all-equal groups), then (0, e1], (e1, e2], ..., (e_last, inf)."""
    e = list(edges)
    names = ["0"] + [f"({lo:g},{hi:g}]" for lo, hi in zip([0.0, *e[:-1]], e, strict=True)]
    names.append(f"({e[-1]:g},inf)")
    idx = torch.bucketize(std, torch.tensor(e, dtype=std.dtype), right=False) + 1
    return torch.where(std == 0, 0, idx), names


def sequence_losses(terms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-response mean of the loss terms over its action tokens ``[B]``, detached."""
    m = mask if mask.dtype == torch.bool else mask != 0
    t = torch.where(m, terms.detach(), torch.zeros((), dtype=terms.dtype))
    return t.sum(1) / m.sum(1).clamp(min=1).to(terms.dtype)


def batch_diagnostics(
    rewards: torch.Tensor,
    valid: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    *,
    correct: torch.Tensor | None = None,
    success: float = 1.0,
    lengths: torch.Tensor | None = None,
    losses: torch.Tensor | None = None,
    length_edges: Sequence[int] = DEFAULT_LENGTH_EDGES,
    std_edges: Sequence[float] = DEFAULT_STD_EDGES,
    ledger: GenerationLedger | None = None,
    loss_metrics: dict[str, float] | None = None,
) -> dict[str, float]:
    """Everything above for one batch, in one flat ``dict[str, float]``.

    ``advantages``, ``lengths`` (action tokens) and ``losses`` (per response, e.g.
    :func:`sequence_losses`) are ``[P, K]``; they are stratified over VALID responses by group
    size (valid members of the group), length bucket and the group's reward-std bucket.
    ``ledger`` adds sampled vs accepted tokens (``gen/``), ``loss_metrics`` the loss's clip
    fractions by direction and ratio statistics (``loss/``).
    """
    v = _valid(rewards, valid)
    out = group_outcome_fractions(rewards, v, correct=correct, success=success)
    out.update(reward_std_distribution(rewards, v))
    std, _ = _group_std(rewards, v)
    k = rewards.size(1)
    size_idx = v.sum(1, keepdim=True).expand_as(v)
    std_idx, std_names = _std_buckets(std, std_edges)
    std_idx = std_idx[:, None].expand_as(v)
    per_response = {"adv": advantages, "loss": losses}
    for what, x in per_response.items():
        if x is None:
            continue
        if x.shape != rewards.shape:
            raise ValueError(f"{what} must be [P, K] like rewards, got {tuple(x.shape)}")
        vals = x.detach()[v]
        out.update(
            stratify(vals, size_idx[v], [str(i) for i in range(k + 1)], f"{what}/by_group_size")
        )
        out.update(stratify(vals, std_idx[v], std_names, f"{what}/by_reward_std"))
        if lengths is not None:
            len_idx, len_names = _length_buckets(lengths, length_edges)
            out.update(stratify(vals, len_idx[v], len_names, f"{what}/by_length"))
    if lengths is not None:
        out["response_length_mean"] = float(lengths[v].double().mean()) if v.any() else 0.0
    if ledger is not None:
        out.update(ledger.report(prefix="gen/"))
    if loss_metrics is not None:
        out.update({f"loss/{key}": float(val) for key, val in loss_metrics.items()})
    return out
