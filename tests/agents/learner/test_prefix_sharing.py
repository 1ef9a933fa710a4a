"""One forward per distinct prompt: the same log-probs, entropies and gradients as the full
forward, on single- and multi-turn rows, with fewer tokens through the model."""

from __future__ import annotations

import copy

import pytest
import torch

from forkgym.agents.learner.logprobs import token_logprobs_and_entropy
from forkgym.agents.learner.prefix_sharing import (
    plan_prefixes,
    shared_prefix_logprobs,
    supports_prefix_sharing,
)
from forkgym.agents.models import load_policy_model
from forkgym.agents.padding import pad_sequences, padding_mask

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_policy_model(tiny_model_dir)[0]


def rows_of(spec):
    """``spec``: (prompt, [(tokens, is_action), ...]) per row -> ids, mask, action mask."""
    ids, actions = [], []
    for prompt, parts in spec:
        row, act = list(prompt), [False] * len(prompt)
        for tokens, is_action in parts:
            row += tokens
            act += [is_action] * len(tokens)
        ids.append(row)
        actions.append(act)
    return (
        pad_sequences(ids),
        padding_mask([len(r) for r in ids]).long(),
        pad_sequences(actions, dtype=torch.bool),
    )


A, B = [5, 6, 7, 8, 9], [11, 12, 13]  # two prompts of different lengths
SPEC = [
    (A, [([20, 21, 22], True)]),
    (A, [([23], True)]),
    (A, [([24, 25], True), ([30, 31, 32], False), ([26, 27], True)]),  # a tool turn
    (B, [([40, 41, 42, 43, 44, 45], True)]),
    (B, [([46, 47], True), ([50], False), ([48], True)]),
    (A, [([20, 21], False)]),  # actions masked out of the loss: all suffix after one token
]


def test_the_layout_runs_each_distinct_prompt_once():
    ids, mask, action = rows_of(SPEC)
    layout = plan_prefixes(ids, mask, action)
    assert layout is not None
    # A (rows 0-2), B (rows 3-4), and row 5's first token alone
    assert layout.distinct == 3
    assert layout.row_prompt.tolist() == [0, 0, 0, 1, 1, 2]
    assert layout.prompt_lengths.tolist() == [5, 5, 5, 3, 3, 1]
    assert layout.prompt_ids[1].tolist() == [0, 0, *B]  # left-padded
    assert layout.suffix_ids[2].tolist() == [24, 25, 30, 31, 32, 26, 27]


def test_nothing_to_score_falls_back():
    ids, mask, action = rows_of([([5], [])])
    assert plan_prefixes(ids, mask, action) is None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_entropies_and_gradients_equal_the_full_forward(model, temperature):
    ids, mask, action = rows_of(SPEC)
    real = mask.bool().clone()
    real[:, 0] = False  # token 0 has no prefix: 0 in the full forward, never scored
    layout = plan_prefixes(ids, mask, action)
    scored = torch.zeros_like(real)  # every token after its row's prompt
    for row, n in enumerate(layout.prompt_lengths.tolist()):
        scored[row, n:] = real[row, n:]

    full_model, shared_model = copy.deepcopy(model), copy.deepcopy(model)
    full_lp, full_ent = token_logprobs_and_entropy(full_model, ids, mask, temperature)
    lp, ent = shared_prefix_logprobs(shared_model, layout, temperature, entropy=True)
    assert lp.shape == ids.shape and ent is not None and not ent.requires_grad
    torch.testing.assert_close(lp[scored], full_lp[scored], rtol=0, atol=2e-5)
    torch.testing.assert_close(ent[scored], full_ent[scored], rtol=0, atol=2e-5)
    assert not lp[~scored & mask.bool()].any()  # prompts hold 0

    weights = torch.linspace(-1.0, 1.0, int(action.sum()))  # a loss over the action tokens
    (full_lp[action] * weights).sum().backward()
    (lp[action] * weights).sum().backward()
    for (name, p), q in zip(full_model.named_parameters(), shared_model.parameters(), strict=True):
        scale = float(p.grad.abs().max())  # sums in another order: rounding relative to the largest
        assert scale > 0, name
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-5 * scale, msg=name)


def test_the_model_reads_fewer_tokens(model):
    """K = 4 copies of one 9-token prompt, 3 tokens each: 9 + 4 * 2 positions, not 4 * 12."""
    prompt = list(range(5, 14))
    ids, mask, action = rows_of([(prompt, [([20 + k, 30, 40], True)]) for k in range(4)])
    seen = []
    hook = model.model.embed_tokens.register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].numel())
    )
    try:
        shared_prefix_logprobs(model, plan_prefixes(ids, mask, action))
    finally:
        hook.remove()
    assert seen == [9, 4 * 2]  # the suffix's last token is never fed: it scores nothing


def test_a_module_without_a_cache_argument_is_not_shared(model):
    class Wrapped(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, use_cache=use_cache)  # fmt: skip

    assert supports_prefix_sharing(model)
    assert not supports_prefix_sharing(Wrapped(model))


@pytest.mark.parametrize("kind", ["separate", "shared"])
def test_critic_values_and_gradients_equal_the_full_forward(model, kind):
    from forkgym.agents.advantages.ppo import VALUE_MODELS

    ids, mask, action = rows_of(SPEC)
    full = VALUE_MODELS[kind](copy.deepcopy(model))
    torch.manual_seed(0)  # the head below, whatever ran before
    torch.nn.init.normal_(full.head.weight, std=0.1)  # a zero head would hide the trunk
    shared = copy.deepcopy(full)
    if kind == "shared":
        shared._policy = full._policy  # the policy's trunk: not the critic's to copy
    layout = plan_prefixes(ids, mask, action)
    scored = torch.zeros_like(action)
    for row, n in enumerate(layout.prompt_lengths.tolist()):
        scored[row, n : int(mask[row].sum())] = True
    v_full = full(ids, mask)
    v_shared = shared(ids, mask, action)
    torch.testing.assert_close(v_shared[scored], v_full[scored], rtol=0, atol=1e-5)
    assert all(not v_shared[row, :n].any() for row, n in enumerate(layout.prompt_lengths.tolist()))
    target = torch.linspace(0.0, 1.0, int(action.sum()))
    ((v_full[action] - target) ** 2).sum().backward()
    ((v_shared[action] - target) ** 2).sum().backward()
    # the head's bias gets the sum of the residuals, which can cancel to near 0: its rounding
    # scales with the terms summed, not with the sum
    residuals = float((2 * (v_full[action] - target)).detach().abs().sum())
    for (name, p), q in zip(full.named_parameters(), shared.parameters(), strict=True):
        scale = residuals if name == "head.bias" else float(p.grad.abs().max())
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-5 * scale, msg=name)
    if kind == "shared":  # the policy's trunk never gets a gradient from the value loss
        assert all(p.grad is None for p in full._policy[0].parameters())


@pytest.mark.parametrize("arch", ["qwen2", "mistral", "gpt2"])
def test_other_architectures_share_prompts_exactly(arch):
    """Hub models run by name (Qwen2.5, Mistral, GPT-2 style): tiny ones of each architecture,
    built from a config here, give the full forward's log-probs and gradients."""
    from transformers import AutoConfig, AutoModelForCausalLM

    small = {"vocab_size": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if arch == "gpt2":
        small.update(n_embd=32, n_layer=2, n_head=2, n_positions=64)
    else:
        small.update(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    torch.manual_seed(0)
    # eval: GPT-2's dropout would draw other masks on each side
    full_model = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch, **small)).eval()
    shared_model = copy.deepcopy(full_model)
    assert supports_prefix_sharing(shared_model)
    ids, mask, action = rows_of(
        [([5, 6, 7, 8], [([9, 10, 11], True)]), ([5, 6, 7, 8], [([12], True), ([13], False), ([14], True)]),
         ([3, 4], [([15, 16], True)])]
    )  # fmt: skip
    layout = plan_prefixes(ids, mask, action)
    full_lp, _ = token_logprobs_and_entropy(full_model, ids, mask)
    lp, _ = shared_prefix_logprobs(shared_model, layout)
    torch.testing.assert_close(lp[action], full_lp[action], rtol=0, atol=2e-5)
    full_lp[action].sum().backward()
    lp[action].sum().backward()
    for (name, p), q in zip(full_model.named_parameters(), shared_model.parameters(), strict=True):
        if p.grad is None:
            assert q.grad is None, name
            continue
        scale = float(p.grad.abs().max()) or 1.0
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-5 * scale, msg=name)
