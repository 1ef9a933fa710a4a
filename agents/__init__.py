"""Policies, group rollouts, critic-free estimators, token losses and the trainer.

Agents consume :class:`~forkgym.verifiers.Outcome` objects: infrastructure statuses
(``timeout``, ``error``) carry no reward and never enter a baseline or a loss.
"""

if __name__ != "forkgym.agents":  # imported as a top-level `agents` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.agents; install forkgym "
        "(`pip install -e .`) and import forkgym.agents instead of `agents`"
    )

# importing the package registers every built-in part (the configuration checks names
# against the registries)
from .advantages.algorithms import ALGORITHMS
from .advantages.estimators import ESTIMATORS, get_estimator
from .batch import rewards_from_outcomes, valid_from_statuses
from .generation.backends.registry import BACKENDS
from .learner import cispo, covariance, gmpo  # noqa: F401  (registers their losses)
from .learner.losses import LOSSES, get_loss, kl_estimate, kl_reward_penalty
from .learner.reductions import REDUCTIONS, Normaliser, build_normaliser, reduce_tokens
from .learner.schedules import LR_SCHEDULES

__all__ = [
    "ALGORITHMS",
    "BACKENDS",
    "ESTIMATORS",
    "LOSSES",
    "LR_SCHEDULES",
    "REDUCTIONS",
    "Normaliser",
    "build_normaliser",
    "get_estimator",
    "get_loss",
    "kl_estimate",
    "kl_reward_penalty",
    "reduce_tokens",
    "rewards_from_outcomes",
    "valid_from_statuses",
]
