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
and nothing else (the value at the response's first token, held for the whole response), and
the group mean a K-sample baseline sees (the mean reward of the response's own group).

Single-turn environments only (a prefix is continued by one generation). The policy is
``--model`` or, without it, the bench's quick warm start rebuilt here: the default tiny
model after ``--sft-tokens`` of SFT on 2-digit sums with worked answers.

Run: ``python benchmarks/critic_ceiling.py [--model DIR] [--prompts 8] [--k 8] [--m 16]``.
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
from forkgym.agents.critic import explained_variance
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
    stops = stop_token_ids(tokenizer)
    runner = Rollouts(lambda: gym.make(ENV, **ENV_KWARGS), policy, tokenizer, k=args.k,
                      max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=args.seed)  # fmt: skip
    batch: RolloutBatch = runner.collect(task_seeds(args.seed, "train", 0, args.prompts))
    env = gym.make(ENV, **ENV_KWARGS)

    rewards, true_v, noise, prompt_v, prompt_noise, group_v = [], [], [], [], [], []
    group_mean = batch.rewards.nanmean(1)
    requests_made = 0
    for g, group in enumerate(batch.groups):
        for ep in group.sampled:
            if not ep.valid:
                continue
            actions = ep.token_ids[ep.prompt_len :]
            reqs = [  # the state before action token j, continued m times
                GenerationRequest(
                    tuple(ep.token_ids[: ep.prompt_len + j]),
                    SamplingParams(
                        max_new_tokens=MAX_NEW_TOKENS - j,
                        temperature=1.0,
                        stop_token_ids=stops,
                        seed=request_seed(args.seed, "ceiling", g, ep.branch, j, c),
                    ),
                )
                for j in range(len(actions))
                for c in range(args.m)
            ]
            requests_made += len(reqs)
            outs = policy.generate(reqs)
            for j in range(len(actions)):
                scores = [
                    grade(env, tokenizer, ep.task_id, actions[:j] + list(o.token_ids), stops,
                          o.finish_reason == "stop")
                    for o in outs[j * args.m : (j + 1) * args.m]
                ]  # fmt: skip
                p = sum(scores) / len(scores)
                var = sum((s - p) ** 2 for s in scores) / (len(scores) - 1)
                rewards.append(ep.reward)
                true_v.append(p)
                noise.append(var / len(scores))
                prompt_v.append(true_v[len(true_v) - 1 - j])  # the value before the first token
                prompt_noise.append(noise[len(noise) - 1 - j])
                group_v.append(float(group_mean[g]))

    r = torch.tensor(rewards, dtype=torch.float64)
    var_r = float(r.var(unbiased=False))
    if var_r == 0:
        print("every sampled response got the same reward: no variance to explain")
        return 1

    def corrected(values: list[float], noises: list[float]) -> float:
        """Explained variance of the exact values the estimates stand for: the estimates'
        sampling noise, p(1 - p) / m on average, taken out of the squared error."""
        v = torch.tensor(values, dtype=torch.float64)
        residual = float(((r - v) ** 2).mean()) - float(torch.tensor(noises).mean())
        return 1 - residual / var_r

    print(
        f"critic_ceiling  {ENV} (2-digit sums, worked answers), {args.prompts} prompts x K={args.k}, "
        f"{args.m} continuations per prefix, {requests_made:,} continuations, "
        f"{time.perf_counter() - t0:.0f} s, torch threads={torch.get_num_threads()}"
    )
    print(f"policy: {args.model or f'tiny model after {args.sft_tokens:,} SFT tokens'}")
    print(f"responses {int(batch.valid.sum())}, accuracy {float(batch.correct.float().mean()):.3f}, "
          f"action tokens {len(rewards):,}, Var(R) over tokens {var_r:.4f}")  # fmt: skip
    print(f"{'value':58} {'explained variance':>18}")
    rows = (
        ("the true value P(correct | prefix)", corrected(true_v, noise)),
        (
            "  the same, uncorrected (m continuations' mean)",
            explained_variance(r, torch.tensor(true_v, dtype=torch.float64)),
        ),
        (
            "each prompt's true success rate, held for the response",
            corrected(prompt_v, prompt_noise),
        ),
        (
            "the response's group mean (what K samples give for free)",
            explained_variance(r, torch.tensor(group_v, dtype=torch.float64)),
        ),
    )
    for name, value in rows:
        print(f"{name:58} {value:>18.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
