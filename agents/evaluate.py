"""Held-out evaluation: greedy pass@1 and sampled pass@k on seeds no training step draws."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .policy import Policy
from .rollout import Rollouts
from .seeds import task_seeds

__all__ = ["evaluate"]


def evaluate(
    policy: Policy,
    tokenizer: Any,
    make_env: Callable[[], Any],
    *,
    episodes: int,
    seed: int,
    k: int = 0,
    max_new_tokens: int = 24,
    temperature: float = 1.0,
) -> dict[str, float]:
    """``eval_accuracy`` (greedy pass@1) over ``episodes`` tasks; ``eval_pass@k`` if k > 0.

    The tasks come from the ``eval`` stream keyed by ``seed``: the same tasks for every
    evaluation of a run, and for every estimator compared at the same seed.
    """
    seeds = task_seeds(seed, "eval", 0, episodes)
    greedy = Rollouts(
        make_env, policy, tokenizer, k=0, greedy=True, max_new_tokens=max_new_tokens, seed=seed
    )
    batch = greedy.collect(seeds, "eval-greedy", 0)
    out = {
        "eval_accuracy": int(batch.greedy_correct.sum()) / episodes,
        "eval_infra_failures": float((~batch.greedy_valid).sum()),
        "eval_tokens": float(batch.cost.tokens_generated),
    }
    if k > 0:
        sampled = Rollouts(
            make_env,
            policy,
            tokenizer,
            k=k,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            seed=seed,
        ).collect(seeds, "eval-sampled", 0)
        out[f"eval_pass@{k}"] = int(sampled.correct.any(1).sum()) / episodes
    return out
