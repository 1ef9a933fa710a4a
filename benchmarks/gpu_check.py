"""The prepared GPU check: what forkgym's torch-only paths do on one CUDA device, in one command.

Nothing here needs vLLM, a package registry or a model hub: the models are built from their
configurations with random weights, and rewards come from a fixed rule on the generated
tokens, so only torch, transformers and forkgym (with its small pure-Python needs) must be
installed. Each section runs on its own (a failure is recorded with its traceback and the
next section runs):

* ``parity``: the default tiny model's (Llama, 1M parameters, random weights) log-probs of
  the same token rows on the CPU in float32, on the device in float32 (TF32 off) and in
  bf16, and prefix-shared against the full forward on the device;
* ``grpo``: the ``transformers`` backend (:class:`~forkgym.agents.generation.backends.hf_policy.HFPolicy`)
  generating K = 8 responses for each of 8 prompts from a Qwen2.5-0.5B-shaped model in bf16
  (Qwen2 architecture, 24 layers, hidden 896, 14/2 heads, vocabulary 151,936, tied
  embeddings), GRPO advantages from a token rule (a response is paid when the sum of its
  token ids is even), one learner update; seconds per step split into generation and update,
  generated tokens per second, peak device memory;
* ``device_noise``: the same generation with the sampling uniforms drawn on the model's
  device (``noise_device="model"``) rather than from per-row CPU generators;
* ``determinism``: the same seeds twice in a row (noise from CPU generators and from the
  device's), with and without ``torch.use_deterministic_algorithms``;
* ``prefix_sharing``: the learner's update on the same batch with each prompt's forward shared
  by its group against every row on its own; ``prefix_sharing_long``: the same on long prompts
  (1,024 tokens) with short answers (32), where sharing saves most;
* ``fsdp``: the learner on an FSDP2-sharded copy (``agents/learner/sharding.py``) in a one-rank
  process group (NCCL for CUDA tensors, gloo for the CPU-side counts): the same update as the
  plain model, its weights compared;
* ``logprob_head``: the learner's log-prob head (``agents/learner/logprobs.py: selected_logprobs``)
  against the plain autograd composition it replaced, on bf16 logits of 8 rows x 512
  positions of the 151,936-token vocabulary: one forward and backward each, seconds and peak
  device memory above the logits, gradients compared;
* ``weight_packing``: the model's weights named and bucketed for an engine
  (``agents/generation/backends/weight_buckets.py``, 64 MiB buckets, fused layers whole), each bucket packed into
  one contiguous device buffer, as a packed IPC push sends it: bytes per second.

Run: ``python benchmarks/gpu_check.py --out DIR`` on a machine with a GPU (figures go to
``DIR/gpu_check.json`` and ``DIR/gpu_check.txt``); ``--device cpu --dry`` runs every section
on tiny shapes on the CPU (CI does, so the check cannot rot before a GPU is at hand). How to
run it on a bare GPU machine with only torch installed: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import platform
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from forkgym.agents.advantages.algorithms import build_algorithm
from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
from forkgym.agents.learner.logprobs import token_logprobs
from forkgym.agents.learner.prefix_sharing import plan_prefixes, shared_prefix_logprobs
from forkgym.agents.learner.stage import Learner
from forkgym.agents.models import QWEN_05B_CONFIG, model_config
from forkgym.agents.run.config import TrainConfig
from forkgym.verifiers import Outcome

QWEN_05B = QWEN_05B_CONFIG
# the same architecture at toy size, for --dry
QWEN_TOY = {
    **QWEN_05B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
}


@dataclass(frozen=True)
class Shape:
    prompts: int
    k: int
    prompt_len: int
    new_tokens: int
    steps: int  # timed GRPO steps, after one warm-up step
    model: dict[str, Any]


FULL = Shape(prompts=8, k=8, prompt_len=64, new_tokens=128, steps=3, model=QWEN_05B)
DRY = Shape(prompts=2, k=4, prompt_len=8, new_tokens=8, steps=1, model=QWEN_TOY)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, float]:
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


def build_qwen(shape: Shape, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Any:
    """A Qwen2 causal LM with the shape's configuration and seeded random weights, built on
    the device directly."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(**shape.model, pad_token_id=0, bos_token_id=None, eos_token_id=None)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    return model


def prompts_for(shape: Shape, vocab: int, seed: int = 1) -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (shape.prompts, shape.prompt_len), generator=g)
    return [tuple(row.tolist()) for row in ids]


def rollout_batch(
    prompts: list[tuple[int, ...]], generations: list[Any], k: int, version: int
) -> RolloutBatch:
    """Groups of K episodes; a response is paid (``correct``) when its token ids sum to an
    even number, a rule no model skill enters, so groups are mixed on any device."""
    groups = []
    for p, prompt in enumerate(prompts):
        episodes = []
        for b in range(k):
            gen = generations[p * k + b]
            ids = list(prompt) + list(gen.token_ids)
            n = len(gen.token_ids)
            status = "correct" if sum(gen.token_ids) % 2 == 0 else "incorrect"
            mask = [0] * len(prompt) + [1] * n
            logprobs = [0.0] * len(prompt) + list(gen.logprobs)
            outcome = Outcome.from_status(status)
            episodes.append(
                Episode(
                    p,
                    b,
                    "sampled",
                    f"t{p}",
                    ids,
                    mask,
                    logprobs,
                    len(prompt),
                    outcome=outcome,
                    weight_version=version,
                )
            )
        groups.append(Group(f"t{p}", p, episodes))
    return RolloutBatch.from_groups(groups, k)


def learner_config(shape: Shape, device: torch.device, **overrides: Any) -> TrainConfig:
    values = dict(
        estimator="grpo",
        k=shape.k,
        prompts_per_step=shape.prompts,
        max_new_tokens=shape.new_tokens,
        lr=1e-6,
        micro_batch_size=shape.prompts * shape.k,
        device=str(device),
    )
    values.update(overrides)
    return TrainConfig(**values)


def generate(policy: HFPolicy, prompts: list[tuple[int, ...]], shape: Shape, step: int) -> list:
    params = [
        SamplingParams(max_new_tokens=shape.new_tokens, temperature=1.0, seed=1000 * step + i)
        for i in range(shape.prompts * shape.k)
    ]
    requests = [
        GenerationRequest(prompts[i // shape.k], params[i]) for i in range(len(params))
    ]  # a group's K requests are adjacent
    return policy.generate(requests)


# -- sections ---------------------------------------------------------------------------------


def section_parity(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cpu_model = LlamaForCausalLM(model_config("tiny")).eval()
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(1, 1024, (1, 24), generator=g).expand(16, -1)
    suffix = torch.randint(1, 1024, (16, 24), generator=g)
    ids = torch.cat([prompt, suffix], dim=1)
    mask = torch.ones_like(ids)
    action = torch.cat([torch.zeros_like(prompt), torch.ones_like(suffix)], dim=1).bool()
    with torch.no_grad():
        ref = token_logprobs(cpu_model, ids, mask)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            dev_model = copy.deepcopy(cpu_model).to(device)
            fp32 = token_logprobs(dev_model, ids.to(device), mask.to(device)).cpu()
            layout = plan_prefixes(ids.to(device), mask.to(device), action.to(device))
            shared = shared_prefix_logprobs(dev_model, layout)[0].cpu()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        bf16 = token_logprobs(dev_model.to(torch.bfloat16), ids.to(device), mask.to(device))
    diff = lambda a, b: float((a[action] - b[action]).abs().max())  # noqa: E731
    return {
        "rows": 16,
        "tokens_scored": int(action.sum()),
        "max_abs_logprob_diff_cpu_fp32_vs_device_fp32": diff(ref, fp32),
        "max_abs_logprob_diff_cpu_fp32_vs_device_bf16": diff(ref, bf16.float().cpu()),
        "max_abs_logprob_diff_device_shared_vs_full_fp32": diff(fp32, shared),
        "mean_abs_logprob": float(ref[action].abs().mean()),
    }


def section_grpo(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    model = build_qwen(shape, device, torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    policy = HFPolicy(model, None, device=device, max_batch=shape.prompts * shape.k)
    config = learner_config(shape, device)
    learner = Learner(model, config, max_episode_tokens=shape.new_tokens)
    algorithm = build_algorithm(config, model)
    prompts = prompts_for(shape, shape.model["vocab_size"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rows = []
    for step in range(shape.steps + 1):
        generations, t_gen = timed(device, lambda s=step: generate(policy, prompts, shape, s))
        batch = rollout_batch(prompts, generations, shape.k, policy.weight_version)
        tokens = TokenBatch.from_rollouts(batch, policy.pad_token_id)
        advantages = algorithm.advantages(batch, tokens)
        update, t_update = timed(device, lambda: learner.update(tokens, advantages.rows, step))  # noqa: B023
        _, t_sync = timed(device, lambda: policy.sync_weights(model))
        new_tokens = sum(len(g.token_ids) for g in generations)
        rows.append(
            {
                "generate_s": t_gen,
                "update_s": t_update,
                "sync_s": t_sync,
                "step_s": t_gen + t_update + t_sync,
                "generated_tokens": new_tokens,
                "generated_tokens_per_s": new_tokens / t_gen,
                "groups_with_signal": float(advantages.metrics.get("est/groups_with_signal", 0)),
                "grad_norm": update.grad_norm,
                "tokens_trained": update.tokens_trained,
            }
        )
    timed_rows = rows[1:]  # the first step warms up kernels and the allocator
    mean = {key: sum(r[key] for r in timed_rows) / len(timed_rows) for key in timed_rows[0]}
    out: dict[str, Any] = {
        "model": "Qwen2 architecture, Qwen2.5-0.5B's configuration, random weights, bf16",
        "parameters": params,
        "prompts": shape.prompts,
        "k": shape.k,
        "prompt_tokens": shape.prompt_len,
        "new_tokens_per_response": shape.new_tokens,
        "timed_steps": len(timed_rows),
        "mean": mean,
        "steps": rows,
    }
    if device.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    args.state["grpo"] = (model, tokens, advantages.rows, prompts)
    return out


def _update_seconds(
    model: Any, tokens: TokenBatch, advantages: torch.Tensor, config: TrainConfig, repeats: int
) -> tuple[float, Any]:
    device = torch.device(config.device)
    learner = Learner(model, config, max_episode_tokens=config.max_new_tokens)
    times = []
    for step in range(repeats + 1):
        _, seconds = timed(device, lambda s=step: learner.update(tokens, advantages, s))
        times.append(seconds)
    return min(times[1:]), learner


def section_prefix_sharing(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    model, tokens, advantages, _ = args.state["grpo"]
    start = copy.deepcopy(model.state_dict())
    out = {}
    for share in (False, True):
        model.load_state_dict(start)
        config = learner_config(shape, device, prefix_sharing=share)
        seconds, _ = _update_seconds(model, tokens, advantages, config, repeats=2)
        out["shared_s" if share else "rows_alone_s"] = seconds
    out["speedup"] = out["rows_alone_s"] / out["shared_s"]
    out["rows"] = len(tokens)
    out["distinct_prompts"] = shape.prompts
    return out


def section_device_noise(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    """The GRPO step's generation with the sampling uniforms drawn on the model's device
    (``noise_device="model"``) instead of from per-row CPU generators: time, and the same
    tokens for the same seeds twice."""
    model, _, _, prompts = args.state["grpo"]
    policy = HFPolicy(model, None, max_batch=shape.prompts * shape.k, noise_device="model")
    runs = [timed(device, lambda: generate(policy, prompts, shape, 0)) for _ in range(3)]
    tokens = sum(len(g.token_ids) for g in runs[-1][0])
    seconds = min(t for _, t in runs[1:])
    same = [g.token_ids for g in runs[1][0]] == [g.token_ids for g in runs[2][0]]
    return {
        "generate_s": seconds,
        "generated_tokens_per_s": tokens / seconds,
        "same_tokens_for_same_seeds": same,
    }


def section_determinism(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    """Whether the same seeds give the same tokens twice in a row, with the noise from CPU
    generators and from the device's, and the largest difference between two identical
    prefill forwards; then the same under ``torch.use_deterministic_algorithms`` (which
    needs ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` in the environment on CUDA)."""
    import os

    model, _, _, prompts = args.state["grpo"]
    rows = shape.prompts * shape.k
    shape = Shape(shape.prompts, shape.k, shape.prompt_len, min(shape.new_tokens, 32), 1, shape.model)  # fmt: skip
    out: dict[str, Any] = {
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "new_tokens": shape.new_tokens,
    }
    ids = torch.tensor(prompts, device=device)
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic, warn_only=True)
        try:
            tag = "deterministic" if deterministic else "default"
            with torch.no_grad():
                a, b = (model(input_ids=ids).logits.float() for _ in range(2))
            out[f"{tag}/prefill_logits_max_abs_diff"] = float((a - b).abs().max())
            for noise in ("cpu", "model"):
                policy = HFPolicy(model, None, max_batch=rows, noise_device=noise)
                first, second = (generate(policy, prompts, shape, 0) for _ in range(2))
                same = [g.token_ids for g in first] == [g.token_ids for g in second]
                out[f"{tag}/{noise}_noise_same_tokens"] = same
                out[f"{tag}/{noise}_noise_rows_identical"] = sum(
                    x.token_ids == y.token_ids for x, y in zip(first, second, strict=True)
                )
        finally:
            torch.use_deterministic_algorithms(False)
    out["rows"] = rows
    return out


def section_prefix_sharing_long(
    args: argparse.Namespace, device: torch.device, shape: Shape
) -> dict:
    """Prefix sharing where prompts are long beside their answers (1,024 prompt tokens, 32
    response tokens; the dry mode: 32 and 4), on random tokens: no generation needed."""
    from forkgym.agents.generation.backends.policy import Generation

    model = args.state["grpo"][0]
    long = Shape(shape.prompts, shape.k, 32 if args.dry else 1024, 4 if args.dry else 32, 1, shape.model)  # fmt: skip
    prompts = prompts_for(long, shape.model["vocab_size"], seed=3)
    g = torch.Generator().manual_seed(4)
    answers = torch.randint(1, shape.model["vocab_size"], (long.prompts * long.k, long.new_tokens), generator=g)  # fmt: skip
    gens = [Generation(tuple(a.tolist()), tuple([-1.0] * long.new_tokens), "length") for a in answers]  # fmt: skip
    batch = rollout_batch(prompts, gens, long.k, 0)
    tokens = TokenBatch.from_rollouts(batch, 0)
    advantages = build_algorithm(learner_config(long, device), model).advantages(batch, tokens)
    start = copy.deepcopy(model.state_dict())
    out: dict[str, Any] = {"prompt_tokens": long.prompt_len, "response_tokens": long.new_tokens}
    for share in (False, True):
        model.load_state_dict(start)
        config = learner_config(long, device, prefix_sharing=share)
        seconds, _ = _update_seconds(model, tokens, advantages.rows, config, repeats=2)
        out["shared_s" if share else "rows_alone_s"] = seconds
    model.load_state_dict(start)
    out["speedup"] = out["rows_alone_s"] / out["shared_s"]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def section_fsdp(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    import torch.distributed as dist

    from forkgym.agents.distributed import init_group
    from forkgym.agents.learner.sharding import full_state_dict, shard_model

    # in float32 at a learning rate that moves the weights: bf16 weights would not see it
    model = copy.deepcopy(args.state["grpo"][0]).float()
    _, tokens, advantages, _ = args.state["grpo"]
    start = {name: t.detach().clone() for name, t in model.state_dict().items()}
    plain = copy.deepcopy(model)
    config = learner_config(shape, device, prefix_sharing=False, lr=1e-4)
    Learner(plain, config, max_episode_tokens=shape.new_tokens).update(tokens, advantages, 0)
    init_group(str(device), init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        sharded = copy.deepcopy(model)
        shard_model(sharded)
        learner = Learner(sharded, config, max_episode_tokens=shape.new_tokens)
        _, seconds = timed(device, lambda: learner.update(tokens, advantages, 0))
        whole = full_state_dict(sharded)
        pairs = [(n, p) for n, p in plain.state_dict().items() if n in whole]
        diffs = [float((whole[n] - p).abs().max()) for n, p in pairs]
        moved = [float((p - start[n]).abs().max()) for n, p in pairs]
        _, again = timed(device, lambda: learner.update(tokens, advantages, 1))
        backend = str(dist.get_backend())
    finally:
        dist.destroy_process_group()
    return {
        "backend": backend,
        "world_size": 1,
        "first_update_s": seconds,
        "second_update_s": again,
        "sharded": learner.sharded,
        "dtype": "float32",
        "lr": config.lr,
        "max_abs_weight_diff_vs_plain_after_one_update": max(diffs),
        "max_abs_weight_change_of_the_update": max(moved),
        "tensors_compared": len(diffs),
    }


def section_weight_packing(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    from forkgym.agents.generation.backends.weight_buckets import bucket_weights, engine_names

    model = args.state["grpo"][0]
    bucket_bytes = 64 * 2**20

    def pack() -> tuple[int, int]:
        buckets = bucket_weights(engine_names(model.state_dict()), bucket_bytes)
        total = 0
        for bucket in buckets:
            flat = torch.cat([t.detach().reshape(-1).view(torch.uint8) for t in bucket.tensors])
            total += flat.numel()
        return total, len(buckets)

    pack()  # warm-up
    times = []
    for _ in range(5):
        (nbytes, count), seconds = timed(device, pack)
        times.append(seconds)
    best = min(times)
    return {
        "bytes": nbytes,
        "buckets": count,
        "bucket_mib": 64,
        "best_of_5_s": best,
        "gb_per_s": nbytes / best / 1e9,
    }


def section_logprob_head(args: argparse.Namespace, device: torch.device, shape: Shape) -> dict:
    from lib.logprob_head import head_inputs, head_pass

    rows, positions = (2, 8) if args.dry else (8, 512)
    vocab = shape.model["vocab_size"]
    logits, targets, weights = head_inputs(rows, positions, vocab, torch.bfloat16, device)
    out: dict[str, Any] = {"rows": rows, "positions": positions, "vocab": vocab}
    out["logits_mib"] = logits.numel() * logits.element_size() / 2**20
    grads = {}
    for variant in ("plain", "fused"):
        head_pass(variant, logits, targets, weights)  # warm-up
        result = head_pass(variant, logits, targets, weights)
        grads[variant] = logits.grad.clone()
        out[f"{variant}_s"] = result["seconds"]
        if device.type == "cuda":  # the CPU's peak is the process's: no figure in-process
            out[f"{variant}_peak_mib"] = result["peak_bytes"] / 2**20
    out["gradients_equal"] = bool(torch.equal(grads["plain"], grads["fused"]))
    return out


SECTIONS: dict[str, Callable[[argparse.Namespace, torch.device, Shape], dict]] = {
    "parity": section_parity,
    "grpo": section_grpo,
    "device_noise": section_device_noise,
    "determinism": section_determinism,
    "prefix_sharing": section_prefix_sharing,
    "prefix_sharing_long": section_prefix_sharing_long,
    "fsdp": section_fsdp,
    "logprob_head": section_logprob_head,
    "weight_packing": section_weight_packing,
}


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(device),
        "command": " ".join(["python", *sys.argv]),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_memory_gib=props.total_memory / 2**30,
            cuda=torch.version.cuda,
            multiprocessors=props.multi_processor_count,
        )
    else:
        info["cpu_threads"] = torch.get_num_threads()
    return info


def summary(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [f"forkgym GPU check, {env['date']}: {env.get('gpu', env['device'])}, torch {env['torch']}, transformers {env['transformers']}"]  # fmt: skip
    for name, result in report["sections"].items():
        if "error" in result:
            lines.append(f"{name}: FAILED: {result['error'].strip().splitlines()[-1]}")
            continue
        if name == "parity":
            lines.append(f"parity: |logprob diff| max, CPU fp32 vs device fp32 {result['max_abs_logprob_diff_cpu_fp32_vs_device_fp32']:.2e}, vs device bf16 {result['max_abs_logprob_diff_cpu_fp32_vs_device_bf16']:.2e}; shared vs full on device {result['max_abs_logprob_diff_device_shared_vs_full_fp32']:.2e}")  # fmt: skip
        elif name == "grpo":
            m = result["mean"]
            memory = f", peak memory {result['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in result else ""  # fmt: skip
            lines.append(f"grpo: {result['parameters'] / 1e6:.1f}M parameters, {result['prompts']} prompts x K={result['k']}, {result['new_tokens_per_response']} new tokens: {m['step_s']:.3f} s per step (generate {m['generate_s']:.3f}, update {m['update_s']:.3f}, sync {m['sync_s']:.4f}), {m['generated_tokens_per_s']:,.0f} generated tokens/s{memory}")  # fmt: skip
        elif name == "device_noise":
            lines.append(f"device noise: generate {result['generate_s']:.3f} s, {result['generated_tokens_per_s']:,.0f} generated tokens/s; same tokens for the same seeds: {result['same_tokens_for_same_seeds']}")  # fmt: skip
        elif name == "prefix_sharing":
            lines.append(f"prefix sharing: update {result['shared_s']:.3f} s shared vs {result['rows_alone_s']:.3f} s rows alone ({result['speedup']:.2f}x)")  # fmt: skip
        elif name == "determinism":
            facts = ", ".join(f"{k} {v}" for k, v in result.items() if "/" in k)
            lines.append(f"determinism (same seeds twice, {result['rows']} rows): {facts}")
        elif name == "prefix_sharing_long":
            lines.append(f"prefix sharing, {result['prompt_tokens']}-token prompts and {result['response_tokens']}-token answers: update {result['shared_s']:.3f} s shared vs {result['rows_alone_s']:.3f} s rows alone ({result['speedup']:.2f}x)")  # fmt: skip
        elif name == "fsdp":
            lines.append(f"fsdp: {result['backend']} world size 1, update {result['second_update_s']:.3f} s, weights vs plain max |diff| {result['max_abs_weight_diff_vs_plain_after_one_update']:.2e} (the update moved them up to {result['max_abs_weight_change_of_the_update']:.2e})")  # fmt: skip
        elif name == "logprob_head":
            memory = f", peak {result['plain_peak_mib']:,.0f} vs {result['fused_peak_mib']:,.0f} MiB above {result['logits_mib']:,.0f} MiB of logits" if "fused_peak_mib" in result else ""  # fmt: skip
            lines.append(f"logprob head, {result['rows']} x {result['positions']} x {result['vocab']:,} bf16: plain {result['plain_s']:.4f} s vs fused {result['fused_s']:.4f} s{memory}; gradients equal: {result['gradients_equal']}")  # fmt: skip
        elif name == "weight_packing":
            lines.append(f"weight packing: {result['bytes'] / 2**20:,.0f} MiB in {result['buckets']} buckets of {result['bucket_mib']} MiB, {result['gb_per_s']:.1f} GB/s")  # fmt: skip
    lines.append(f"total {report['seconds']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--dry", action="store_true", help="tiny shapes (CI on the CPU)")
    parser.add_argument("--out", default="runs/gpu_check", help="folder for the JSON and text")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated")
    parser.add_argument("--steps", type=int, default=None, help="timed GRPO steps (default 3)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --device cpu --dry for the dry mode")
        return 2
    shape = DRY if args.dry else FULL
    if args.steps is not None:
        shape = Shape(shape.prompts, shape.k, shape.prompt_len, shape.new_tokens, args.steps, shape.model)  # fmt: skip
    args.state = {}
    report: dict[str, Any] = {"environment": environment(device), "sections": {}}
    start = time.perf_counter()
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            result = SECTIONS[name](args, device, shape)
        except Exception:
            result = {"error": traceback.format_exc()}
        result["section_s"] = time.perf_counter() - t0
        report["sections"][name] = result
        print(f"gpu_check: {name} done in {result['section_s']:.1f} s", flush=True)
        if device.type == "cuda":
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    report["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    text = summary(report)
    (out / "gpu_check.txt").write_text(text + "\n")
    print(text)
    return 1 if any("error" in r for r in report["sections"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
