"""Sharded data parallelism (FSDP2, ``fully_shard``): each rank holds a slice of every weight,
gradient and optimizer state instead of a whole copy.

``TrainConfig.data_parallel: shard`` under ``torchrun`` shards the training model: each
decoder layer, then the root, is a ``fully_shard`` unit (NCCL on GPUs; gloo on CPUs, which is
how it is tested here). What the trainer relies on, and this module provides:

* **sums, not means**: the learner divides each rank's loss by the step's global normaliser
  already, so the ranks' gradients must be summed (as the replicated path's all-reduce does);
  FSDP's reduce-scatter is told to divide by 1;
* **the same collectives on every rank**: every forward of a sharded model all-gathers each
  layer's weights, so every rank must run as many forwards (and backwards) as the others,
  though ranks hold different numbers of rows. ``World.most`` (agents/distributed.py) agrees on the count and
  :func:`idle_pass` runs one that contributes nothing;
* **whole weights where a whole model is needed**: the generation engine, checkpoints and
  resumes see full tensors (:func:`full_state_dict`, :func:`load_full_state_dict`), and the
  optimizer's state is saved keyed by parameter name (:func:`optimizer_state`), which a
  replicated or single-process run loads as well (:func:`load_optimizer_state`), so a
  checkpoint crosses world sizes and modes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard

__all__ = [
    "full_state_dict",
    "idle_pass",
    "is_sharded",
    "load_full_state_dict",
    "load_optimizer_state",
    "optimizer_state",
    "shard_model",
]


def shard_model(model: torch.nn.Module) -> None:
    """``fully_shard`` each decoder layer and the root, in place; gradients summed."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers if layers is not None else []:
        fully_shard(layer)
    fully_shard(model)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo has no scaled sum


def is_sharded(model: torch.nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def idle_pass(model: torch.nn.Module, *, backward: bool, device: str | torch.device) -> None:
    """A forward (and backward) that takes part in the collectives and changes nothing: one
    token in, its output times zero out."""
    ids = torch.zeros((1, 1), dtype=torch.long, device=device)
    if not backward:
        with torch.no_grad():
            model(input_ids=ids)
        return
    logits = model(input_ids=ids).logits
    (logits.float().sum() * 0.0).backward()


def full_state_dict(model: torch.nn.Module, *, rank0_only: bool = False) -> dict[str, Any]:
    """Whole tensors of a sharded model (collective: every rank calls it). ``rank0_only``:
    gathered on CPU for rank 0, empty elsewhere (a checkpoint); otherwise on every rank."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=rank0_only)
    return get_model_state_dict(model, options=options)


def load_full_state_dict(model: torch.nn.Module, state: dict[str, Any]) -> Any:
    """Whole tensors (every rank has them) into a sharded or plain model; the missing and
    unexpected keys, as ``load_state_dict`` returns them."""
    options = StateDictOptions(full_state_dict=True, strict=False)
    return set_model_state_dict(model, state, options=options)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's whole state keyed by parameter name (collective under sharding; the
    state is on rank 0 only)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def _by_name(model: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """A ``torch.optim`` state dict keyed by parameter index, re-keyed by name (the index is
    the parameter's place in ``model.parameters()``, the order the optimizer was given)."""
    groups = state["param_groups"]
    if not groups or not groups[0]["params"] or isinstance(groups[0]["params"][0], str):
        return state
    names = [name for name, _ in model.named_parameters()]
    return {
        "state": {names[int(i)]: s for i, s in state["state"].items()},
        "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in groups],
    }


def load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Load either form (by name, by index) into the optimizer of a sharded or plain model."""
    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, optimizer, _by_name(model, state), options=options)
