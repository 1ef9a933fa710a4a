"""The trainer's weights as an inference engine wants them: engine names, fused groups, buckets.

A weight push to a separate engine (vLLM) has two failure modes the field keeps hitting:
one parameter per call (tens of seconds per step for a real model, RPC time-outs) and a
fused layer updated by halves. vLLM stores q/k/v as one ``qkv_proj`` layer and gate/up as one
``gate_up_proj``; its in-place reload processes a layer once all of it has arrived, so a
push holding ``q_proj`` without ``k_proj`` and ``v_proj`` leaves that layer half-loaded (its
log-probs turn NaN). So:

* :func:`engine_names` maps the trainer's parameter names to checkpoint names (wrappers such
  as ``torch.compile``'s ``_orig_mod.`` or DDP's ``module.`` stripped). A tied output head
  stays in: on the CPU, vLLM keeps a repacked copy of it that only a push naming
  ``lm_head.weight`` refreshes (without it the engine's log-probs stay those of the old
  weights);
* :func:`layer_key` names the engine layer a parameter belongs to (its module, with the
  fused projections of :data:`FUSED_PROJECTIONS` folded together, and all experts of a
  mixture-of-experts block as one layer, as vLLM loads them);
* :func:`bucket_weights` packs whole layers into buckets of at most ``max_bytes``; a single
  layer larger than that gets a bucket of its own (flagged ``oversize``) rather than being
  split.

Pure tensor bookkeeping: no engine is imported here, so it is tested in the main suite.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

__all__ = [
    "FUSED_PROJECTIONS",
    "Bucket",
    "bucket_weights",
    "engine_names",
    "layer_key",
]

# Hugging Face projection name -> the fused engine layer that holds it (vLLM's Llama/Qwen/
# Mistral families). Extend it for an architecture that fuses other projections.
FUSED_PROJECTIONS: dict[str, str] = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}

# prefixes that wrappers add to parameter names (torch.compile, DDP, FSDP1)
_WRAPPER_PREFIXES = re.compile(r"(^|\.)(_orig_mod|module|_fsdp_wrapped_module)\.")


@dataclass
class Bucket:
    """Named tensors pushed in one call; whole engine layers only."""

    names: list[str] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)
    nbytes: int = 0
    oversize: bool = False  # one layer larger than the bucket limit

    def items(self) -> list[tuple[str, torch.Tensor]]:
        return list(zip(self.names, self.tensors, strict=True))


def _strip_wrappers(name: str) -> str:
    previous = None
    while previous != name:
        previous, name = name, _WRAPPER_PREFIXES.sub(r"\1", name)
    return name


def engine_names(
    named: Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor],
    *,
    skip: Iterable[str] = ("rotary_emb.inv_freq",),
) -> list[tuple[str, torch.Tensor]]:
    """``(checkpoint name, tensor)`` for every weight the engine loads, in the given order.

    Wrapper prefixes are stripped; names containing any of ``skip`` (buffers an engine
    recomputes) are dropped. Two
    parameters that map to one name are refused: a push must name each weight once.
    """
    items = named.items() if isinstance(named, Mapping) else named
    out: list[tuple[str, torch.Tensor]] = []
    seen: dict[str, str] = {}
    for raw, tensor in items:
        name = _strip_wrappers(raw)
        if any(part in name for part in skip):
            continue
        if name in seen:
            raise ValueError(f"parameters {seen[name]!r} and {raw!r} both map to {name!r}")
        seen[name] = raw
        out.append((name, tensor))
    return out


def layer_key(name: str) -> str:
    """The engine layer holding parameter ``name``: its module path, fused projections folded
    (``model.layers.3.self_attn.k_proj.weight`` -> ``model.layers.3.self_attn.qkv_proj``)."""
    module, _, _ = name.rpartition(".")
    if ".experts." in f"{module}.":  # a mixture of experts is one engine layer, all experts
        return module[: module.index(".experts") + len(".experts")]
    parent, _, last = module.rpartition(".")
    fused = FUSED_PROJECTIONS.get(last)
    if fused is None:
        return module
    return f"{parent}.{fused}" if parent else fused


def bucket_weights(named: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> list[Bucket]:
    """Pack ``named`` into buckets of at most ``max_bytes``, never splitting an engine layer.

    Layers keep the order in which their first parameter appears (the engine can process a
    layer as soon as it is complete); parameters of one layer keep their order. Every
    parameter lands in exactly one bucket.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    layers: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in named:
        layers.setdefault(layer_key(name), []).append((name, tensor))
    buckets: list[Bucket] = []
    current = Bucket()
    for members in layers.values():
        size = sum(t.numel() * t.element_size() for _, t in members)
        if current.names and current.nbytes + size > max_bytes:
            buckets.append(current)
            current = Bucket()
        for name, tensor in members:
            current.names.append(name)
            current.tensors.append(tensor)
        current.nbytes += size
        current.oversize = current.oversize or size > max_bytes
    if current.names:
        buckets.append(current)
    return buckets
