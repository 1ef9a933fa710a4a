"""Weight buckets: every parameter once, under the size limit, fused engine layers never split."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.generation.backends.weight_buckets import (
    bucket_weights,
    engine_names,
    layer_key,
)
from forkgym.agents.models import init_model, load_policy_model


def llama_like(layers: int, width: int) -> list[tuple[str, torch.Tensor]]:
    out = [("model.embed_tokens.weight", torch.zeros(16, width))]
    for i in range(layers):
        p = f"model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out.append((f"{p}.self_attn.{proj}.weight", torch.zeros(width, width)))
        out.append((f"{p}.self_attn.q_proj.bias", torch.zeros(width)))
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out.append((f"{p}.mlp.{proj}.weight", torch.zeros(width, width)))
        out.append((f"{p}.input_layernorm.weight", torch.zeros(width)))
    out.append(("model.norm.weight", torch.zeros(width)))
    out.append(("lm_head.weight", torch.zeros(16, width)))
    return out


def test_layer_keys_fold_the_fused_projections():
    assert (
        layer_key("model.layers.3.self_attn.k_proj.weight") == "model.layers.3.self_attn.qkv_proj"
    )
    assert layer_key("model.layers.3.self_attn.q_proj.bias") == "model.layers.3.self_attn.qkv_proj"
    assert layer_key("model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.gate_up_proj"
    assert layer_key("model.layers.0.mlp.down_proj.weight") == "model.layers.0.mlp.down_proj"
    assert layer_key("model.layers.0.self_attn.o_proj.weight") == "model.layers.0.self_attn.o_proj"
    assert layer_key("lm_head.weight") == "lm_head"


@settings(max_examples=60, deadline=None)
@given(
    layers=st.integers(1, 4),
    width=st.sampled_from([2, 4, 8]),
    limit=st.integers(1, 4096),
)
def test_buckets_cover_every_parameter_once_within_the_limit_and_keep_layers_whole(
    layers, width, limit
):
    named = llama_like(layers, width)
    buckets = bucket_weights(named, limit)
    pushed = [name for b in buckets for name in b.names]
    assert sorted(pushed) == sorted(n for n, _ in named) and len(pushed) == len(set(pushed))
    owner = {}
    for i, bucket in enumerate(buckets):
        assert bucket.nbytes == sum(t.numel() * t.element_size() for t in bucket.tensors)
        assert bucket.nbytes <= limit or bucket.oversize
        if bucket.oversize:  # only one layer, too big for any bucket
            assert len({layer_key(n) for n in bucket.names}) == 1
        for name in bucket.names:
            owner.setdefault(layer_key(name), set()).add(i)
    assert all(len(where) == 1 for where in owner.values())  # no layer in two buckets
    qkv = owner["model.layers.0.self_attn.qkv_proj"]
    assert len(qkv) == 1  # q, k, v and q's bias travel together


def test_a_large_limit_gives_one_bucket_with_each_layer_together():
    named = llama_like(2, 4)
    (bucket,) = bucket_weights(named, 2**30)
    assert sorted(bucket.names) == sorted(n for n, _ in named) and not bucket.oversize
    # a layer's parameters are contiguous (q's bias moved up to k and v), layers in order
    keys = [layer_key(n) for n in bucket.names]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(runs))
    assert runs == list(dict.fromkeys(layer_key(n) for n, _ in named))
    with pytest.raises(ValueError, match="max_bytes"):
        bucket_weights(named, 0)


def test_engine_names_strip_wrappers_and_refuse_collisions():
    t = torch.zeros(1)
    named = [
        ("_orig_mod.model.layers.0.mlp.up_proj.weight", t),
        ("module.model.norm.weight", t),
        ("model.layers.0.self_attn.rotary_emb.inv_freq", t),
    ]
    assert [n for n, _ in engine_names(named)] == [
        "model.layers.0.mlp.up_proj.weight",
        "model.norm.weight",
    ]
    with pytest.raises(ValueError, match="both map to"):
        engine_names([("module.lm_head.weight", t), ("lm_head.weight", t)])


def test_the_default_model_is_bucketed_by_its_real_names(tmp_path):
    model, _ = load_policy_model(init_model(tmp_path / "m", corpus_seeds=2))
    named = engine_names(model.state_dict())
    buckets = bucket_weights(named, 64 * 1024)
    assert sum(b.nbytes for b in buckets) == sum(
        t.numel() * t.element_size() for t in model.state_dict().values()
    )
    assert any("qkv_proj" in layer_key(n) for b in buckets for n in b.names)


def test_all_experts_of_a_moe_block_are_one_layer():
    keys = {
        layer_key(f"model.layers.2.mlp.experts.{e}.{proj}.weight")
        for e in range(4)
        for proj in ("gate_proj", "up_proj", "down_proj")
    }
    assert keys == {"model.layers.2.mlp.experts"}
