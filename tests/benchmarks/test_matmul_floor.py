"""The matrix-product floor lists the products the model really runs: torch's own FLOP counter
over forkgym's shared-prefix learner pass and its decode loop counts the same matrix FLOPs."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from lib.matmul_floor import (
    StepShape,
    gemm_seconds,
    linear_layers,
    matmul_floor,
    step_gemms,
)
from torch.utils.flop_counter import FlopCounterMode

from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
from forkgym.agents.learner.prefix_sharing import plan_prefixes, shared_prefix_logprobs
from forkgym.agents.models import load_policy_model

PROMPTS, K, PROMPT, COMPLETION = 3, 2, 5, 4


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_policy_model(tiny_model_dir)[0]


def flops(counts: Counter) -> int:
    return sum(2 * m * k * n * c for (m, k, n), c in counts.items())


def matrix_flops(counter: FlopCounterMode) -> int:
    """The linear layers' products torch counted: ``mm``, ``addmm`` and ``bmm`` (a linear layer
    on a strided 3-D input), less attention's. The learner's attention is the CPU's fused
    kernel, counted apart; the fused decode step's is a ``baddbmm`` (the scores) and a ``bmm``
    of the same size (the weighted values), so the ``bmm`` count carries the ``baddbmm``
    count once more."""
    ops = {str(op): v for op, v in counter.get_flop_counts()["Global"].items()}
    linear = ops.get("aten.mm", 0) + ops.get("aten.addmm", 0) + ops.get("aten.bmm", 0)
    return linear - ops.get("aten.baddbmm", 0)


def test_linear_layers_follow_the_config(model):
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    q, kv = c.num_attention_heads * head_dim, c.num_key_value_heads * head_dim
    per_layer = c.hidden_size * (2 * q + 2 * kv) + 3 * c.hidden_size * c.intermediate_size
    trunk, head = linear_layers(model)
    assert sum(i * o for i, o in trunk) == c.num_hidden_layers * per_layer
    assert head == (c.hidden_size, c.vocab_size)


def test_learner_products_are_what_autograd_runs(model):
    torch.manual_seed(0)
    prompts = torch.randint(3, 900, (PROMPTS, PROMPT))
    ids = torch.cat([prompts.repeat_interleave(K, 0), torch.randint(3, 900, (PROMPTS * K, COMPLETION))], 1)  # fmt: skip
    action = torch.zeros_like(ids)
    action[:, PROMPT:] = 1
    layout = plan_prefixes(ids, torch.ones_like(ids), action)
    with FlopCounterMode(display=False) as counter:
        logprobs, _ = shared_prefix_logprobs(model, layout)
        logprobs.sum().backward()
    model.zero_grad()
    gemms = step_gemms(model, StepShape(PROMPTS, K, PROMPT, COMPLETION))
    assert flops(gemms["learner"]) == matrix_flops(counter)


def test_generation_products_are_what_the_decode_loop_runs(model):
    policy = HFPolicy(model)
    prompt = tuple(range(10, 10 + PROMPT))
    params = [SamplingParams(max_new_tokens=COMPLETION, seed=s) for s in range(K)]
    requests = [
        GenerationRequest(tuple(t + p for t in prompt), sp) for p in range(PROMPTS) for sp in params
    ]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = policy.generate(requests)
    assert all(len(g.token_ids) == COMPLETION for g in out)  # no stop tokens: all full length
    gemms = step_gemms(model, StepShape(PROMPTS, K, PROMPT, COMPLETION))
    assert flops(gemms["generation"]) == matrix_flops(counter)


def test_floor_times_every_stage(model):
    shape = StepShape(1, 2, 3, 2)
    floor = matmul_floor(model, shape)
    assert set(floor) == {"generation", "generation_gflop", "learner", "learner_gflop"}
    for stage, counts in step_gemms(model, shape).items():
        assert floor[f"{stage}_gflop"] == pytest.approx(flops(counts) / 1e9)
        assert floor[stage] > 0
    assert gemm_seconds(Counter()) == 0.0
