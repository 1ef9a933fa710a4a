"""The algorithm seam: how a step's rewards become the advantages the loss multiplies.

An :class:`Algorithm` sees the step's :class:`~forkgym.agents.batch.RolloutBatch` (rewards
and statuses as ``[P, K]`` grids) and :class:`~forkgym.agents.batch.TokenBatch` (the padded
rows the loss trains on), and returns :class:`Advantages`: per row (response-level, ``[N]``)
or per token (``[N, T]``, what a learned critic's GAE gives). It may own models of its own (a
value model) and train them in :meth:`Algorithm.update`, after the policy's update; what it
returns from ``update`` is logged, and its ``state_dict`` is checkpointed. It declares what
it needs from the rollouts (``needs_greedy``), and the trainer collects exactly that.

Algorithms are registered in :data:`ALGORITHMS` and chosen by ``TrainConfig.algorithm``:

* ``critic_free`` (the default): a registered estimator (``TrainConfig.estimator``) maps
  response rewards to response advantages; nothing is learned besides the policy.
* ``ppo``: a learned value model and GAE over action tokens (:mod:`forkgym.agents.ppo`).
* ``raft``: rejection-sampling fine-tuning; the verified-correct responses are kept and the
  policy takes a supervised step on them (:mod:`forkgym.agents.raft`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from forkgym.registry import Registry

from .batch import RolloutBatch, TokenBatch
from .config import TrainConfig, option_problems
from .estimators import ESTIMATORS, get_estimator

__all__ = ["ALGORITHMS", "Advantages", "Algorithm", "CriticFree", "build_algorithm"]


@dataclass
class Advantages:
    """What an algorithm hands the loss, and what the diagnostics stratify."""

    rows: torch.Tensor  # [N] or [N, T], detached, aligned with the TokenBatch's rows
    grid: torch.Tensor  # [P, K] one number per response (0 where invalid), for diagnostics
    metrics: dict[str, float] = field(default_factory=dict)  # logged as they are named
    # [N] bool: the rows the loss trains on (None: every row). Rows left out keep their
    # place in the batch (diagnostics, the critic) but contribute no token to the loss.
    train_rows: torch.Tensor | None = None


@runtime_checkable
class Algorithm(Protocol):
    """What the trainer needs from an algorithm (see the module docstring)."""

    needs_greedy: bool  # collect one greedy branch per task
    token_advantages: bool  # `advantages` gives [N, T] rows: the loss must take them

    # Optional: ``check(config, **options) -> list[str]``, a classmethod the config calls to
    # report bad options before any model is loaded; ``trains_policy(step) -> bool``, False on
    # steps that train only what the algorithm owns (a critic's warm-up).

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        """Advantages for the rows of ``tokens`` from the (shaped) rewards of ``batch``."""
        ...

    def update(self, tokens: TokenBatch, step: int) -> dict[str, float]:
        """Train what the algorithm owns (a value model) on this step's rows; its metrics."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", name_attribute="name")


def build_algorithm(config: TrainConfig, model: torch.nn.Module) -> Algorithm:
    """The configured algorithm for the policy ``model`` (which a critic may copy)."""
    return ALGORITHMS.build(config.algorithm, config=config, model=model, **config.algorithm_kwargs)


@ALGORITHMS.register("critic_free")
class CriticFree:
    """A registered estimator over the ``[P, K]`` rewards; one advantage per response.

    Its options are the estimator's (``estimator_kwargs``); it takes no others.
    """

    token_advantages = False

    @classmethod
    def check(cls, config: TrainConfig) -> list[str]:
        """The estimator's needs and options against the config."""
        factory = ESTIMATORS.get(config.estimator)
        if factory is None:
            return []  # an unknown name is reported with the other names
        problems = []
        if getattr(factory, "needs_group", False) and config.k < 2:
            problems.append(
                f"estimator {config.estimator!r} compares rollouts of a task and needs k >= 2"
            )
        return problems + option_problems("estimator_kwargs", factory, config.estimator_kwargs)

    def __init__(self, config: TrainConfig, model: torch.nn.Module | None = None) -> None:
        self.estimator = get_estimator(config.estimator, **config.estimator_kwargs)
        self.needs_greedy = bool(getattr(self.estimator, "needs_greedy", False))

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        greedy = {}
        if self.needs_greedy:
            greedy = {"greedy": batch.greedy_rewards, "greedy_valid": batch.greedy_valid}
        grid, stats = self.estimator(batch.rewards, batch.valid, **greedy)
        rows = grid.reshape(-1)[tokens.index].to(torch.float32)
        return Advantages(rows, grid, {f"est/{k}": v for k, v in stats.items()})

    def update(self, tokens: TokenBatch, step: int) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        state = getattr(self.estimator, "state_dict", None)
        return {"estimator": state() if state is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("estimator") is not None and hasattr(self.estimator, "load_state_dict"):
            self.estimator.load_state_dict(state["estimator"])


from . import ppo, raft  # noqa: E402, F401 - register "ppo" and "raft" (they build on this module)
