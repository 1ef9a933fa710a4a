"""A lean decode step for Llama- and Qwen2-shaped models: the same layer, in fewer operations.

On the CPU a small model's decode step is bound by how many tensor operations run per token,
not by arithmetic: transformers' layer builds a causal mask, calls a rotary module, a cache
object and an attention interface, and runs q, k, v (and gate, up) as separate products.
:class:`FusedDecoder` computes the same layer for one new token per row with the module's
own weights:

* q, k and v in one product (their weights concatenated, biases too), as are gate and up;
* the rotary embedding of q and k heads in one pass (``x * cos + roll(x) * sin'``, where
  ``sin'`` carries the sign of rotate-half: the same products and sums as the model's
  ``x * cos + rotate_half(x) * sin``), ``cos``/``sin`` looked up per row from a table made
  once per batch by the model's own rotary module;
* keys and values of every layer in one buffer allocated per batch (so finished rows leave it
  in one ``index_select``); attention as two batched products over the grouped query heads
  (``[rows * kv_heads, group, head_dim]``: no repeat of keys and values), the padding mask an
  additive ``-inf`` bias fused into the first product;
* the residual additions fused into the output products (``addmm``).

It is the same function; float sums are taken in a different order (the fused products, the
attention), so logits differ from the model's ``forward`` in the last bits (about 1e-6
relative): the same tokens except where two perturbed scores tie that closely.
tests/agents/generation/backends/test_fused_decode.py compares it with the model's forward.

:func:`unsupported` says why a model cannot use it (another architecture, biases on the output
products, sliding-window or non-static rotary scaling); :class:`~forkgym.agents.generation.backends.hf_policy.HFPolicy`
then decodes with the model's own ``forward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["FusedDecoder", "FusedWeights", "unsupported"]

_MODEL_TYPES = ("llama", "qwen2")
_ROPE_TYPES = ("default", "linear", "llama3")  # inverse frequencies fixed at construction


def _rope_type(config: Any) -> str:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not params:
        return "default"
    return str(params.get("rope_type", params.get("type", "default")))


def unsupported(model: Any) -> str | None:
    """Why ``model`` cannot use :class:`FusedDecoder` (``None``: it can)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _MODEL_TYPES:
        return f"model type {model_type!r} (supported: {', '.join(_MODEL_TYPES)})"
    if getattr(config, "hidden_act", None) != "silu":
        return f"activation {config.hidden_act!r} (supported: silu)"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp != 1"
    if _rope_type(config) not in _ROPE_TYPES:
        return f"rotary scaling {_rope_type(config)!r} (supported: {', '.join(_ROPE_TYPES)})"
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return "sliding-window attention layers"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or getattr(inner, "rotary_emb", None) is None:
        return "no model.layers / model.rotary_emb"
    head = getattr(model, "lm_head", None)
    if type(head) is not torch.nn.Linear:
        return f"lm_head is {type(head).__name__}, not a plain torch.nn.Linear"
    if head.bias is not None:
        return "a bias on lm_head"
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        named = {
            "q_proj": attn.q_proj, "k_proj": attn.k_proj, "v_proj": attn.v_proj,
            "o_proj": attn.o_proj, "gate_proj": mlp.gate_proj, "up_proj": mlp.up_proj,
            "down_proj": mlp.down_proj,
        }  # fmt: skip
        for name, module in named.items():
            if type(module) is not torch.nn.Linear:  # an adapter, a quantised layer, ...
                return f"{name} is {type(module).__name__}, not a plain torch.nn.Linear"
        if any(named[n].bias is not None for n in ("o_proj", "gate_proj", "up_proj", "down_proj")):
            return "biases on o_proj or the MLP (supported: q, k and v biases)"
    return None


@dataclass
class _Layer:
    norm1: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o_t: torch.Tensor  # o_proj.weight.t(), a view
    norm2: torch.Tensor
    gate_up: torch.Tensor
    down_t: torch.Tensor  # down_proj.weight.t(), a view


def _cat_bias(*linears: Any) -> torch.Tensor | None:
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat(
        [
            lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
            for lin in linears
        ]
    )


class FusedWeights:
    """The model's weights as the fused step reads them: q/k/v and gate/up concatenated
    (copies), the rest the model's own tensors. Build it after the weights last changed (the
    policy builds one per ``generate`` call); every batch of that call shares it."""

    def __init__(self, model: Any) -> None:
        config = model.config
        inner = model.model
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        self.eps = float(config.rms_norm_eps)
        self.rotary = inner.rotary_emb
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.head = model.lm_head.weight
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                _Layer(
                    norm1=layer.input_layernorm.weight,
                    qkv=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                    qkv_bias=_cat_bias(attn.q_proj, attn.k_proj, attn.v_proj),
                    o_t=attn.o_proj.weight.t(),
                    norm2=layer.post_attention_layernorm.weight,
                    gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                    down_t=mlp.down_proj.weight.t(),
                )
            )
        self.intermediate = self.layers[0].gate_up.shape[0] // 2
        self.fast_norm = self.embed.dtype == torch.float32  # F.rms_norm: LlamaRMSNorm's numbers


class FusedDecoder:
    """Decode steps after a prefill: ``step(ids, positions)`` returns the next logits.

    Built from the model's :class:`FusedWeights`, the prefill's KV ``cache`` (a transformers
    ``Cache`` holding the prompts), the batch's attention ``mask`` over all ``capacity``
    positions (``[rows, capacity]``, 1 for a real token: the prompt's mask, then ones),
    ``capacity``, and ``rows``: each sequence's row of the cache (``None``: the cache has one
    row per sequence already), so a group's K sequences read one prefill. ``select(rows)``
    keeps those rows.
    """

    def __init__(
        self,
        weights: FusedWeights,
        cache: Any,
        mask: torch.Tensor,
        capacity: int,
        rows: torch.Tensor | None = None,
    ) -> None:
        w = self.w = weights
        dtype, device = w.embed.dtype, w.embed.device
        # cos and, with rotate-half's sign folded in, sin per position: [capacity, 2, head_dim]
        cos, sin = w.rotary(
            torch.empty(0, dtype=dtype, device=device),  # the module reads dtype and device
            torch.arange(capacity, device=device)[None],
        )
        cos, sin = cos[0], sin[0]
        half = w.head_dim // 2
        sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)
        self.rope = torch.stack([cos, sin], dim=1)
        # every layer's keys and values, one buffer: [layers, 2, rows, kv_heads, capacity, dim]
        width = cache.get_seq_length()
        self.buffer = torch.empty(
            (len(w.layers), 2, mask.shape[0], w.kv_heads, capacity, w.head_dim),
            dtype=dtype,
            device=device,
        )
        filled = self.buffer[..., :width, :]
        for i, layer in enumerate(cache.layers):
            filled[i, 0].copy_(layer.keys if rows is None else layer.keys[rows])
            filled[i, 1].copy_(layer.values if rows is None else layer.values[rows])
        self.length = width
        bias = torch.zeros(mask.shape, dtype=dtype, device=device)
        bias.masked_fill_(mask == 0, float("-inf"))
        self._set_bias(bias)
        self._views()

    def _set_bias(self, bias: torch.Tensor) -> None:
        """``bias``: [rows, capacity], 0 or -inf; kept as [rows * kv_heads, 1, capacity]."""
        rows, capacity = bias.shape
        self.bias = (
            bias[:, None, None, :]
            .expand(rows, self.w.kv_heads, 1, capacity)
            .reshape(-1, 1, capacity)
        )

    def _views(self) -> None:
        self.keys = [self.buffer[i, 0] for i in range(len(self.w.layers))]
        self.values = [self.buffer[i, 1] for i in range(len(self.w.layers))]

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (indices into the current rows), in that order."""
        buffer = self.buffer.new_empty((*self.buffer.shape[:2], len(rows), *self.buffer.shape[3:]))
        torch.index_select(
            self.buffer[..., : self.length, :], 2, rows, out=buffer[..., : self.length, :]
        )
        self.buffer = buffer
        capacity = self.bias.shape[-1]
        self._set_bias(self.bias.view(-1, self.w.kv_heads, capacity)[:, 0].index_select(0, rows))
        self._views()

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The model's RMSNorm: in float32, scaled after the cast back (as LlamaRMSNorm; for
        float32, ``F.rms_norm`` computes the same, in fewer operations)."""
        if self.w.fast_norm:
            return F.rms_norm(x, weight.shape, weight, self.w.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.w.eps)
        return weight * h.to(x.dtype)

    @torch.inference_mode()
    def step(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (float32, ``[rows]`` x vocabulary) after the tokens ``ids`` (``[rows]``) at
        ``positions`` (``[rows]``), whose keys and values join the cache."""
        w, n, at = self.w, ids.shape[0], self.length
        heads, kv, d = w.heads, w.kv_heads, w.head_dim
        group = heads // kv
        qk_width = (heads + kv) * d
        rope = self.rope[positions]
        cos, sin = rope[:, :1], rope[:, 1:]
        bias = self.bias[:, :, : at + 1]
        h = F.embedding(ids, w.embed)
        for layer, keys, values in zip(w.layers, self.keys, self.values, strict=True):
            qkv = F.linear(self._norm(h, layer.norm1), layer.qkv, layer.qkv_bias)
            qk = qkv[:, :qk_width].view(n, heads + kv, d)
            qk = qk * cos + qk.roll(d // 2, -1) * sin
            keys[:, :, at].copy_(qk[:, heads:])
            values[:, :, at].copy_(qkv[:, qk_width:].view(n, kv, d))
            scores = torch.baddbmm(
                bias,
                qk[:, :heads].reshape(n * kv, group, d),
                keys[:, :, : at + 1].reshape(n * kv, at + 1, d).transpose(1, 2),
                alpha=d**-0.5,
            )
            out = torch.bmm(scores.softmax(-1), values[:, :, : at + 1].reshape(n * kv, at + 1, d))
            h = torch.addmm(h, out.view(n, heads * d), layer.o_t)
            gate_up = F.linear(self._norm(h, layer.norm2), layer.gate_up)
            act = F.silu(gate_up[:, : w.intermediate]) * gate_up[:, w.intermediate :]
            h = torch.addmm(h, act, layer.down_t)
        self.length = at + 1
        return F.linear(self._norm(h, w.final_norm), w.head).float()
