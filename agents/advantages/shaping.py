"""Reward shaping: response-level terms added to the env's rewards before the algorithm.

The environment owns the reward of an outcome (its status through its reward map). Two
optional terms change what the algorithm is given, and are logged apart so the env's reward
stays readable (``reward_mean`` is always the env's):

* DAPO's soft overlong punishment (``overlong_buffer > 0``): 0 up to ``max_length -
  overlong_buffer`` generated tokens, then down linearly to -1 at ``max_length`` (the
  episode's generation budget unless ``overlong_max_tokens`` says otherwise). Applied to the
  greedy branch too, so a ReMax baseline is on the same scale.
* KL to the reference in the reward (``kl_in_reward``): ``kl_coef * sum_t k(t)`` over each
  response's action tokens, from the behaviour log-probs, subtracted before the estimator
  (then centred and scaled with the reward), instead of added to the loss. The greedy branch
  gets no KL term: it is generated at temperature 1, not at the sampling temperature the
  penalty is measured at, so a ReMax baseline shifts by the sampled responses' mean penalty
  (an action-independent shift: no bias in the gradient).

Invalid entries (infrastructure failures) are never touched: they carry no reward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from ..batch import RolloutBatch, TokenBatch
from ..generation.dapo import apply_overlong_penalty
from ..learner.losses import kl_reward_penalty
from ..run.config import TrainConfig

__all__ = ["RewardShaping"]


class RewardShaping:
    """The configured shaping terms; the identity (the same batch back) when none is on."""

    def __init__(
        self,
        config: TrainConfig,
        reference: Callable[[TokenBatch], torch.Tensor] | None,
        *,
        max_episode_tokens: int,
    ) -> None:
        """``reference(tokens) -> [N, T]``: the reference model's log-probs of the rows (for
        KL in the reward); ``max_episode_tokens``: the episode's generation budget
        (``max_new_tokens`` per turn times the environment's turns)."""
        if config.kl_in_reward and reference is None:
            raise ValueError("kl_in_reward needs the reference model's log-probs")
        self.config = config
        self.reference = reference
        self.max_length = config.overlong_max_tokens or max_episode_tokens
        if config.overlong_buffer > self.max_length:
            raise ValueError(
                f"overlong_buffer={config.overlong_buffer} exceeds the length it counts back "
                f"from ({self.max_length} tokens)"
            )

    @property
    def active(self) -> bool:
        return bool(self.config.overlong_buffer) or self.config.kl_in_reward

    def __call__(
        self, batch: RolloutBatch, tokens: TokenBatch
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch with shaped ``rewards`` (and ``greedy_rewards``), and what was added."""
        if not self.active:
            return batch, {}
        config = self.config
        rewards, greedy = batch.rewards, batch.greedy_rewards
        metrics: dict[str, float] = {}
        valid = batch.valid
        if config.overlong_buffer:
            shape = {"max_length": self.max_length, "cache_length": config.overlong_buffer}
            rewards = apply_overlong_penalty(rewards, batch.lengths, valid, **shape)
            pen = torch.where(valid, rewards - batch.rewards, 0.0)
            metrics["shaping/overlong_penalty_mean"] = _mean(pen, valid)
            metrics["shaping/overlong_penalized_of_responses"] = _mean((pen < 0).double(), valid)
            if greedy is not None and batch.greedy_lengths is not None:
                greedy = apply_overlong_penalty(
                    greedy[:, None], batch.greedy_lengths[:, None], batch.greedy_valid[:, None], **shape
                ).squeeze(1)  # fmt: skip
        if config.kl_in_reward and len(tokens):
            assert self.reference is not None
            ref = self.reference(tokens)
            per_row = kl_reward_penalty(
                tokens.old_logprobs,
                ref,
                tokens.action_mask,
                coef=config.kl_coef,
                kind=config.kl_estimator,
            )
            pen = tokens.to_grid(per_row.to(torch.float64), rewards.shape)
            rewards = rewards - pen
            metrics["shaping/kl_penalty_mean"] = _mean(pen, valid)
        return replace(batch, rewards=rewards, greedy_rewards=greedy), metrics


def _mean(values: torch.Tensor, valid: torch.Tensor) -> float:
    return float(values[valid].mean()) if valid.any() else 0.0
