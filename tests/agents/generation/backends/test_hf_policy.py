"""HFPolicy: batched KV-cached decoding with per-request sampling settings and seeds."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import replace

import gymnasium as gym
import pytest
import torch

import forkgym.envs  # noqa: F401  (registers the envs)
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.policy import GenerationRequest, Policy, SamplingParams
from forkgym.agents.learner.logprobs import (
    token_entropy,
    token_logprobs,
    token_logprobs_and_entropy,
)
from forkgym.agents.models import init_model, load_policy_model, model_config

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("tiny") / "model", corpus_seeds=8)


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_policy_model(model_dir)


@pytest.fixture(scope="module")
def prompts(loaded) -> list[tuple[int, ...]]:
    """Real chat prompts of different lengths (arithmetic and word problems)."""
    _, tokenizer = loaded
    out = []
    for env_id in ["forkgym/Arithmetic-v0", "forkgym/WordProblems-v0"]:
        env = gym.make(env_id)
        for seed in range(4):
            obs, _ = env.reset(seed=seed)
            messages = list(obs["messages"])[1:] if seed % 2 else list(obs["messages"])
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            out.append(tuple(ids))
    assert len({len(p) for p in out}) >= 4
    return out


def sampled(seed: int | None, n: int = 12, temperature: float = 1.0, top_p: float = 1.0, **kw):
    return SamplingParams(max_new_tokens=n, temperature=temperature, top_p=top_p, seed=seed, **kw)


def left_pad(prompts, pad=0):
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return ids, mask


def test_is_a_policy(loaded):
    policy = HFPolicy(*loaded)
    assert isinstance(policy, Policy)
    assert policy.weight_version == 0


def test_greedy_equals_transformers_generate(loaded, prompts):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer)
    n = 12
    ours = policy.generate(
        [GenerationRequest(p, SamplingParams(max_new_tokens=n, greedy=True)) for p in prompts]
    )
    ids, mask = left_pad(prompts)
    with torch.inference_mode():
        theirs = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            eos_token_id=None,
            pad_token_id=0,
        )[:, ids.shape[1] :]
        alone = model.generate(
            input_ids=torch.tensor([prompts[0]]),
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(prompts[0]) :]
    for row, gen in enumerate(ours):
        assert gen.finish_reason == "length"
        assert list(gen.token_ids) == theirs[row].tolist()
    assert list(ours[0].token_ids) == alone.tolist()


def test_same_seed_same_tokens_alone_or_in_any_batch(loaded, prompts):
    policy = HFPolicy(*loaded)
    target = GenerationRequest(prompts[3], sampled(seed=1234, n=16, temperature=0.9, top_p=0.95))
    alone = policy.generate([target])[0]
    again = policy.generate([target])[0]
    assert alone == again
    # other prompts of other lengths, greedy and sampled rows, rows that stop or end early
    # (so the batch shrinks around the target), and the target twice
    others = [
        GenerationRequest(p, sampled(seed=i, n=3 + i, temperature=0.5 + 0.1 * i))
        for i, p in enumerate(prompts)
        if p != prompts[3]
    ]
    others.append(GenerationRequest(prompts[0], SamplingParams(max_new_tokens=5, greedy=True)))
    others.append(
        GenerationRequest(prompts[5], sampled(seed=7, n=30, stop_token_ids=tuple(range(3, 600))))
    )
    batch = [*others[:3], target, *others[3:], target]
    out = policy.generate(batch)
    for got in (out[3], out[-1]):
        assert got.token_ids == alone.token_ids
        assert got.finish_reason == alone.finish_reason
        assert max(abs(a - b) for a, b in zip(got.logprobs, alone.logprobs, strict=True)) < 1e-5
    # chunked into several batches: the same again
    small_batches = HFPolicy(*loaded, max_batch=3).generate(batch)
    assert [g.token_ids for g in small_batches] == [g.token_ids for g in out]


def test_a_group_prefills_its_prompt_once_and_samples_what_each_request_would_alone(
    loaded, prompts
):
    policy = HFPolicy(*loaded)
    group = [GenerationRequest(prompts[2], sampled(seed=s, n=6)) for s in range(4)]
    group.append(GenerationRequest(prompts[4], sampled(seed=9, n=6)))
    prefill_rows = []
    hook = policy.model.model.embed_tokens.register_forward_hook(
        lambda _m, args, _out: prefill_rows.append(args[0].shape) if args[0].shape[1] > 1 else None
    )
    try:
        out = policy.generate(group)
    finally:
        hook.remove()
    assert [shape[0] for shape in prefill_rows] == [2]  # two distinct prompts, one forward
    for request, got in zip(group, out, strict=True):
        alone = policy.generate([request])[0]
        assert got.token_ids == alone.token_ids
        assert max(abs(a - b) for a, b in zip(got.logprobs, alone.logprobs, strict=True)) < 1e-5
    assert len({g.token_ids for g in out[:4]}) > 1  # the seeds, not the shared cache, decide


def test_different_seeds_differ_and_unseeded_requests_use_the_policy_stream(loaded, prompts):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer)
    outs = policy.generate([GenerationRequest(prompts[0], sampled(seed=s, n=16)) for s in range(6)])
    assert len({g.token_ids for g in outs}) == 6
    unseeded = [GenerationRequest(p, sampled(seed=None, n=8)) for p in prompts[:4]]
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    a1 = HFPolicy(model, tokenizer, seed=5).generate(unseeded)
    assert torch.equal(torch.random.get_rng_state(), state)  # never the global RNG
    b = HFPolicy(model, tokenizer, seed=6).generate(unseeded)
    p = HFPolicy(model, tokenizer, seed=5)
    a2, a3 = p.generate(unseeded), p.generate(unseeded)
    assert a1 == a2
    assert a1 != b and a2 != a3  # another stream; the stream moves on between calls


def test_stop_tokens_and_lengths(loaded, prompts):
    policy = HFPolicy(*loaded)
    params = sampled(seed=99, n=20)
    free = policy.generate([GenerationRequest(prompts[1], params)])[0]
    tokens = list(free.token_ids)
    cut = max(i for i in range(len(tokens)) if tokens[i] not in tokens[:i])  # a new token's place
    assert cut > 2, tokens
    stop = tokens[cut]
    requests = [
        GenerationRequest(prompts[1], replace(params, stop_token_ids=(1023, stop))),
        GenerationRequest(prompts[2], SamplingParams(max_new_tokens=7, greedy=True)),
        GenerationRequest(prompts[3], sampled(seed=3, n=1)),
    ]
    stopped, short, one = policy.generate(requests)
    assert stopped.finish_reason == "stop"
    assert list(stopped.token_ids) == tokens[: cut + 1]  # the stop token included
    assert stopped.logprobs == pytest.approx(free.logprobs[: cut + 1], abs=1e-5)
    assert short.finish_reason == "length" and len(short.token_ids) == 7
    assert one.finish_reason == "length" and len(one.token_ids) == 1 == len(one.logprobs)
    # a stop token that is also the last allowed token counts as a stop
    last = replace(params, max_new_tokens=cut + 1, stop_token_ids=(stop,))
    last_gen = policy.generate([GenerationRequest(prompts[1], last)])[0]
    assert last_gen.finish_reason == "stop" and len(last_gen.token_ids) == cut + 1
    # bad requests are refused before anything runs or is drawn from the policy's seed stream
    unseeded = GenerationRequest(prompts[0], sampled(seed=None, n=4))
    bad_stop = GenerationRequest(prompts[0], SamplingParams(stop_token_ids=(5000,)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        policy.generate([unseeded, bad_stop])
    with pytest.raises(ValueError, match="empty prompt"):
        policy.generate([unseeded, GenerationRequest((), SamplingParams())])
    assert policy.generate([unseeded]) == HFPolicy(*loaded).generate([unseeded])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_recomputation(loaded, prompts, temperature):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer)
    requests = [
        GenerationRequest(
            p, sampled(seed=i, n=10, temperature=temperature, top_p=0.9 if i % 2 else 1.0)
        )
        for i, p in enumerate(prompts)
    ]
    if temperature == 1.0:  # greedy rows report log-probs at T = 1
        requests.append(
            GenerationRequest(prompts[0], SamplingParams(max_new_tokens=10, greedy=True))
        )
    gens = policy.generate(requests)
    sequences = [
        list(r.prompt_ids) + list(g.token_ids) for r, g in zip(requests, gens, strict=True)
    ]
    starts = [len(r.prompt_ids) for r in requests]
    recomputed = policy.logprobs(sequences, starts, temperature=temperature)
    width = max(map(len, sequences))
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, s in enumerate(sequences):  # right padding here; generation was left-padded
        ids[row, : len(s)] = torch.tensor(s)
        mask[row, : len(s)] = 1
    with torch.no_grad():
        dense = token_logprobs(model, ids, mask, temperature=temperature)
    for row, gen in enumerate(gens):
        behaviour = torch.tensor(gen.logprobs)
        assert recomputed[row].dtype == torch.float32
        torch.testing.assert_close(recomputed[row], behaviour, atol=1e-5, rtol=0)
        torch.testing.assert_close(
            dense[row, starts[row] : len(sequences[row])], behaviour, atol=1e-5, rtol=0
        )
    one_by_one = HFPolicy(model, tokenizer, max_logit_elements=1).logprobs(
        sequences, starts, temperature=temperature
    )  # one sequence per forward: the same values
    for a, b in zip(one_by_one, recomputed, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="starts"):
        policy.logprobs([[1, 2, 3]], [0])


def test_token_logprobs_alignment_gradients_and_entropy(loaded):
    model, _ = loaded
    ids = torch.tensor([[5, 6, 7, 8], [0, 0, 9, 10]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])  # left padding is fine too
    lp, ent = token_logprobs_and_entropy(model, ids, mask)
    assert lp.shape == ent.shape == (2, 4)
    assert lp[:, 0].eq(0).all() and ent[:, 0].eq(0).all()
    with torch.no_grad():
        logits = model(input_ids=ids[:1, :3]).logits[0, -1]
    assert lp[0, 3].item() == pytest.approx(torch.log_softmax(logits, -1)[8].item(), abs=1e-5)
    with torch.no_grad():
        alone = model(input_ids=ids[1:, 2:3]).logits[0, -1]
    assert lp[1, 3].item() == pytest.approx(torch.log_softmax(alone, -1)[10].item(), abs=1e-5)
    assert 0 < ent[0, 1].item() <= math.log(1024) + 1e-4
    torch.testing.assert_close(token_entropy(model, ids, mask), ent)
    (lp * mask).sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad(set_to_none=True)


def controlled_model(probs: dict[int, float], vocab: int = 1024):
    """A Llama whose next-token distribution is ``probs`` (rest uniform) at every position."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(model_config("tiny", vocab_size=vocab))
    rest = (1.0 - sum(probs.values())) / (vocab - len(probs))
    p = torch.full((vocab,), rest, dtype=torch.float64)
    for token, value in probs.items():
        p[token] = value
    head = torch.nn.Linear(model.config.hidden_size, vocab, bias=True)
    with torch.no_grad():
        model.model.norm.weight.zero_()  # hidden state 0, so the logits are the bias
        head.weight.zero_()
        head.bias.copy_(p.log().float())
    model.lm_head = head
    return model.eval(), p


def test_top_p_samples_only_from_the_nucleus():
    probs = {500: 0.4, 7: 0.25, 900: 0.15, 3: 0.1}  # the other 1020 tokens share 0.1
    model, p = controlled_model(probs)
    policy = HFPolicy(model)
    prompt = (11, 12, 13)

    def draw(temperature, top_p, rows=48, n=25):
        gens = policy.generate(
            [
                GenerationRequest(
                    prompt, sampled(seed=s, n=n, temperature=temperature, top_p=top_p)
                )
                for s in range(rows)
            ]
        )
        return gens, Counter(t for g in gens for t in g.token_ids)

    # T = 1, top_p = 0.7: nucleus {500, 7, 900} (mass 0.8; 0.65 < 0.7 before the third)
    gens, counts = draw(1.0, 0.7)
    assert set(counts) == {500, 7, 900}
    total = sum(counts.values())
    for token, mass in [(500, 0.4), (7, 0.25), (900, 0.15)]:
        assert abs(counts[token] / total - mass / 0.8) < 0.05
    for g in gens:  # full-vocabulary log-probs, not renormalised over the nucleus
        for t, lp in zip(g.token_ids, g.logprobs, strict=True):
            assert lp == pytest.approx(math.log(p[t].item()), abs=1e-5)
    # T = 0.5 sharpens to ~(0.63, 0.25, 0.09, 0.04, ...): the nucleus at that temperature is {500, 7}
    gens, counts = draw(0.5, 0.7)
    assert set(counts) == {500, 7}
    sharpened = torch.softmax(p.log() / 0.5, -1)
    assert gens[0].logprobs[0] == pytest.approx(
        math.log(sharpened[gens[0].token_ids[0]].item()), abs=1e-5
    )
    # top_p = 1 samples the tail too (~10% of the draws)
    _, counts = draw(1.0, 1.0)
    tail = sum(c for t, c in counts.items() if t not in probs) / sum(counts.values())
    assert 0.05 < tail < 0.15


def test_sync_weights(model_dir, prompts):
    from transformers import LlamaForCausalLM

    model, tokenizer = load_policy_model(model_dir)  # a copy of its own: we change it
    torch.manual_seed(1)
    other = LlamaForCausalLM(model.config).eval()  # same architecture, other weights
    policy = HFPolicy(model, tokenizer)
    requests = [
        GenerationRequest(p, SamplingParams(max_new_tokens=8, greedy=True)) for p in prompts[:4]
    ]
    before = policy.generate(requests)
    target = HFPolicy(other, tokenizer).generate(requests)
    assert before != target
    policy.sync_weights(other.state_dict())
    assert policy.weight_version == 1
    assert policy.generate(requests) == target
    policy.sync_weights(None)  # shared model: nothing copied, version bumped
    assert policy.weight_version == 2
    torch.manual_seed(2)
    third = LlamaForCausalLM(model.config).eval()
    policy.sync_weights(third)  # a module: its weights are loaded
    assert policy.weight_version == 3
    assert policy.generate(requests) == HFPolicy(third, tokenizer).generate(requests)
    policy.sync_weights(policy.model)  # its own module: nothing to copy
    assert policy.weight_version == 4 and policy.model is model
    policy.sync_weights(policy.model, version=4)  # a resume sets the version it had
    assert policy.weight_version == 4
    partial = dict(other.state_dict())
    partial.pop("model.norm.weight")
    with pytest.raises(RuntimeError, match="Missing key"):
        policy.sync_weights(partial)
    assert policy.weight_version == 4


def test_shared_model_trains_after_generation(model_dir, prompts):
    model, tokenizer = load_policy_model(model_dir)
    model.train()
    policy = HFPolicy(model, tokenizer)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = policy.generate([GenerationRequest(prompts[0], sampled(seed=0, n=6))])[0]
    assert model.training  # the mode is restored
    ids = torch.tensor([list(prompts[0]) + list(gen.token_ids)])
    loss = -token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompts[0]) :].sum()
    loss.backward()
    optimizer.step()
    policy.sync_weights(None)
    after = policy.generate([GenerationRequest(prompts[0], sampled(seed=0, n=6))])[0]
    assert sum(after.logprobs) > sum(gen.logprobs) or after.token_ids != gen.token_ids


def test_timings_tiny_model(loaded, capsys):
    """Printed, not asserted: what a training step's generation and update cost here."""
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer)
    g = torch.Generator().manual_seed(0)
    prompts = [tuple(torch.randint(3, 1024, (30,), generator=g).tolist()) for _ in range(64)]
    requests = [
        GenerationRequest(p, sampled(seed=i, n=16, temperature=1.0)) for i, p in enumerate(prompts)
    ]
    policy.generate(requests[:4])  # warm-up
    t0 = time.perf_counter()
    gens = policy.generate(requests)
    t_gen = time.perf_counter() - t0
    assert all(len(x.token_ids) == 16 for x in gens)
    ids = torch.randint(3, 1024, (64, 40), generator=g)
    model.train()
    t0 = time.perf_counter()
    lp = token_logprobs(model, ids, torch.ones_like(ids))
    lp.sum().backward()
    t_train = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    model.eval()
    with capsys.disabled():
        print(
            f"\ntiny model ({sum(p.numel() for p in model.parameters()):,} params, "
            f"{torch.get_num_threads()} threads): generate 64 prompts x 30 tokens -> 16 new tokens "
            f"{t_gen:.3f} s ({64 * 16 / t_gen:,.0f} new tokens/s); forward+backward 64 x 40 "
            f"tokens {t_train:.3f} s"
        )


@pytest.mark.parametrize("steps", [1, 7, 130])
def test_token_k_uses_the_kth_uniform_of_the_rows_stream(steps):
    """Token k of a row uses the k-th float64 uniform of its seed's stream, whatever the
    batch's budget and whichever rows are still live; greedy rows draw nothing."""
    from forkgym.agents.generation.backends.hf_policy import _Uniforms

    seeds = [11, None, 12]
    uniforms = _Uniforms(seeds, steps)
    streams = {s: torch.rand(200, generator=torch.Generator().manual_seed(s), dtype=torch.float64) for s in (11, 12)}  # fmt: skip
    live = [0, 1, 2]
    for step in range(steps):
        if step == min(4, steps - 1):
            live = [0, 1]  # row 2 finished
            uniforms.keep(torch.tensor([0, 1]))
        got = uniforms.at(step)
        assert got.shape == (len(live),) and got.dtype == torch.float64
        for row, value in zip(live, got.tolist(), strict=True):
            assert value == (0.0 if seeds[row] is None else streams[seeds[row]][step].item())
    assert _Uniforms([None, None], steps).at(0) is None


def test_inverse_cdf_draws_from_the_distribution_and_never_a_zero():
    """Many draws of one row's distribution match it (chi-square, fixed seeds); tokens of
    probability 0 (outside a nucleus) are never drawn, even at the ends of [0, 1)."""
    from scipy.stats import chisquare

    from forkgym.agents.generation.backends.hf_policy import inverse_cdf

    probs = torch.tensor([0.0, 0.3, 0.0, 0.05, 0.45, 0.2, 0.0])
    n = 20_000
    u = torch.rand(n, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    tokens = inverse_cdf(probs.expand(n, -1), u)
    counts = torch.bincount(tokens, minlength=len(probs))
    assert counts[probs == 0].sum() == 0
    kept = probs > 0
    assert chisquare(counts[kept].numpy(), (probs[kept] * n).numpy()).pvalue > 1e-3
    edges = torch.tensor([0.0, 1.0 - 2.0**-53, 0.32, 0.5], dtype=torch.float64)
    assert inverse_cdf(probs.expand(4, -1), edges).tolist() == [1, 5, 3, 4]
    # unnormalised rows (a nucleus) are drawn from in proportion
    assert inverse_cdf(torch.tensor([[0.0, 2.0, 2.0]]), torch.tensor([0.5])).tolist() == [2]


def test_noise_on_the_models_device_is_an_option_and_equals_the_cpu_stream_on_the_cpu(
    loaded, prompts
):
    """``noise_device="model"`` draws each row's uniforms where the model is: on a CPU model that
    is the CPU stream itself (the same tokens); on a GPU, the device's own stream, measured by
    benchmarks/gpu_check.py. A wrong value is refused."""
    requests = [GenerationRequest(p, sampled(seed=40 + i, n=10)) for i, p in enumerate(prompts)]
    cpu = HFPolicy(*loaded).generate(requests)
    model = HFPolicy(*loaded, noise_device="model").generate(requests)
    assert [g.token_ids for g in model] == [g.token_ids for g in cpu]
    with pytest.raises(ValueError, match="noise_device must be 'cpu' or 'model'"):
        HFPolicy(*loaded, noise_device="gpu")
