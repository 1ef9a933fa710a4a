"""Named loss reductions and the once-per-optimizer-step normaliser (docs/design.md, S13, S14).

A loss is ``sum over action tokens of term[i, t]`` divided by a denominator. Which
denominator is a modelling choice, so it is always named:

=======================  =================================================================
``seq_sum``              ``sum_i sum_t term[i, t] / N``: long responses carry more terms
``seq_mean_token_mean``  ``sum_i (sum_t term[i, t] / L_i) / N``: every response weighs the same
``token_mean``           ``sum_i sum_t term[i, t] / sum_i L_i``: every token weighs the same
``dr_grpo_constant``     ``sum_i sum_t term[i, t] / (max_episode_tokens * N)``: Dr. GRPO's constant
=======================  =================================================================

``N`` counts sequences with at least one action token and ``L_i`` is the number of action
tokens of sequence i (a fully loss-masked response, e.g. an overlong one under DAPO masking,
is not a sequence of the loss). ``max_episode_tokens`` is the generation budget, a true constant:
never the padded width of a batch, which changes with the batch.

Why a :class:`Normaliser`: the denominators N and sum L_i belong to the whole optimizer step,
not to one micro-batch. Built once per step from the masks of all micro-batches (and summed
over data-parallel ranks with ``all_reduce`` when ``torch.distributed`` is initialised), it
makes ``sum of micro-batch losses`` exactly the full-batch loss, so the gradient of an
optimizer step does not depend on how the batch is split (1, 2, 4 or uneven micro-batches,
any number of ranks). ``L_i`` in ``seq_mean_token_mean`` is per sequence and never crosses a
split, so it needs no communication.

Data-parallel convention (``gradient_sync``):

* ``"sum"`` (default): each rank's loss is its share of the global loss, so the full-batch
  gradient is the SUM of the ranks' gradients (``all_reduce(grad, SUM)``);
* ``"mean"``: for DistributedDataParallel, which AVERAGES gradients over ranks; each rank's
  loss is multiplied by the world size so that the average is again the full-batch gradient.

Either way the optimizer sees the gradient of the full-batch loss; only the bookkeeping of
who divides by the world size differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..distributed import World

__all__ = ["REDUCTIONS", "Normaliser", "build_normaliser", "reduce_tokens"]

REDUCTIONS: tuple[str, ...] = ("seq_sum", "seq_mean_token_mean", "token_mean", "dr_grpo_constant")
GRADIENT_SYNCS: tuple[str, ...] = ("sum", "mean")


@dataclass(frozen=True)
class Normaliser:
    """Global counts of one optimizer step, fixed before any micro-batch loss is computed.

    ``sequences`` and ``tokens`` are totals over every micro-batch and every rank;
    ``world_size`` is 1 without ``torch.distributed``. Use :meth:`reduce` on each micro-batch
    and sum (or accumulate gradients of) the results.
    """

    reduction: str
    sequences: float
    tokens: float
    max_episode_tokens: int | None = None
    world_size: int = 1
    gradient_sync: str = "sum"

    def __post_init__(self) -> None:
        _check_reduction(self.reduction, self.max_episode_tokens)
        if self.gradient_sync not in GRADIENT_SYNCS:
            raise ValueError(f"gradient_sync must be one of {GRADIENT_SYNCS}")

    @property
    def denominator(self) -> float:
        """What the (per-sequence-averaged, for seq_mean_token_mean) token sum is divided by."""
        if self.reduction == "token_mean":
            d = self.tokens
        elif self.reduction == "dr_grpo_constant":
            d = float(self.max_episode_tokens) * self.sequences  # type: ignore[arg-type]
        else:
            d = self.sequences
        return max(d, 1.0)  # nothing to reduce: the numerator is 0 as well

    @property
    def scale(self) -> float:
        """Multiplier on this rank's loss: world size under DDP averaging, else 1."""
        return float(self.world_size) if self.gradient_sync == "mean" else 1.0

    def reduce(
        self, terms: torch.Tensor, mask: torch.Tensor, *, premasked: bool = False
    ) -> torch.Tensor:
        """This micro-batch's share of the step loss: masked ``terms [B, T]`` -> scalar."""
        return reduce_tokens(terms, mask, self, premasked=premasked)

    def row_weights(self, mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``[B]`` weights w with ``loss = sum_i w_i * sum_t mask[i, t] * term[i, t]``.

        Every reduction is a per-sequence weighting of token sums: ``scale / denominator``
        for all rows, divided further by ``L_i`` for ``seq_mean_token_mean``.
        """
        m = _as_bool_mask(mask)
        w = torch.full((m.size(0),), self.scale / self.denominator, dtype=dtype, device=m.device)
        if self.reduction == "seq_mean_token_mean":
            w = w / torch.count_nonzero(m, dim=1).clamp(min=1).to(dtype)
        return w


def _check_reduction(reduction: str, max_episode_tokens: int | None) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {REDUCTIONS}")
    if reduction == "dr_grpo_constant" and (
        max_episode_tokens is None
        or int(max_episode_tokens) != max_episode_tokens
        or max_episode_tokens < 1
    ):
        raise ValueError(
            "dr_grpo_constant needs max_episode_tokens (the generation budget, a positive "
            f"int; not the padded width), got {max_episode_tokens!r}"
        )


def _as_bool_mask(mask: torch.Tensor) -> torch.Tensor:
    if mask.ndim != 2:
        raise ValueError(f"action mask must be [batch, tokens], got shape {tuple(mask.shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def build_normaliser(
    reduction: str,
    masks: torch.Tensor | Sequence[torch.Tensor],
    *,
    max_episode_tokens: int | None = None,
    gradient_sync: str = "sum",
    group: dist.ProcessGroup | None = None,
    distributed: bool | None = None,
) -> Normaliser:
    """Count sequences and action tokens of a whole optimizer step, once.

    ``masks``: the action mask of every micro-batch this rank will process in the step
    (a single ``[B, T]`` tensor or a sequence of them). With ``torch.distributed``
    initialised (or ``distributed=True``) the counts are summed over ``group`` with one
    ``all_reduce``: every rank must call this, with its own masks, before its first
    micro-batch. ``distributed=False`` keeps the counts local.
    """
    _check_reduction(reduction, max_episode_tokens)
    if gradient_sync not in GRADIENT_SYNCS:
        raise ValueError(f"gradient_sync must be one of {GRADIENT_SYNCS}")
    if isinstance(masks, torch.Tensor):
        masks = [masks]
    if not masks:
        raise ValueError("build_normaliser needs the masks of at least one micro-batch")
    seqs = 0
    toks = 0
    for m in masks:  # micro-batches of one step: a handful, not groups
        b = _as_bool_mask(m)
        seqs += int(torch.count_nonzero(b.any(1)))  # count_nonzero: bool .sum() is ~10x slower
        toks += int(torch.count_nonzero(b))
    if distributed is None:
        distributed = World.current().size > 1
    world = 1
    if distributed:  # one all-reduce: the counts, and 1 per rank (the group's size)
        counts = torch.tensor([seqs, toks, 1], dtype=torch.int64)
        if dist.get_backend(group) == "nccl":
            counts = counts.cuda()
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
        seqs, toks, world = (int(c) for c in counts.tolist())
    return Normaliser(
        reduction=reduction,
        sequences=float(seqs),
        tokens=float(toks),
        max_episode_tokens=None if max_episode_tokens is None else int(max_episode_tokens),
        world_size=world,
        gradient_sync=gradient_sync,
    )


def reduce_tokens(
    terms: torch.Tensor,
    mask: torch.Tensor,
    normaliser: Normaliser,
    *,
    premasked: bool = False,
) -> torch.Tensor:
    """Reduce per-token loss terms ``[B, T]`` under the action mask with a step normaliser.

    Masked-out positions are selected away with ``torch.where`` (not multiplied by 0), so
    NaN or inf in padding can reach neither the loss nor the gradient. ``premasked=True``
    skips that pass for terms the caller guarantees to be exactly 0 off the mask (the
    policy losses build them so); ``mask`` still sets the lengths and weights.
    """
    if terms.shape != mask.shape:
        raise ValueError(f"terms {tuple(terms.shape)} and mask {tuple(mask.shape)} differ")
    m = _as_bool_mask(mask)
    if not premasked:
        terms = torch.where(m, terms, torch.zeros((), dtype=terms.dtype, device=terms.device))
    return (terms.sum(1) * normaliser.row_weights(m, terms.dtype)).sum()
