"""``algorithm: critic_free`` (the default): a registered estimator over a step's ``[P, K]`` rewards."""

from __future__ import annotations

from typing import Any

import torch

from ..batch import RolloutBatch, TokenBatch
from ..run.config import TrainConfig, option_problems
from .base import ALGORITHMS, Advantages, Algorithm
from .estimators import ESTIMATORS, get_estimator

__all__ = ["CriticFree"]


@ALGORITHMS.register("critic_free")
class CriticFree(Algorithm):
    """A registered estimator over the ``[P, K]`` rewards; one advantage per response.

    Its options are the estimator's (``estimator_kwargs``); it takes no others.
    """

    @classmethod
    def check_options(cls, config: TrainConfig) -> list[str]:
        """The estimator's needs and options against the config."""
        factory = ESTIMATORS.get(config.estimator)
        if factory is None:
            return []  # an unknown name is reported with the other names
        problems = []
        if factory.needs_group and config.k < 2:
            problems.append(
                f"estimator {config.estimator!r} compares rollouts of a task and needs k >= 2"
            )
        return problems + option_problems("estimator_kwargs", factory, config.estimator_kwargs)

    def __init__(self, config: TrainConfig, model: torch.nn.Module | None = None) -> None:
        self.estimator = get_estimator(config.estimator, **config.estimator_kwargs)
        self.needs_greedy = self.estimator.needs_greedy

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        greedy = {}
        if self.needs_greedy:
            greedy = {"greedy": batch.greedy_rewards, "greedy_valid": batch.greedy_valid}
        grid, stats = self.estimator(batch.rewards, batch.valid, **greedy)
        rows = grid.reshape(-1)[tokens.index].to(torch.float32)
        return Advantages(rows, grid, {f"est/{k}": v for k, v in stats.items()})

    def state_dict(self) -> dict[str, Any]:
        return {"estimator": self.estimator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("estimator") is not None:
            self.estimator.load_state_dict(state["estimator"])
