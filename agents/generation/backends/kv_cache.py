"""A KV cache allocated once per batch, for :class:`~forkgym.agents.generation.backends.hf_policy.HFPolicy`'s decode loop.

transformers' ``DynamicCache`` grows each layer's keys and values with ``torch.cat`` at every
new token: the whole cache is copied into a freshly allocated tensor, per layer, per token
(quadratic in the length, and on the CPU a large allocation is a page-faulting ``mmap``
each time). :func:`preallocated_cache` builds the same ``DynamicCache`` and swaps its plain
full-attention layers for :class:`PreallocatedLayer`, which allocates ``[batch, heads,
capacity, head_dim]`` once, writes each token's keys and values into the next free slot and
hands the attention a view of the filled part. The attention reads the very same numbers
(only the tensor's stride differs), so logits, and therefore sampled tokens and log-probs,
are unchanged (tests/agents/generation/backends/test_kv_cache.py compares them bit for bit).

Layers of other kinds (sliding-window, linear-attention, ...) keep transformers' own class,
as does every layer where the installed transformers has no layered ``DynamicCache``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["PreallocatedLayer", "preallocated_cache"]

try:  # transformers >= 4.56: a cache is a list of layer objects
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - older transformers: the plain DynamicCache is used
    DynamicLayer = None  # type: ignore[assignment,misc]


if DynamicLayer is not None:

    class PreallocatedLayer(DynamicLayer):  # type: ignore[valid-type,misc]
        """A full-attention layer whose keys and values live in buffers of ``capacity``
        positions; ``keys``/``values`` are views of the filled part. Grows (one copy, to
        twice the need) if a forward ever runs past the capacity."""

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self.length = 0

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            self._k = key_states.new_empty(self._shape(key_states, self.capacity))
            self._v = value_states.new_empty(self._shape(value_states, self.capacity))
            self.length = 0
            self.is_initialized = True

        @staticmethod
        def _shape(states: torch.Tensor, length: int) -> tuple[int, ...]:
            return (*states.shape[:-2], length, states.shape[-1])

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self.length, self.length + key_states.shape[-2]
            if end > self._k.shape[-2]:
                self._grow(2 * end)
            self._k[..., start:end, :].copy_(key_states)
            self._v[..., start:end, :].copy_(value_states)
            self.length = end
            self.keys, self.values = self._k[..., :end, :], self._v[..., :end, :]
            return self.keys, self.values

        def _grow(self, capacity: int) -> None:
            k = self._k.new_empty(self._shape(self._k, capacity))
            v = self._v.new_empty(self._shape(self._v, capacity))
            k[..., : self.length, :].copy_(self._k[..., : self.length, :])
            v[..., : self.length, :].copy_(self._v[..., : self.length, :])
            self._k, self._v, self.capacity = k, v, capacity

        def get_seq_length(self) -> int:
            return self.length if self.is_initialized else 0

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep (or repeat) the rows ``indices``: one copy of the filled part."""
            if not self.is_initialized:
                return
            k = self._k.new_empty((len(indices), *self._k.shape[1:]))
            v = self._v.new_empty((len(indices), *self._v.shape[1:]))
            torch.index_select(self._k[..., : self.length, :], 0, indices, out=k[..., : self.length, :])  # fmt: skip
            torch.index_select(self._v[..., : self.length, :], 0, indices, out=v[..., : self.length, :])  # fmt: skip
            self._k, self._v = k, v
            self.keys, self.values = k[..., : self.length, :], v[..., : self.length, :]

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes a negative number of tokens to remove")
            if tokens_to_remove == 0 or not self.is_initialized:
                return
            self.length = max(0, self.length + tokens_to_remove)
            self.keys, self.values = self._k[..., : self.length, :], self._v[..., : self.length, :]

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.is_initialized:
                rows = torch.arange(self._k.shape[0], device=self._k.device)
                self.batch_select_indices(rows.repeat_interleave(repeats))

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.batch_select_indices(beam_idx.to(self._k.device))

        def reset(self) -> None:
            super().reset()
            self.length = 0

else:  # pragma: no cover
    PreallocatedLayer = None  # type: ignore[assignment,misc]


def preallocated_cache(config: Any, capacity: int) -> Any:
    """A transformers ``DynamicCache`` for ``config`` whose full-attention layers hold
    ``capacity`` positions allocated once (see the module's docstring)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if PreallocatedLayer is None or not isinstance(layers, list):
        return cache  # pragma: no cover - older transformers
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer:
            layers[i] = PreallocatedLayer(capacity)
    return cache
