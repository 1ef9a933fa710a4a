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
* ``gigpo``: GiGPO; the episode estimator plus a turn-level advantage relative to the turns
  of the group that start from the same exact env state (:mod:`forkgym.agents.advantages.gigpo`).
"""

from __future__ import annotations

import torch

from ..run.config import TrainConfig
from . import gigpo, ppo, raft, vine  # noqa: F401 - register "gigpo", "ppo", "raft" and "vine"
from .base import ALGORITHMS, Advantages, Algorithm
from .critic_free import CriticFree

__all__ = ["ALGORITHMS", "Advantages", "Algorithm", "CriticFree", "build_algorithm"]


def build_algorithm(config: TrainConfig, model: torch.nn.Module) -> Algorithm:
    """The configured algorithm for the policy ``model`` (which a critic may copy)."""
    return ALGORITHMS.build(config.algorithm, config=config, model=model, **config.algorithm_kwargs)
