"""Weight sync into a vLLM engine, bucketed against one layer per call, and generation speed of
the vllm backend beside the transformers backend on the same model and batch.

For each model size: the trainer's weights (perturbed, so every push changes the engine) are
pushed ``--repeats`` times each way and the median is printed:

* bucketed: :class:`~forkgym.agents.generation.backends.vllm_policy.VLLMPolicy.sync_weights` with ``--bucket-mb``
  buckets (the backend's default path);
* one layer per call: the same push with one engine layer per call, the finest split that
  keeps a fused layer whole (one tensor, or q/k/v together, or gate/up together). Pushing a
  lone q_proj leaves vLLM's fused qkv layer half-loaded, so "one parameter at a time" is
  this, the closest honest baseline.

Then ``--prompts`` prompts x ``--new-tokens`` sampled tokens (no stop token, so every row runs
to the budget), timed on the transformers backend first and the vllm backend second (vLLM's
CPU engine lowers torch's thread count for the whole process when it starts).

Run in the vLLM environment: ``.venv-vllm/bin/python benchmarks/vllm_sync.py [--sizes
tiny,base] [--repeats 5] [--bucket-mb 64]``. Without vLLM it says so and exits 0. On a GPU the
push goes through vLLM's CUDA-IPC weight transfer instead.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from lib.recipes import vllm_missing

from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
from forkgym.agents.models import QWEN_05B_CONFIG, init_model, load_policy_model

# a Qwen2.5-0.5B-shaped Llama (0.5B parameters), built from its config: nothing downloaded
QWEN_05B_SHAPE = {**QWEN_05B_CONFIG, "max_position_embeddings": 2048}


def build(size: str, root: Path) -> Path:
    if size != "qwen0.5b-shape":
        return init_model(root / size, size=size, corpus_seeds=4)
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    out = root / size
    LlamaForCausalLM(LlamaConfig(**QWEN_05B_SHAPE)).save_pretrained(out)
    # the default model's tokenizer: the benchmark feeds token ids below the small vocabulary
    init_model(root / "tok", size="tiny", corpus_seeds=2)
    load_policy_model(root / "tok")[1].save_pretrained(out)
    return out


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(path: Path, size: str, args: argparse.Namespace) -> None:
    """Sync and generation figures for one model directory; prints them."""
    from forkgym.agents import vllm_compat
    from forkgym.agents.generation.backends.hf_policy import HFPolicy
    from forkgym.agents.generation.backends.vllm_policy import VLLMPolicy
    from forkgym.agents.generation.backends.weight_buckets import bucket_weights, engine_names

    model, _ = load_policy_model(path)
    params = sum(p.numel() for p in model.parameters())
    requests = []
    for i in range(args.prompts):
        prompt = torch.randint(3, 1000, (24,), generator=torch.Generator().manual_seed(i))
        params_i = SamplingParams(max_new_tokens=args.new_tokens, seed=i)
        requests.append(GenerationRequest(tuple(int(t) for t in prompt), params_i))
    hf = HFPolicy(model, None)
    hf.generate(requests[:2])  # warm-up
    hf_s = median_seconds(lambda: hf.generate(requests), max(1, args.repeats // 2))

    policy = VLLMPolicy(str(path), max_model_len=512, bucket_mb=args.bucket_mb)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.001)
    policy.sync_weights(model)  # warm-up
    stats = policy.sync_weights(model)
    bucketed = median_seconds(lambda: policy.sync_weights(model), args.repeats)
    layers = [b.items() for b in bucket_weights(engine_names(model.state_dict()), 1)]
    one_by_one = float("nan")
    if policy.cpu:  # the GPU path pushes through vLLM's IPC engine only
        one_by_one = median_seconds(
            lambda: vllm_compat.push_weights_cpu(policy.llm, layers), args.repeats
        )
    policy.generate(requests[:2])
    vllm_s = median_seconds(lambda: policy.generate(requests), max(1, args.repeats // 2))
    policy.close()
    mb = stats["bytes"] / 2**20
    tokens = args.prompts * args.new_tokens
    print(f"\n{size}: {params / 1e6:.1f}M parameters, {mb:.1f} MB pushed per sync")
    print(f"  sync, {stats['buckets']:.0f} bucket(s) of <= {args.bucket_mb:g} MB: "
          f"{bucketed:.3f} s ({mb / bucketed:,.0f} MB/s)")  # fmt: skip
    if policy.cpu:
        print(f"  sync, one layer per call ({len(layers)} calls): "
              f"{one_by_one:.3f} s ({mb / one_by_one:,.0f} MB/s), "
              f"{one_by_one / bucketed:.1f}x the bucketed time")  # fmt: skip
    print(f"  generation, {args.prompts} x {args.new_tokens} sampled tokens: "
          f"transformers {tokens / hf_s:,.0f} tok/s, vllm {tokens / vllm_s:,.0f} tok/s "
          f"(vllm/transformers {hf_s / vllm_s:.2f}x)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,base", help="tiny, small, base, qwen0.5b-shape")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bucket-mb", type=float, default=64.0)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    if vllm_missing("vllm_sync"):
        return 0

    from forkgym.agents import vllm_compat

    print(f"torch {torch.__version__}, vLLM {vllm_compat.require_vllm().__version__}, "
          f"{torch.get_num_threads()} torch threads before the engine starts")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            measure(build(size, Path(tmp)), size, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
