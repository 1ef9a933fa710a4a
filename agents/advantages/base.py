"""The algorithm seam: what an algorithm is asked for and what it hands the loss.

An :class:`Algorithm` sees the step's :class:`~forkgym.agents.batch.RolloutBatch` (rewards
and statuses as ``[P, K]`` grids) and :class:`~forkgym.agents.batch.TokenBatch` (the padded
rows the loss trains on), and returns :class:`Advantages`: per row (response-level, ``[N]``)
or per token (``[N, T]``, what a learned critic's GAE gives). It may own models of its own (a
value model) and train them in :meth:`Algorithm.update`, after the policy's update; what it
returns from ``update`` is logged, and its ``state_dict`` is checkpointed. It declares what
it needs from the rollouts and the run as attributes of :class:`Algorithm`, the base every
registered algorithm extends, with defaults for what it does not need (``needs_greedy``,
``token_advantages``, ``owns_model``, ``fork_values``, ``needs_states``), and checks its own
options against a configuration (:meth:`Algorithm.check`). The trainer and the configuration read those; no
code checks an algorithm's name or probes it for a member.

This module holds the seam alone (no algorithm), so the configuration can check names
against :data:`ALGORITHMS` while the algorithms read the configuration. The built-in
algorithms are registered by :mod:`forkgym.agents.advantages.algorithms`, which the package
imports.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from forkgym.registry import Registry

from ..batch import RolloutBatch, TokenBatch
from ..learner.losses import LOSSES

if TYPE_CHECKING:
    from ..generation.fork_values import ForkValues
    from ..run.config import TrainConfig

__all__ = ["ALGORITHMS", "Advantages", "Algorithm", "options_problems"]


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


class Algorithm:
    """What the trainer needs from an algorithm (see the module docstring), with the defaults
    of one that needs no greedy branch, gives one advantage per response, trains and keeps
    nothing besides the policy, and takes no options beyond its constructor's."""

    name = "base"
    needs_greedy: bool = False  # collect one greedy branch per task
    token_advantages: ClassVar[bool] = (
        False  # `advantages` gives [N, T] rows: the loss must take them
    )
    # it trains a model of its own besides the policy (a critic), which sharded data parallelism
    # does not shard yet
    owns_model: ClassVar[bool] = False
    # what generation runs on every kept batch (the states' Monte Carlo values land on the
    # episodes, their tokens in the step's cost); None: nothing
    fork_values: ForkValues | None = None
    # the rollouts record each turn's start state (RolloutBatch.turn_states): the env's exact
    # state key, which the algorithm matches across branches
    needs_states: ClassVar[bool] = False

    def __init__(
        self, config: TrainConfig, model: torch.nn.Module | None = None, **options: Any
    ) -> None:
        pass

    # -- the configuration ----------------------------------------------------------------------

    @classmethod
    def check(cls, config: TrainConfig) -> list[str]:
        """What is wrong with ``config`` for this algorithm, before any model is loaded: its
        options (``algorithm_kwargs``), and what it needs of the rest of the run."""
        options = config.algorithm_kwargs
        if not isinstance(options, dict):
            return [f"algorithm_kwargs must be a mapping, got {options!r}"]
        try:
            inspect.signature(cls).bind(config=None, model=None, **options)
        except TypeError as exc:
            return [f"algorithm_kwargs={options!r}: {exc}"]
        problems = cls.check_options(config, **options)
        if config.data_parallel == "shard" and cls.owns_model:
            problems.append(
                f"shard does not shard a second model yet: algorithm {config.algorithm!r} "
                "trains a model of its own (a critic) and needs data_parallel replicate"
            )
        loss = LOSSES.get(config.loss)
        if cls.token_advantages and loss is not None and not loss.token_advantages:
            problems.append(
                f"loss {config.loss!r} needs one advantage per response; algorithm "
                f"{config.algorithm!r} gives one per token (use ppo_clip, sapo or vanilla_pg)"
            )
        return problems

    @classmethod
    def check_options(cls, config: TrainConfig, **options: Any) -> list[str]:
        """This algorithm's own rules for its options (``[]``: none broken)."""
        return []

    # -- a step ---------------------------------------------------------------------------------

    def trains_policy(self, step: int) -> bool:
        """False on steps that train only what the algorithm owns (a critic's warm-up)."""
        return True

    def advantages(self, batch: RolloutBatch, tokens: TokenBatch) -> Advantages:
        """Advantages for the rows of ``tokens`` from the (shaped) rewards of ``batch``."""
        raise NotImplementedError

    def update(self, tokens: TokenBatch, step: int) -> dict[str, float]:
        """Train what the algorithm owns (a value model) on this step's rows; its metrics."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", name_attribute="name", base=Algorithm)


def options_problems(options_type: type, options: dict[str, Any], *context: Any) -> list[str]:
    """What is wrong with ``algorithm_kwargs`` for an algorithm whose options are the
    dataclass ``options_type`` (with a ``problems(*context)`` method); nothing: ``[]``."""
    try:
        return options_type(**options).problems(*context)
    except TypeError as exc:  # an unknown option
        return [f"algorithm_kwargs={options!r}: {exc}"]
