"""Dynamic sampling, generation accounting and DAPO overlong handling (docs/design.md, S4, S10, S16).

Dynamic sampling keeps only groups whose valid rewards differ (all-equal groups give zero
advantage under every group estimator). It changes the training distribution and it costs
rollouts, so every filter call is recorded in a :class:`GenerationLedger`, which reports the
tokens generated, not only the tokens trained on: a report that says "N tokens" must also say
"of M sampled".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch

__all__ = [
    "GenerationLedger",
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


@dataclass
class GenerationLedger:
    """What generation cost and what was kept, accumulated over filter rounds and steps.

    ``tokens_sampled`` counts every generated token of every sampled response (infra-failed
    ones included: they were generated); ``greedy_tokens`` is the extra cost of ReMax-style
    greedy branches (S4). ``tokens_accepted`` are the tokens of kept groups. Nothing here is
    an estimate: the caller passes the true generated lengths.
    """

    rounds: int = 0
    prompts_sampled: int = 0
    prompts_accepted: int = 0
    responses_sampled: int = 0
    responses_accepted: int = 0
    responses_infra_failed: int = 0
    tokens_sampled: int = 0
    tokens_accepted: int = 0
    greedy_responses: int = 0
    greedy_tokens: int = 0

    def record(
        self,
        lengths: torch.Tensor,
        accepted: torch.Tensor,
        *,
        valid: torch.Tensor | None = None,
        greedy_lengths: torch.Tensor | None = None,
    ) -> None:
        """Account one round: generated ``lengths [P, K]``, kept groups ``accepted [P]``."""
        if lengths.ndim != 2 or accepted.shape != lengths.shape[:1]:
            raise ValueError("expected lengths [P, K] and accepted [P]")
        lengths = lengths.to(torch.int64)
        if (lengths < 0).any():
            raise ValueError("lengths must be >= 0")
        acc = accepted.to(torch.bool)
        per_group = lengths.sum(1)
        self.rounds += 1
        self.prompts_sampled += lengths.size(0)
        self.prompts_accepted += int(acc.sum())
        self.responses_sampled += lengths.numel()
        self.responses_accepted += int(acc.sum()) * lengths.size(1)
        if valid is not None:
            self.responses_infra_failed += int((~valid.to(torch.bool)).sum())
        self.tokens_sampled += int(per_group.sum())
        self.tokens_accepted += int(per_group[acc].sum())
        if greedy_lengths is not None:
            self.greedy_responses += greedy_lengths.numel()
            self.greedy_tokens += int(greedy_lengths.to(torch.int64).sum())

    @property
    def prompts_discarded(self) -> int:
        return self.prompts_sampled - self.prompts_accepted

    @property
    def tokens_discarded(self) -> int:
        return self.tokens_sampled - self.tokens_accepted

    @property
    def tokens_generated(self) -> int:
        """Everything the generator produced: sampled plus greedy tokens."""
        return self.tokens_sampled + self.greedy_tokens

    def report(self, prefix: str = "gen/") -> dict[str, float]:
        """Counts with their denominators named; rates are over *sampled* quantities."""
        out = {f"{prefix}{k}": float(v) for k, v in asdict(self).items()}
        out[f"{prefix}prompts_discarded"] = float(self.prompts_discarded)
        out[f"{prefix}tokens_discarded"] = float(self.tokens_discarded)
        out[f"{prefix}tokens_generated"] = float(self.tokens_generated)
        out[f"{prefix}prompt_accept_rate_of_sampled"] = self.prompts_accepted / max(
            self.prompts_sampled, 1
        )
        out[f"{prefix}token_accept_rate_of_sampled"] = self.tokens_accepted / max(
            self.tokens_sampled, 1
        )
        out[f"{prefix}generated_per_accepted_token"] = (
            self.tokens_generated / self.tokens_accepted if self.tokens_accepted else math.inf
        )
        return out

    def __add__(self, other: GenerationLedger) -> GenerationLedger:
        return GenerationLedger(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


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
