"""Passes over a step's rows: mini-batches, micro-batches, one normaliser and one optimizer
step each, shared by every update (the policy's, a critic's).

:func:`optimizer_steps` yields, per optimizer step, its micro-batches and the normaliser built
once from all of them (docs/design.md, invariant 11); the caller runs forward and backward on
each micro-batch and then :func:`clip_and_step`. A mini-batch without a single action token
(every row masked out) is skipped: there is nothing to learn from it, and an optimizer step
on zero gradients would still move the weights through momentum and weight decay.
:class:`MetricMeans` averages what the micro-batches report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.distributed as dist

from ..batch import MicroBatch, TokenBatch
from ..distributed import World
from .reductions import Normaliser, build_normaliser

__all__ = ["MetricMeans", "clip_and_step", "optimizer_steps", "sync_gradients"]


def optimizer_steps(
    tokens: TokenBatch,
    advantages: torch.Tensor | None,
    *,
    epochs: int,
    minibatches: int,
    shuffle_key: Callable[[int], tuple[int | str, ...] | None],
    micro_batch_size: int,
    device: str | torch.device,
    reduction: str,
    max_episode_tokens: int | None = None,
) -> Iterator[tuple[int, list[MicroBatch], Normaliser]]:
    """``(epoch, micro-batches, normaliser)`` for each optimizer step of ``epochs`` passes.

    ``shuffle_key(epoch)`` keys that pass's row order (``None``: in order), so the order is a
    function of the key and a resumed run repeats it.
    """
    for epoch in range(epochs):
        for rows in tokens.minibatches(minibatches, shuffle_key(epoch)):
            micros = tokens.micro_batches(rows, advantages, size=micro_batch_size, device=device)
            norm = build_normaliser(
                reduction, [mb.action_mask for mb in micros], max_episode_tokens=max_episode_tokens
            )
            if norm.tokens:
                yield epoch, micros, norm


def sync_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Sum the gradients over the ranks of ``torch.distributed`` (a no-op without it).

    Data parallelism: every rank ran its own rows under the step's global normaliser, so each
    rank's loss is its share of one global loss and the sum of the ranks' gradients is that
    loss's gradient; every rank then clips the same norm and takes the same optimizer step.
    One flat all-reduce (a parameter without a gradient on some rank counts as zeros there).
    """
    if World.current().size == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, g in zip(parameters, grads, strict=True):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def clip_and_step(
    parameters: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    max_norm: float,
    *,
    sharded: bool = False,
) -> float:
    """Sum gradients over data-parallel ranks, clip to ``max_norm``, step, clear; the norm
    before clipping. ``sharded``: FSDP2 shards (the learner knows), whose gradients their
    reduce-scatter summed already and whose norm is a DTensor."""
    parameters = [p for p in parameters if p.requires_grad]
    if not sharded:
        sync_gradients(parameters)
    total = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    norm = float(total.full_tensor() if sharded else total)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


class MetricMeans:
    """Averages of micro-batch metrics over an update.

    Keys in ``per_step`` are sums over an optimizer step's micro-batches (a loss under the
    step's normaliser) and are averaged over optimizer steps; keys in ``per_epoch`` are counts
    that every pass repeats and are averaged over passes; every other key is a mean over
    action tokens, weighted by each micro-batch's tokens.
    """

    def __init__(self, per_step: frozenset[str], per_epoch: frozenset[str] = frozenset()) -> None:
        self.per_step, self.per_epoch = per_step, per_epoch
        self._sums: Counter[str] = Counter()
        self._weight = 0.0

    def add(self, metrics: dict[str, float], tokens: float) -> None:
        for key, value in metrics.items():
            plain = key in self.per_step or key in self.per_epoch
            self._sums[key] += value * (1.0 if plain else tokens)
        self._weight += tokens

    def result(self, steps: int, epochs: int) -> dict[str, float]:
        out = {}
        for key, value in self._sums.items():
            if key in self.per_epoch:
                out[key] = value / epochs
            elif key in self.per_step:
                out[key] = value / steps
            else:
                out[key] = value / max(self._weight, 1.0)
        return out
