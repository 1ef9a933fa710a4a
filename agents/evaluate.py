"""Held-out evaluation: greedy pass@1 and sampled pass@k on seeds no training step draws."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forkgym.verifiers import Status

from .policy import Policy
from .rollout import Rollouts, task_seeds

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
    outcomes = [g.greedy.outcome for g in batch.groups]
    correct = [o is not None and o.status is Status.CORRECT for o in outcomes]
    out = {
        "eval_accuracy": sum(correct) / len(correct),
        "eval_infra_failures": float(sum(o is None or o.is_infrastructure for o in outcomes)),
        "eval_tokens": float(batch.tokens_generated),
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
        hits = [
            any(ep.outcome is not None and ep.outcome.status is Status.CORRECT for ep in g.sampled)
            for g in sampled.groups
        ]
        out[f"eval_pass@{k}"] = sum(hits) / len(hits)
    return out
