"""The algorithm seam: what an algorithm is asked for and what it hands the loss.

An :class:`Algorithm` sees the step's :class:`~forkgym.agents.batch.RolloutBatch` (rewards
and statuses as ``[P, K]`` grids) and :class:`~forkgym.agents.batch.TokenBatch` (the padded
rows the loss trains on), and returns :class:`Advantages`: per row (response-level, ``[N]``)
or per token (``[N, T]``, what a learned critic's GAE gives). It may own models of its own (a
value model) and train them in :meth:`Algorithm.update`, after the policy's update; what it
returns from ``update`` is logged, and its ``state_dict`` is checkpointed. It declares what
it needs from the rollouts and the run as attributes (``needs_greedy``,
``token_advantages``, ``owns_model``, ``fork_values``), which the trainer and the
configuration read; no code checks its name.

This module holds the seam alone (no configuration, no algorithm), so the configuration can
check names against :data:`ALGORITHMS` while the algorithms read the configuration. The
built-in algorithms are registered by :mod:`forkgym.agents.advantages.algorithms`, which the package
imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from forkgym.registry import Registry

from ..batch import RolloutBatch, TokenBatch

__all__ = ["ALGORITHMS", "Advantages", "Algorithm", "OwnsNothing", "options_problems"]


@dataclass
class Advantages:
    """What an algorithm hands the loss, and what the diagnostics stratify."""

    rows: torch.Tensor  # [N] or [N, T], detached, aligned with the TokenBatch's rows
    grid: torch.Tensor  # [P, K] one number per response (0 where invalid), for diagnostics
    metrics: dict[str, float] = field(default_factory=dict)  # logged as they are named
    # [N] bool: the rows the loss trains on (None: every row). Rows left out keep their
    # place in the batch (diagnostics, the critic) but contribute no token to the loss.
    train_rows: torch.Tensor | None = None

    def trained(self, tokens: TokenBatch) -> TokenBatch:
        """The rows the loss trains on: ``tokens`` with the left-out rows' action masks
        cleared (every row when ``train_rows`` is None)."""
        if self.train_rows is None:
            return tokens
        kept = self.train_rows.to(torch.bool)[:, None]
        return tokens.with_action_mask(tokens.action_mask & kept)


@runtime_checkable
class Algorithm(Protocol):
    """What the trainer needs from an algorithm (see the module docstring)."""

    needs_greedy: bool  # collect one greedy branch per task
    token_advantages: bool  # `advantages` gives [N, T] rows: the loss must take them
    # Optional: ``owns_model = True`` when it trains a model of its own besides the policy (a
    # critic), which sharded data parallelism does not shard yet; ``fork_values``, a
    # :class:`~forkgym.agents.generation.fork_values.ForkValues` generation runs on every kept batch (the
    # states' Monte Carlo values land on the episodes, their tokens in the step's cost).

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


class OwnsNothing:
    """The :class:`Algorithm` methods of one that trains and keeps nothing besides the policy."""

    def update(self, tokens: TokenBatch, step: int) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def options_problems(options_type: type, options: dict[str, Any], *context: Any) -> list[str]:
    """What is wrong with ``algorithm_kwargs`` for an algorithm whose options are the
    dataclass ``options_type`` (with a ``problems(*context)`` method); nothing: ``[]``."""
    try:
        return options_type(**options).problems(*context)
    except TypeError as exc:  # an unknown option
        return [f"algorithm_kwargs={options!r}: {exc}"]
