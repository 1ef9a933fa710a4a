"""Generation backends by name: what serves the policy's samples during training.

The trainer builds its policy with :func:`build_policy` from ``TrainConfig.backend`` and never
imports a backend module: each entry of :data:`BACKENDS` is a factory that imports its own
module when called. After every optimizer step the trainer calls
``policy.sync_weights(model)`` with its training model; the backend decides what that costs
(nothing for a policy on the trainer's own module, a copy for a separate engine).

``transformers`` (:class:`~forkgym.agents.hf_policy.HFPolicy`): ``share_model=True`` (the
default) generates with the training module itself; ``share_model=False`` with a separate
copy that ``sync_weights`` overwrites, the shape a separate engine (vLLM) has.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from forkgym.registry import Registry

from .policy import Policy

__all__ = ["BACKENDS", "build_policy"]

BACKENDS: Registry[Callable[..., Policy]] = Registry("backend")


def build_policy(
    name: str,
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    device: str = "cpu",
    seed: int = 0,
    **options: Any,
) -> Policy:
    """The policy of backend ``name`` for the training ``model``; ``options`` are the
    backend's own (``TrainConfig.backend_kwargs``)."""
    return BACKENDS.lookup(name)(model, tokenizer, device=device, seed=seed, **options)


@BACKENDS.register("transformers")
def _transformers(
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    device: str,
    seed: int,
    share_model: bool = True,
    max_batch: int = 128,
) -> Policy:
    from .hf_policy import HFPolicy

    if not share_model:
        # a plain copy: marking its parameters requires_grad=False would send linear layers
        # down other kernels (log-probs ~1e-6 off the shared model's)
        model = copy.deepcopy(model)
    return HFPolicy(model, tokenizer, device=device, seed=seed, max_batch=max_batch)
