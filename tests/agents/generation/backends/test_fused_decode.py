"""The fused decode step: the model's own layer, in fewer operations (agents/generation/backends/fused_decode.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from forkgym.agents.generation.backends.fused_decode import FusedDecoder, FusedWeights, unsupported
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.kv_cache import preallocated_cache
from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
from forkgym.agents.learner.prefix_sharing import cache_argument
from forkgym.agents.models import init_model, load_policy_model

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set

SHAPE = dict(
    vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=64,
)  # fmt: skip


def random_model(cls, config, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # biases (Qwen2's q, k, v) start at zero: make them count
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
    return model


MODELS = {
    "llama-gqa": lambda: random_model(
        LlamaForCausalLM, LlamaConfig(**SHAPE, num_key_value_heads=2)
    ),
    "llama-mha-linear-rope": lambda: random_model(
        LlamaForCausalLM,
        LlamaConfig(
            **SHAPE, num_key_value_heads=4, rope_scaling={"rope_type": "linear", "factor": 2.0}
        ),
    ),
    "qwen2-qkv-bias": lambda: random_model(
        Qwen2ForCausalLM, Qwen2Config(**SHAPE, num_key_value_heads=1)
    ),
}


def decode(model, fused: bool, steps: int = 7, drop_at: int = 3) -> list[torch.Tensor]:
    """Two left-padded prompts prefilled once, read by four rows (a group's shared prefill),
    ``steps`` greedy tokens, row 1 leaving at step ``drop_at``: every step's logits, by the
    fused step or by the model's ``forward`` on its cache."""
    ids = torch.tensor([[0, 0, 5, 9, 14], [7, 3, 8, 21, 4]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    width, capacity = ids.shape[1], ids.shape[1] + steps
    rows = torch.tensor([0, 0, 1, 1])
    out = []
    with torch.inference_mode():
        cache = preallocated_cache(model.config, capacity)
        kw = {cache_argument(model): cache}  # `cache`, or `past_key_values` in older transformers
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, **kw).logits
        logits, mask, pos = logits[rows, -1], mask[rows], pos[rows, -1] + 1
        full = torch.cat([mask, torch.ones((4, steps), dtype=mask.dtype)], dim=1)
        if fused:
            decoder = FusedDecoder(FusedWeights(model), cache, full, capacity, rows)
        else:
            cache.batch_select_indices(rows)
        for step in range(steps):
            out.append(logits.float())
            token = logits.argmax(-1)
            if step == drop_at:
                keep = torch.tensor([0, 2, 3])
                token, pos, full = token[keep], pos[keep], full[keep]
                decoder.select(keep) if fused else cache.batch_select_indices(keep)
            if fused:
                logits = decoder.step(token, pos)
            else:
                step_mask = full[:, : width + step + 1]
                logits = model(
                    input_ids=token[:, None], attention_mask=step_mask,
                    position_ids=pos[:, None], **kw,
                ).logits[:, -1]  # fmt: skip
            pos = pos + 1
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_logits_equal_the_models_forward_up_to_rounding(name):
    model = MODELS[name]()
    assert unsupported(model) is None
    reference, fused = decode(model, fused=False), decode(model, fused=True)
    assert [t.shape for t in fused] == [t.shape for t in reference]
    assert reference[-1].shape[0] == 3  # the dropped row left
    for step, (a, b) in enumerate(zip(reference, fused, strict=True)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=f"step {step}")
        assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_bf16_model_stays_within_bf16_rounding():
    model = MODELS["llama-gqa"]().to(torch.bfloat16)
    reference, fused = decode(model, fused=False), decode(model, fused=True)
    for a, b in zip(reference, fused, strict=True):
        torch.testing.assert_close(b, a, rtol=0.05, atol=0.05)


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (dict(mlp_bias=True), "biases on o_proj or the MLP"),
        (dict(hidden_act="gelu"), "activation"),
        (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rotary scaling"),
    ],
)
def test_unsupported_models_say_why(edit, reason):
    model = random_model(LlamaForCausalLM, LlamaConfig(**SHAPE, **edit))
    assert reason in unsupported(model)
    assert "model type" in unsupported(torch.nn.Linear(2, 2))


def test_a_wrapped_projection_is_not_read_as_plain_weights():
    """An adapter or a quantised layer computes more than its ``weight``: the fused step
    would skip it, so such a model decodes with its forward."""

    class Adapted(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) + 1.0

    model = MODELS["llama-gqa"]()
    old = model.model.layers[1].self_attn.v_proj
    model.model.layers[1].self_attn.v_proj = Adapted(old.in_features, old.out_features, bias=False)
    assert unsupported(model) == "v_proj is Adapted, not a plain torch.nn.Linear"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_policy_model(init_model(tmp_path_factory.mktemp("tiny") / "m", corpus_seeds=2))


def requests(tokenizer) -> list[GenerationRequest]:
    """Sampled and greedy rows, shared and distinct prompts, different budgets, a stop token
    and a nucleus: rows leave the batch at different steps."""
    prompts = [tokenizer.encode(text) for text in ("3 + 4 =", "12 + 30 = 42. 5 + 6 =", "7 =")]
    stop = tuple(range(3, len(tokenizer), 5))  # a fifth of the vocabulary: rows stop early
    out = []
    for i in range(12):
        params = SamplingParams(
            max_new_tokens=6 + i % 5,
            temperature=(1.0, 0.7)[i % 2],
            greedy=i % 6 == 5,
            top_p=0.9 if i % 4 == 3 else 1.0,
            seed=100 + i,
            stop_token_ids=stop if i % 3 == 0 else (),
        )
        out.append(GenerationRequest(prompt_ids=tuple(prompts[i % 3]), params=params))
    return out


def test_policy_generates_the_tokens_of_the_models_forward(loaded):
    model, tokenizer = loaded
    fused = HFPolicy(model, tokenizer)
    assert fused.fused_unsupported is None
    reqs = requests(tokenizer)
    got = fused.generate(reqs)
    want = HFPolicy(model, tokenizer, decode="model").generate(reqs)
    assert {g.finish_reason for g in want} == {"stop", "length"}
    for a, b in zip(want, got, strict=True):
        assert (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), rtol=1e-5, atol=1e-5
        )
    assert fused.generate(reqs) == got  # the same seeds, the same numbers


def test_unsupported_model_decodes_with_its_forward(loaded):
    _, tokenizer = loaded
    config = LlamaConfig(**{**SHAPE, "vocab_size": len(tokenizer)}, mlp_bias=True)
    model = random_model(LlamaForCausalLM, config)
    policy = HFPolicy(model, tokenizer)
    assert "biases" in policy.fused_unsupported
    reqs = requests(tokenizer)
    assert policy.generate(reqs) == HFPolicy(model, tokenizer, decode="model").generate(reqs)


def test_decode_must_be_a_known_name(loaded):
    with pytest.raises(ValueError, match="decode must be 'fused' or 'model'"):
        HFPolicy(*loaded, decode="compiled")
