"""The offline default model: deterministic init, documented sizes, one loading path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from forkgym.agents.models import (
    MODEL_SIZES,
    chat_stop_token_ids,
    init_model,
    load_policy_model,
    model_config,
    parameter_count,
)
from forkgym.agents.tokenizer import CHAT_TEMPLATE

DOCUMENTED = {"tiny": 1_016_960, "small": 4_689_152, "base": 24_125_952}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """Two inits with the default arguments, in different directories."""
    rng_before = torch.random.get_rng_state()
    first = init_model(tmp_path_factory.mktemp("a") / "model")
    second = init_model(tmp_path_factory.mktemp("b") / "model")
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the global RNG is untouched
    return first, second


def test_init_is_byte_identical(model_dirs):
    first, second = model_dirs
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= set(
        names
    )
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_other_seed_other_weights_same_tokenizer(tmp_path):
    a = init_model(tmp_path / "a", seed=0, corpus_seeds=2)
    b = init_model(tmp_path / "b", seed=1, corpus_seeds=2)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()


def test_sizes_and_parameter_counts(model_dirs):
    assert set(MODEL_SIZES) == set(DOCUMENTED)
    for size, count in DOCUMENTED.items():
        config = model_config(size)
        assert config.head_dim == 32
        assert config.hidden_size == config.num_attention_heads * 32
        assert config.tie_word_embeddings
        assert parameter_count(size) == count
    model, _ = load_policy_model(model_dirs[0])
    assert sum(p.numel() for p in model.parameters()) == DOCUMENTED["tiny"]
    assert 0.5e6 < DOCUMENTED["tiny"] < 1.5e6 and 3e6 <= DOCUMENTED["small"] <= 5e6
    provenance = json.loads((model_dirs[0] / "forkgym_model.json").read_text())
    assert provenance["parameters"] == DOCUMENTED["tiny"] and provenance["size"] == "tiny"
    with pytest.raises(ValueError, match="unknown model size"):
        model_config("huge")


def test_loads_back_offline_and_runs(model_dirs):
    model, tokenizer = load_policy_model(model_dirs[0], local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not model.training
    assert model.config.head_dim == 32 and model.config.vocab_size == len(tokenizer) == 1024
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == 0
    assert chat_stop_token_ids(tokenizer, model) == (0, 2)  # <|endoftext|>, <|im_end|>
    assert model.generation_config.eos_token_id == [2, 0]
    messages = [
        {"role": "user", "content": "Compute 12 + 34. Put your final answer within \\boxed{}."}
    ]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    input_ids = torch.tensor([ids])
    model.train()
    out = model(input_ids=input_ids, labels=input_ids)
    assert out.logits.shape == (1, len(ids), 1024)
    assert torch.isfinite(out.logits).all()
    assert 6.0 < out.loss.item() < 8.0  # ~ln(1024) = 6.93 at initialisation
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_missing_pad_token_is_set(model_dirs, tmp_path):
    copy = tmp_path / "nopad"
    shutil.copytree(model_dirs[0], copy)
    config_path = copy / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    del config["pad_token"]
    config_path.write_text(json.dumps(config))
    _, tokenizer = load_policy_model(copy)
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>"
