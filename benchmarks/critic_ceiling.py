"""The most variance any critic can explain on a policy's own rollouts, by Monte Carlo.

PPO's critic is scored by the explained variance of its values against the returns over
action tokens, ``1 - Var(R - V) / Var(R)``; with ``value_lam = 1`` and one reward at the end,
every token's return is the episode's reward ``R``. The function that minimises the squared
error is the policy's true value, ``V(s) = P(correct | prefix s)``, so its explained variance
is a ceiling for every critic, whatever its size or training. This script estimates it on the
policy's own samples: for every action token of every sampled response it samples ``--m``
continuations of the prefix before that token (the same policy, temperature and stop tokens
as the rollout, the remaining token budget), grades each with the environment, and takes the
fraction correct as ``V``. The sampling noise of that estimate adds ``V(1 - V) / m`` to the
squared error on average; its unbiased estimate ``p(1 - p) / (m - 1)`` per prefix is
subtracted (the rows marked uncorrected keep it).

It also prints what two partial critics reach: one that knows each prompt's true success rate
and nothing else (the value at the response's first token, held for the whole response: a
perfect group baseline), and RLOO's baseline (the mean reward of the response's K - 1 group
mates; the self-including group mean would be R's rescaled residual, not a baseline).

Every figure comes with a 95% bootstrap interval over prompts (``--bootstrap`` resamples of
the batch's prompts with their responses), and ``--batches N`` repeats the whole estimate on N
batches of fresh prompts: one batch of 8 prompts is a small sample of the task.

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

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.agents.batch import RolloutBatch
from forkgym.agents.hf_policy import HFPolicy
from forkgym.agents.models import init_model, load_policy_model
from forkgym.agents.policy import GenerationRequest, SamplingParams
from forkgym.agents.rollout import Rollouts, stop_token_ids
from forkgym.agents.seeds import request_seed, task_seeds
from forkgym.agents.sft import sft

ENV = "forkgym/Arithmetic-v0"
ENV_KWARGS = {"system_prompt": None, "operations": "+", "solution_style": "worked", "instruction": False}  # fmt: skip
MAX_NEW_TOKENS = 32


def grade(env, tokenizer, task_id: str, ids: list[int], stops: tuple[int, ...], stopped: bool) -> float:  # fmt: skip
    """The reward the rollout would record for this response."""
    env.reset(options={"task_id": task_id})
    if not stopped:
        return env.truncate("max_tokens")[4]["outcome"].reward
    content = ids[:-1] if ids and ids[-1] in stops else ids
    return env.step(tokenizer.decode(content, skip_special_tokens=False))[4]["outcome"].reward


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
        measure_batch(args, policy, tokenizer, b, t0)
    return 0


def measure_batch(args: argparse.Namespace, policy: HFPolicy, tokenizer, b: int, t0: float) -> None:  # fmt: skip
    """One batch of fresh prompts (the train stream's step ``b``): every figure with its
    bootstrap interval over the batch's prompts."""
    stops = stop_token_ids(tokenizer)
    runner = Rollouts(lambda: gym.make(ENV, **ENV_KWARGS), policy, tokenizer, k=args.k,
                      max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=args.seed)  # fmt: skip
    batch: RolloutBatch = runner.collect(task_seeds(args.seed, "train", b, args.prompts))
    env = gym.make(ENV, **ENV_KWARGS)

    rows: dict[str, list[float]] = {k: [] for k in ("r", "v", "noise", "pv", "pnoise", "loo", "prompt")}  # fmt: skip
    requests_made = 0
    for g, group in enumerate(batch.groups):
        valid = [ep for ep in group.sampled if ep.valid]
        total = sum(ep.reward for ep in valid)
        for ep in valid:
            actions = ep.token_ids[ep.prompt_len :]
            reqs = [  # the state before action token j, continued m times
                GenerationRequest(
                    tuple(ep.token_ids[: ep.prompt_len + j]),
                    SamplingParams(
                        max_new_tokens=MAX_NEW_TOKENS - j,
                        temperature=1.0,
                        stop_token_ids=stops,
                        seed=request_seed(args.seed, "ceiling", b, g, ep.branch, j, c),
                    ),
                )
                for j in range(len(actions))
                for c in range(args.m)
            ]
            requests_made += len(reqs)
            outs = policy.generate(reqs)
            loo = (total - ep.reward) / (len(valid) - 1) if len(valid) > 1 else float("nan")
            first = len(rows["v"])
            for j in range(len(actions)):
                scores = [
                    grade(env, tokenizer, ep.task_id, actions[:j] + list(o.token_ids), stops,
                          o.finish_reason == "stop")
                    for o in outs[j * args.m : (j + 1) * args.m]
                ]  # fmt: skip
                p = sum(scores) / len(scores)
                var = sum((s - p) ** 2 for s in scores) / (len(scores) - 1)
                rows["r"].append(ep.reward)
                rows["v"].append(p)
                rows["noise"].append(var / len(scores))
                rows["pv"].append(rows["v"][first])  # the value before the first token
                rows["pnoise"].append(rows["noise"][first])
                rows["loo"].append(loo)
                rows["prompt"].append(g)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in rows.items()}

    def ev(index: torch.Tensor, value: str, noise: str | None) -> float:
        """Explained variance of ``value`` over the rows ``index``; with ``noise``, of the
        exact values the estimates stand for (their sampling noise, p(1 - p) / m on average,
        taken out of the squared error)."""
        r, v = t["r"][index], t[value][index]
        var_r = float(r.var(unbiased=False))
        if var_r == 0:
            return float("nan")
        residual = float(((r - v) ** 2).mean())
        if noise is not None:
            residual -= float(t[noise][index].mean())
        return 1 - residual / var_r

    figures = (
        ("the true value P(correct | prefix)", "v", "noise"),
        ("  the same, uncorrected (m continuations' mean)", "v", None),
        ("each prompt's true success rate (a perfect group baseline)", "pv", "pnoise"),
        ("RLOO's baseline: the mean of the K - 1 group mates", "loo", None),
    )
    everything = torch.arange(len(rows["r"]))
    prompts = t["prompt"].long()
    by_prompt = [everything[prompts == g] for g in range(int(prompts.max()) + 1)]
    gen = torch.Generator().manual_seed(args.seed + b)
    resamples = [
        torch.cat(
            [by_prompt[i] for i in torch.randint(len(by_prompt), (len(by_prompt),), generator=gen)]
        )
        for _ in range(args.bootstrap)
    ]
    print(f"batch {b}: responses {int(batch.valid.sum())}, accuracy {float(batch.correct.float().mean()):.3f}, "
          f"action tokens {len(rows['r']):,}, Var(R) over tokens {float(t['r'].var(unbiased=False)):.4f}, "
          f"{requests_made:,} continuations, {time.perf_counter() - t0:.0f} s so far")  # fmt: skip
    print(f"{'value':62} {'explained variance':>18} {'95% over prompts':>20}")
    for name, value, noise in figures:
        point = ev(everything, value, noise)
        boot = sorted(x for x in (ev(i, value, noise) for i in resamples) if x == x)
        lo, hi = (boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]) if boot else (float("nan"),) * 2  # fmt: skip
        print(f"{name:62} {point:>18.3f} {f'[{lo:.3f}, {hi:.3f}]':>20}")


if __name__ == "__main__":
    sys.exit(main())
