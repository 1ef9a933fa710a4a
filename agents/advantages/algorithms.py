"""The built-in algorithms, and building the configured one.

Algorithms implement :class:`~forkgym.agents.advantages.base.Algorithm`, are registered in
:data:`ALGORITHMS` and are chosen by ``TrainConfig.algorithm``:

* ``critic_free`` (the default): a registered estimator (``TrainConfig.estimator``) maps
  response rewards to response advantages; nothing is learned besides the policy.
* ``ppo``: a learned value model and GAE over action tokens (:mod:`forkgym.agents.advantages.ppo`).
* ``raft``: rejection-sampling fine-tuning; the verified-correct responses are kept and the
  policy takes a supervised step on them (:mod:`forkgym.agents.advantages.raft`).
* ``vine``: VinePPO; Monte Carlo values of states inside each episode, from continuations
  on exact forks of the env, and segment advantages between them (:mod:`forkgym.agents.advantages.vine`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..batch import RolloutBatch, TokenBatch
from ..run.config import TrainConfig, option_problems
from . import ppo, raft, vine  # noqa: F401 - register "ppo", "raft" and "vine"
from .base import ALGORITHMS, Advantages, Algorithm
from .estimators import ESTIMATORS, get_estimator

__all__ = ["ALGORITHMS", "Advantages", "Algorithm", "CriticFree", "build_algorithm"]


def build_algorithm(config: TrainConfig, model: torch.nn.Module) -> Algorithm:
    """The configured algorithm for the policy ``model`` (which a critic may copy)."""
    return ALGORITHMS.build(config.algorithm, config=config, model=model, **config.algorithm_kwargs)


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
