"""The most variance any critic can explain on a policy's own rollouts, by Monte Carlo.

The estimator is :func:`forkgym.agents.bench.ceiling.ceiling_batch` (its docstring says how:
``m`` continuations of every action token's prefix, graded by the environment, the estimate's
own noise taken out), the same that ``forkgym bench`` runs at the warm start and at the end of
PPO's first seed. Printed per batch of fresh prompts, each with a 95% bootstrap interval over
the batch's prompts: the exact value's explained variance (the ceiling for any critic), the same
uncorrected, each prompt's exact success rate held for the whole response (the exact
prompt-level value: a perfect group baseline), and RLOO's leave-one-out baseline.

Single-turn environments only (a prefix is continued by one generation). The policy is
``--model`` or, without it, the bench's quick warm start rebuilt here: the default tiny
model after ``--sft-tokens`` of SFT on 2-digit sums with worked answers.

Run: ``python benchmarks/critic_ceiling.py [--model DIR] [--prompts 8] [--k 8] [--m 16]
[--batches 1] [--bootstrap 1000]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from forkgym.agents.bench.ceiling import FIGURES, ceiling_batch
from forkgym.agents.hf_policy import HFPolicy
from forkgym.agents.models import init_model, load_policy_model
from forkgym.agents.sft import sft

ENV = "forkgym/Arithmetic-v0"
ENV_KWARGS = {"system_prompt": None, "operations": "+", "solution_style": "worked", "instruction": False}  # fmt: skip
MAX_NEW_TOKENS = 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help="the policy (default: a warm start built here)"
    )
    parser.add_argument("--sft-tokens", type=int, default=400_000)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--m", type=int, default=16, help="continuations per prefix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=1, help="batches of fresh prompts")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of prompts")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            base = init_model(Path(tmp) / "base")
            model_dir = str(Path(tmp) / "warm")
            sft(str(base), ENV, tokens=args.sft_tokens, out=model_dir, env_kwargs=ENV_KWARGS)
        model, tokenizer = load_policy_model(model_dir)
    model.eval()
    policy = HFPolicy(model, tokenizer, seed=args.seed)
    print(
        f"critic_ceiling  {ENV} (2-digit sums, worked answers), {args.prompts} prompts x K={args.k}, "
        f"{args.m} continuations per prefix, {args.batches} batch(es), torch threads={torch.get_num_threads()}"
    )
    print(f"policy: {args.model or f'tiny model after {args.sft_tokens:,} SFT tokens'}")
    for b in range(args.batches):
        result = ceiling_batch(policy, tokenizer, ENV, ENV_KWARGS, max_new_tokens=MAX_NEW_TOKENS,
                               prompts=args.prompts, k=args.k, m=args.m, seed=args.seed, batch=b,
                               bootstrap=args.bootstrap)  # fmt: skip
        print_batch(result, t0)
    return 0


def print_batch(result: dict, t0: float) -> None:
    print(f"batch {result['batch']}: responses {result['responses']}, accuracy {result['accuracy']:.3f}, "
          f"action tokens {result['action_tokens']:,}, {result['continuations']:,} continuations, "
          f"{time.perf_counter() - t0:.0f} s so far")  # fmt: skip
    print(f"{'value':62} {'explained variance':>18} {'95% over prompts':>20}")
    for key, name, _, _ in FIGURES:
        f = result["figures"][key]
        point = "undefined" if f["point"] is None else f"{f['point']:.3f}"
        span = "" if f["low"] is None else f"[{f['low']:.3f}, {f['high']:.3f}]"
        print(f"{name.replace(chr(92), ''):62} {point:>18} {span:>20}")


if __name__ == "__main__":
    sys.exit(main())
