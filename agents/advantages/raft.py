"""Rejection-sampling fine-tuning (RAFT, expert iteration): the supervised baseline of RL.

``algorithm: raft``. Sample K responses per prompt, keep the ones the verifier graded
correct, and take a supervised step on them: with the ``vanilla_pg`` loss, advantage 1 on
every kept response and the rejected rows out of the loss, the policy term is ``-log p`` of
the kept tokens, i.e. the cross-entropy of SFT on self-generated demonstrations, reduced
under the configured reduction (``token_mean``: the token-mean cross-entropy). Nothing is
learned from wrong answers; a step whose groups have no correct response trains nothing, but
its tokens were generated and count in every budget.

Options (``algorithm_kwargs``): ``max_per_prompt`` keeps at most that many correct responses
of a prompt (the first ones drawn; ``1`` is RAFT's best-of-K with a binary reward), ``None``
keeps them all (expert iteration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..batch import RolloutBatch, TokenBatch
from ..run.config import TrainConfig
from .base import ALGORITHMS, Advantages, Algorithm, options_problems

__all__ = ["RAFT", "RAFTOptions"]


@dataclass(frozen=True)
class RAFTOptions:
    max_per_prompt: int | None = None

    def problems(self) -> list[str]:
        if self.max_per_prompt is not None and self.max_per_prompt < 1:
            return [f"max_per_prompt must be >= 1 (or null: all), got {self.max_per_prompt}"]
        return []


def accepted(
    correct: torch.Tensor, valid: torch.Tensor, max_per_prompt: int | None
) -> torch.Tensor:
    """``[P, K]`` bool: the valid correct responses, at most ``max_per_prompt`` per prompt
    (the lowest branch indices, so the choice is a function of the rollouts alone)."""
    keep = correct.to(torch.bool) & valid.to(torch.bool)
    if max_per_prompt is not None:
        keep &= keep.long().cumsum(1) <= max_per_prompt
    return keep


@ALGORITHMS.register("raft")
class RAFT(Algorithm):
    """Keep the verified-correct responses; a supervised step on them."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module | None = None, **options: Any) -> None:  # fmt: skip
        self.options = RAFTOptions(**options)
        problems = self.options.problems()
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def check_options(cls, config: TrainConfig, **options: Any) -> list[str]:
        return options_problems(RAFTOptions, options)

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        keep = accepted(batch.correct, batch.valid, self.options.max_per_prompt)
        grid = keep.to(torch.float32)
        rows = grid.reshape(-1)[tokens.index]
        n_valid = int(batch.valid.sum())
        metrics = {
            "raft/accepted_responses": float(keep.sum()),
            "raft/accept_rate": float(keep.sum()) / max(n_valid, 1),
            "raft/prompts_with_accepted": float(keep.any(1).sum()),
        }
        return Advantages(rows, grid, metrics, train_rows=rows > 0)
