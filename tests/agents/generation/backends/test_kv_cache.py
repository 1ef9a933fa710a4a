"""The preallocated KV cache: the same keys, values and logits as transformers' DynamicCache."""

from __future__ import annotations

import pytest
import torch

from forkgym.agents.generation.backends.kv_cache import PreallocatedLayer, preallocated_cache
from forkgym.agents.models import init_model, load_policy_model

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    model, _ = load_policy_model(init_model(tmp_path_factory.mktemp("tiny") / "m", corpus_seeds=2))
    return model.eval()


def decode(model, cache, steps: int, keep_at: int | None = None) -> list[torch.Tensor]:
    """Prefill two distinct left-padded prompts, repeat them to four rows (prefix sharing's
    select), decode ``steps`` tokens greedily, dropping row 1 at step ``keep_at``; every
    step's logits."""
    ids = torch.tensor([[0, 0, 5, 9, 14], [7, 3, 8, 21, 4]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = []
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache).logits
        index = torch.tensor([0, 0, 1, 1])
        cache.batch_select_indices(index)
        logits, mask, pos = logits[index, -1], mask[index], pos[index, -1] + 1
        for step in range(steps):
            out.append(logits)
            token = logits.argmax(-1)
            if step == keep_at:
                keep = torch.tensor([0, 2, 3])
                cache.batch_select_indices(keep)
                token, mask, pos = token[keep], mask[keep], pos[keep]
            mask = torch.cat([mask, mask.new_ones((len(mask), 1))], dim=1)
            step_out = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=pos[:, None],
                cache=cache,
            )
            logits, pos = step_out.logits[:, -1], pos + 1
    return out


@pytest.mark.parametrize("capacity", [5 + 6, 7])  # enough, and too small (the layer grows)
def test_logits_equal_the_dynamic_caches_bit_for_bit(model, capacity):
    from transformers import DynamicCache

    reference = decode(model, DynamicCache(config=model.config), steps=6, keep_at=2)
    cache = preallocated_cache(model.config, capacity)
    assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    got = decode(model, cache, steps=6, keep_at=2)
    assert len(got) == len(reference)
    for a, b in zip(reference, got, strict=True):
        assert torch.equal(a, b)
    assert cache.get_seq_length() == 5 + 6
    assert cache.layers[0].keys.shape[0] == 3  # the dropped row left


def test_other_layer_kinds_keep_transformers_class(model):
    """A sliding-window layer (Mistral-style config) is not swapped."""
    config = model.config.__class__(**{**model.config.to_dict(), "sliding_window": 4})
    config.layer_types = ["sliding_attention", "full_attention"] * (config.num_hidden_layers // 2)
    cache = preallocated_cache(config, 16)
    kinds = [type(layer).__name__ for layer in cache.layers]
    assert kinds.count("PreallocatedLayer") == config.num_hidden_layers // 2
    assert all(k == "PreallocatedLayer" or "Sliding" in k for k in kinds)


def test_crop_and_repeat_work_on_the_filled_part():
    layer = PreallocatedLayer(capacity=8)
    keys = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).view(2, 1, 3, 2)
    layer.update(keys, -keys)
    layer.batch_repeat_interleave(2)
    assert torch.equal(layer.keys, keys.repeat_interleave(2, dim=0))
    layer.crop(-1)
    assert layer.get_seq_length() == 2
    assert torch.equal(layer.values, -keys.repeat_interleave(2, dim=0)[..., :2, :])
    with pytest.raises(ValueError, match="negative"):
        layer.crop(1)
