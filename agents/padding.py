"""Ragged rows of ids, masks or log-probs to one padded tensor, in one copy.

Every place that batches sequences (training rows, generation prompts, SFT demonstrations,
scoring) pads through :func:`pad_sequences`, so the layout is decided once: right padding
for training and scoring (position ``t`` of a row is token ``t``), left padding for
generation prompts (every row's next token sits in the last column).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

__all__ = ["pad_sequences", "padding_mask"]


def padding_mask(
    lengths: Sequence[int] | torch.Tensor, width: int | None = None, *, left: bool = False
) -> torch.Tensor:
    """``[B, width]`` bool, True on the real entries of rows of these ``lengths``."""
    n = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
    if width is None:
        width = int(n.max()) if n.numel() else 0
    columns = torch.arange(width)
    return columns >= (width - n)[:, None] if left else columns < n[:, None]


def pad_sequences(
    rows: Sequence[Sequence[int | float | bool]],
    *,
    value: int | float = 0,
    dtype: torch.dtype = torch.long,
    width: int | None = None,
    left: bool = False,
) -> torch.Tensor:
    """``[len(rows), width]`` of ``dtype``: each row's values, then (or before) ``value``.

    ``width`` defaults to the longest row. The values are converted in one call (a float
    row becomes exactly what ``torch.tensor(row, dtype=dtype)`` would make of it).
    """
    if not rows:
        raise ValueError("pad_sequences needs at least one row")
    mask = padding_mask([len(r) for r in rows], width, left=left)
    out = torch.full(mask.shape, value, dtype=dtype)
    out[mask] = torch.tensor(list(itertools.chain.from_iterable(rows)), dtype=dtype)
    return out
