"""The most variance any critic can explain on a policy's own rollouts, by Monte Carlo.

The estimator is :func:`forkgym.bench.ceiling.ceiling_batch` (its docstring says how:
``m`` continuations of every action token's prefix, graded by the environment, the estimate's
own noise taken out), the same that ``forkgym bench`` runs at the warm start and at the end of
PPO's first seed. Printed per batch of fresh prompts, each with a 95% bootstrap interval over
the batch's prompts: the exact value's explained variance (the ceiling for any critic), the same
uncorrected, each prompt's exact success rate held for the whole response (the exact
prompt-level value: a perfect group baseline), and RLOO's leave-one-out baseline.

``--task`` names the task: ``arithmetic`` (the quick preset's: 2-digit sums, worked answers;
a prefix is continued by one generation), ``checked-steps`` (``forkgym/CheckedSteps-v0``, 2
steps on 1-digit numbers, the tool saying whether each reported result was right; a prefix is
continued to the episode's end from a fork of the env at its turn) or ``checked-steps-hidden``
(the same, the tool only recording each result). The policy is ``--model`` or, without it,
the default tiny model after ``--sft-tokens`` of SFT on the task's gold demonstrations.
``--stride n`` scores every n-th action token of each turn (an unbiased subsample).
``--critic DIR`` reads a PPO checkpoint's value model against the same scored tokens (its
explained variance and its share of the exact value's, with intervals over the same
resamples); its policy is the one sampled unless ``--model`` names another. With several
batches, each figure's mean over them follows, with a 95% t-interval over batches, and the
exact value's and critic's figures over all batches' tokens pooled (one variance of the reward,
so a batch where nearly every reward is equal, whose ratio is noise, weighs what it holds).

Run: ``python benchmarks/critic_ceiling.py [--task arithmetic] [--model DIR] [--prompts 8]
[--k 8] [--m 16] [--batches 1] [--bootstrap 1000] [--stride 1] [--critic CHECKPOINT]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.models import init_model, load_policy_model
from forkgym.agents.run.sft import sft
from forkgym.bench.ceiling import (
    CRITIC_FIGURES,
    FIGURES,
    ceiling_batch,
    critic_from_checkpoint,
    pooled_figures,
)
from forkgym.bench.stats import interval

# named tasks: (env, its options, new tokens per turn, what it is)
_STEPS = {"system_prompt": None, "steps": 2, "digits": 1}
_ARITHMETIC = {"system_prompt": None, "operations": "+", "solution_style": "worked", "instruction": False}  # fmt: skip
TASKS = {
    "arithmetic": ("forkgym/Arithmetic-v0", _ARITHMETIC, 32, "2-digit sums, worked answers"),
    "checked-steps": (
        "forkgym/CheckedSteps-v0",
        {**_STEPS, "feedback": True},
        48,
        "2 checked steps, 1 digit",
    ),
    "checked-steps-hidden": (
        "forkgym/CheckedSteps-v0",
        {**_STEPS, "feedback": False},
        48,
        "2 unchecked steps, 1 digit",
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help="the policy (default: a warm start built here)"
    )
    parser.add_argument("--task", choices=sorted(TASKS), default="arithmetic")
    parser.add_argument("--sft-tokens", type=int, default=400_000)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--m", type=int, default=16, help="continuations per prefix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=1, help="batches of fresh prompts")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of prompts")
    parser.add_argument("--stride", type=int, default=1, help="score every n-th action token of a turn")  # fmt: skip
    parser.add_argument(
        "--critic", default=None, help="a PPO checkpoint whose value model is read beside"
    )
    args = parser.parse_args()
    if args.model is None and args.critic is not None:
        args.model = args.critic
    env, env_kwargs, max_new_tokens, about = TASKS[args.task]
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            base = init_model(Path(tmp) / "base")
            model_dir = str(Path(tmp) / "warm")
            sft(str(base), env, tokens=args.sft_tokens, out=model_dir, env_kwargs=env_kwargs)
        model, tokenizer = load_policy_model(model_dir)
    model.eval()
    policy = HFPolicy(model, tokenizer, seed=args.seed)
    critic = critic_from_checkpoint(args.critic) if args.critic else None
    print(
        f"critic_ceiling  {env} ({about}), {args.prompts} prompts x K={args.k}, {args.m} "
        f"continuations per prefix, every {args.stride} action token(s), {args.batches} batch(es), "
        f"torch threads={torch.get_num_threads()}"
    )
    print(f"policy: {args.model or f'tiny model after {args.sft_tokens:,} SFT tokens'}")
    if critic is not None:
        print(f"critic: the value model of {args.critic}")
    results = []
    for b in range(args.batches):
        result = ceiling_batch(policy, tokenizer, env, env_kwargs, max_new_tokens=max_new_tokens,
                               prompts=args.prompts, k=args.k, m=args.m, seed=args.seed, batch=b,
                               bootstrap=args.bootstrap, stride=args.stride, critic=critic)  # fmt: skip
        print_batch(result, t0)
        results.append(result)
    if len(results) > 1:
        print_means(results)
        print_pooled(results, args.bootstrap, args.seed)
    return 0


def print_pooled(results: list[dict], bootstrap: int, seed: int) -> None:
    """The exact value's and the critic's figures over all batches' scored tokens pooled."""
    tokens = sum(r["scored_tokens"] for r in results)
    prompts = sum(len(r["prompt_sums"]) for r in results)
    print(f"all {len(results)} batches pooled ({tokens:,} scored tokens; 95% over {prompts} prompts)")  # fmt: skip
    names = dict(_rows())
    for key, f in pooled_figures(results, bootstrap, seed).items():
        print_figure(names[key], f)


def print_means(results: list[dict]) -> None:
    """Each figure's mean over the batches, with a 95% t-interval over them."""
    print(f"over {len(results)} batches: mean and 95% t-interval over batches")
    for key, name in _rows():
        points = [r["figures"][key]["point"] for r in results if key in r["figures"]]
        if points:
            i = interval([p for p in points if p is not None])
            print(
                f"{name.replace(chr(92), ''):62} {i!s:>18}  (n={sum(p is not None for p in points)})"
            )


def _rows() -> list[tuple[str, str]]:
    rows = [(key, name) for key, name, _, _ in FIGURES + CRITIC_FIGURES]
    return [*rows, ("critic_share", "the critic's share of the exact value's")]


def print_batch(result: dict, t0: float) -> None:
    print(f"batch {result['batch']}: responses {result['responses']}, accuracy {result['accuracy']:.3f}, "
          f"action tokens {result['action_tokens']:,} ({result['scored_tokens']:,} scored), {result['continuations']:,} continuations, "
          f"{time.perf_counter() - t0:.0f} s so far")  # fmt: skip
    print(f"{'value':62} {'explained variance':>18} {'95% over prompts':>20}")
    for key, name in _rows():
        if key in result["figures"]:
            print_figure(name, result["figures"][key])


def print_figure(name: str, f: dict) -> None:
    """One figure's line: its point and its 95% interval."""
    point = "undefined" if f["point"] is None else f"{f['point']:.3f}"
    span = "" if f["low"] is None else f"[{f['low']:.3f}, {f['high']:.3f}]"
    print(f"{name.replace(chr(92), ''):62} {point:>18} {span:>20}")


if __name__ == "__main__":
    sys.exit(main())
