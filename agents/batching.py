"""Episodes to padded training tensors, split into micro-batches.

Sequences are right-padded; ``action_mask`` marks the tokens the policy generated (the only
ones in the loss) and ``old_logprobs`` holds their behaviour log-probs, aligned with
``input_ids`` (entry t belongs to token t). Advantages are per sequence: broadcasting to
tokens happens in the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .rollout import Episode

__all__ = ["MicroBatch", "micro_batches"]


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    action_mask: torch.Tensor  # [B, T] bool
    old_logprobs: torch.Tensor  # [B, T] float32, 0 off the action mask
    advantages: torch.Tensor  # [B]

    @property
    def tokens(self) -> int:
        return int(self.action_mask.sum())


def micro_batches(
    episodes: Sequence[Episode],
    advantages: Sequence[float],
    *,
    size: int,
    pad_id: int,
    device: str | torch.device = "cpu",
) -> list[MicroBatch]:
    """Pad ``episodes`` into micro-batches of at most ``size`` sequences (order kept)."""
    out = []
    for start in range(0, len(episodes), size):
        chunk = episodes[start : start + size]
        width = max(len(ep.token_ids) for ep in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        action = torch.zeros((len(chunk), width), dtype=torch.bool)
        old = torch.zeros((len(chunk), width), dtype=torch.float32)
        for row, ep in enumerate(chunk):
            n = len(ep.token_ids)
            ids[row, :n] = torch.tensor(ep.token_ids, dtype=torch.long)
            attention[row, :n] = 1
            action[row, :n] = torch.tensor(ep.action_mask, dtype=torch.bool)
            old[row, :n] = torch.tensor(ep.logprobs, dtype=torch.float32)
        adv = torch.tensor(list(advantages[start : start + size]), dtype=torch.float32)
        out.append(
            MicroBatch(
                ids.to(device),
                attention.to(device),
                action.to(device),
                old.to(device),
                adv.to(device),
            )
        )
    return out
