"""How much GiGPO's anchor states group, and what matching them by text instead would mix.

GiGPO (``algorithm: gigpo``) groups the turns of a task's K branches that start from the
same env state. forkgym matches states exactly (``TextEnv.state_key``); verl-agent matches
them by the observation's text (here ``envs.base.observation_key``: what the env said since
the policy last spoke). On ``forkgym/CheckedSteps-v0`` (2 steps, 1 digit: the boundary
preset's steps2 regime), with and without feedback, this samples K branches of fresh
train-side tasks from a warm start (the default tiny model after ``--sft-tokens`` of SFT on
the env's gold demonstrations, as the bench's warm start) and prints, per setting:

* the fraction of turns in an exact anchor group of size >= 2 and the mean anchor-group size;
* the same for groups by text;
* of the text groups of size >= 2, the fraction that hold more than one exact state (turns a
  text match would compare although the env is in different states);
* the fraction of turns whose step-level advantage (GiGPO's, gamma 1, mean-centred) differs
  between the two matchings, and the mean absolute difference there.

Run: ``python benchmarks/anchor_states.py [--sft-tokens 1200000] [--prompts 32] [--k 8]
[--seed 0]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.agents.advantages.gigpo import anchor_statistics, step_advantages
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.rollout import Rollouts
from forkgym.agents.models import init_model, load_policy_model
from forkgym.agents.run.sft import sft
from forkgym.agents.seeds import task_seeds
from forkgym.envs.base import on_side

ENV = "forkgym/CheckedSteps-v0"
STEPS = {"system_prompt": None, "steps": 2, "digits": 1}
MAX_NEW_TOKENS = 48


def measure(model_dir: str, env_kwargs: dict, prompts: int, k: int, seed: int) -> dict[str, float]:
    """Anchor statistics of K branches on ``prompts`` fresh train-side tasks."""
    model, tokenizer = load_policy_model(model_dir)
    model.eval()
    kwargs = on_side(env_kwargs, "train")
    runner = Rollouts(lambda: gym.make(ENV, **kwargs), HFPolicy(model, tokenizer, seed=seed), tokenizer,
                      k=k, max_new_tokens=MAX_NEW_TOKENS, seed=seed, record_states=True)  # fmt: skip
    batch = runner.collect(task_seeds(seed, "anchor-states", 0, prompts))
    states, texts, differ, gaps, turns = [], [], 0, [], 0
    for p, group in enumerate(batch.turn_states):
        valid = [b for b in range(k) if bool(batch.valid[p, b])]
        keys = [group[b][1] for b in valid]
        shown = [group[b][2] for b in valid]
        returns = [[float(batch.rewards[p, b])] * len(group[b][1]) for b in valid]
        exact, by_text = step_advantages(keys, returns), step_advantages(shown, returns)
        for row_exact, row_text in zip(exact, by_text, strict=True):
            for a, b in zip(row_exact, row_text, strict=True):
                turns += 1
                if abs(a - b) > 1e-12:
                    differ += 1
                    gaps.append(abs(a - b))
        states.append(keys)
        texts.append(shown)
    exact_stats = anchor_statistics(states, texts)
    text_stats = anchor_statistics(texts, texts)
    return {
        "accuracy": float(batch.correct.float().mean()),
        "turns": float(turns),
        "exact_fraction": exact_stats["anchor_fraction"],
        "exact_size": exact_stats["anchor_size_mean"],
        "text_fraction": text_stats["anchor_fraction"],
        "text_size": text_stats["anchor_size_mean"],
        "text_mixed": exact_stats["text_mixed_fraction"],
        "text_groups": exact_stats["text_groups"],
        "adv_differs": differ / turns if turns else 0.0,
        "adv_gap": sum(gaps) / len(gaps) if gaps else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-tokens", type=int, default=1_200_000)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    print(
        f"anchor_states  {ENV} {STEPS}, {args.prompts} train-side prompts x K={args.k}, warm "
        f"start: the tiny model after {args.sft_tokens:,} SFT tokens, torch threads={torch.get_num_threads()}"
    )
    header = ("feedback", "acc", "turns", "exact frac", "exact size", "text frac", "text size",
              "text groups mixing states", "adv differs", "mean abs diff")  # fmt: skip
    rows = []
    for feedback in (True, False):
        t0 = time.perf_counter()
        env_kwargs = {**STEPS, "feedback": feedback}
        with tempfile.TemporaryDirectory() as tmp:
            base = init_model(Path(tmp) / "base")
            warm = str(Path(tmp) / "warm")
            sft(str(base), ENV, tokens=args.sft_tokens, out=warm, env_kwargs=env_kwargs)
            m = measure(warm, env_kwargs, args.prompts, args.k, args.seed)
        rows.append(
            (str(feedback), f"{m['accuracy']:.3f}", f"{m['turns']:.0f}", f"{m['exact_fraction']:.3f}",
             f"{m['exact_size']:.2f}", f"{m['text_fraction']:.3f}", f"{m['text_size']:.2f}",
             f"{m['text_mixed']:.3f} of {m['text_groups']:.0f}", f"{m['adv_differs']:.3f}",
             f"{m['adv_gap']:.3f}")
        )  # fmt: skip
        print(f"  feedback={feedback}: {time.perf_counter() - t0:.0f} s")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
