"""DAPO's parts (Yu et al. 2025; docs/design.md S10, S16): dynamic sampling's filter, the
soft overlong punishment and overlong filtering.

Dynamic sampling keeps only groups whose valid rewards differ (all-equal groups give zero
advantage under every group estimator). It changes the training distribution and it costs
rollouts, so every filter call is recorded in a :class:`~forkgym.agents.generation.ledger.GenerationLedger`,
which reports the tokens generated, not only the tokens trained on.
"""

from __future__ import annotations

import math

import torch

from .ledger import GenerationLedger

__all__ = [
    "apply_overlong_penalty",
    "filter_groups",
    "groups_with_signal",
    "mask_truncated",
    "overlong_penalty",
]


def groups_with_signal(rewards: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """``[P]`` bool: at least 2 valid members whose rewards are not all equal (exact compare)."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [prompt, rollout], got {tuple(rewards.shape)}")
    if valid is None:
        valid = torch.ones_like(rewards, dtype=torch.bool)
    r = rewards.detach().to(torch.float64)
    hi = torch.where(valid, r, -math.inf).amax(1)
    lo = torch.where(valid, r, math.inf).amin(1)
    return (valid.sum(1) >= 2) & (hi != lo)


def filter_groups(
    rewards: torch.Tensor,
    valid: torch.Tensor | None,
    lengths: torch.Tensor,
    ledger: GenerationLedger | None = None,
    *,
    greedy_lengths: torch.Tensor | None = None,
    room: int | None = None,
) -> torch.Tensor:
    """DAPO dynamic sampling: ``[P]`` bool of the groups to keep (those with signal).

    ``room``: at most this many are kept (the first ones with signal); the rest are discarded
    like groups without signal, so the ledger never counts a group as accepted that the step
    does not train on. Records the round in ``ledger``: every sampled token counts, kept or
    not. Keep calling with fresh groups until enough are kept; the ledger then states the
    true cost.
    """
    keep = groups_with_signal(rewards, valid)
    if room is not None:
        keep &= keep.cumsum(0) <= room
    if ledger is not None:
        ledger.record(lengths, keep, valid=valid, greedy_lengths=greedy_lengths)
    return keep


def overlong_penalty(lengths: torch.Tensor, max_length: int, cache_length: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), float64, same shape.

    0 up to ``max_length - cache_length`` tokens, then falling linearly to -1 at
    ``max_length``, and -1 beyond.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"need 0 < cache_length <= max_length, got {cache_length}, {max_length}")
    n = lengths.to(torch.float64)
    start = float(max_length - cache_length)
    ramp = (start - n) / float(cache_length)
    return torch.where(n <= start, 0.0, torch.where(n <= max_length, ramp, -1.0))


def apply_overlong_penalty(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    max_length: int,
    cache_length: int,
) -> torch.Tensor:
    """Rewards (float64) plus the soft penalty on valid entries; invalid entries untouched."""
    pen = overlong_penalty(lengths, max_length, cache_length)
    r = rewards.detach().to(torch.float64)
    if valid is None:
        return r + pen
    return torch.where(valid, r + pen, r)


def mask_truncated(
    mask: torch.Tensor,
    truncated: torch.Tensor,
    rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DAPO overlong filtering: drop truncated responses from the loss, not from the books.

    Returns the action mask with truncated rows zeroed (they then count as no sequence in
    every reduction) and stats that keep them visible: how many, how many tokens left the
    loss, and their mean reward (``rewards [B]``, optional; the key is absent when nothing
    was truncated). Their rewards still enter the
    estimator's group statistics; only their gradient is removed.
    """
    if mask.ndim != 2 or truncated.shape != mask.shape[:1]:
        raise ValueError("expected mask [B, T] and truncated [B]")
    tr = truncated.to(torch.bool)
    bmask = mask if mask.dtype == torch.bool else mask != 0
    new = bmask & ~tr[:, None]
    stats = {
        "truncated_responses": float(tr.sum()),
        "truncated_fraction": float(tr.float().mean()) if tr.numel() else 0.0,
        "truncated_tokens_masked": float((bmask & tr[:, None]).sum()),
    }
    if rewards is not None and tr.any():
        stats["truncated_reward_mean"] = float(rewards.detach().to(torch.float64)[tr].mean())
    return new, stats
