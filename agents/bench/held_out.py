"""Held-out accuracy of a benchmark's models: greedy pass@1 on the eval stream's tasks, the
same for every method and seed (and for the experiments, through ``forkgym.recipes``)."""

from __future__ import annotations

import time
from typing import Any

from .presets import Regime

__all__ = ["EVAL_SEED", "held_out_accuracy", "overlap", "regime_held_out"]

EVAL_SEED = 10_000  # held-out tasks: the eval stream, shared by every method and seed


def held_out_accuracy(
    model: Any,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    max_new_tokens: int,
    episodes: int,
    held_out: bool = True,
) -> dict[str, float]:
    """Greedy pass@1 on ``episodes`` held-out tasks of the eval stream (:data:`EVAL_SEED`),
    drawn from the eval side of the env's content partition (``held_out``; training and SFT
    draw from its train side), with the seconds it took; the model is evaluated in eval mode
    and handed back as it was."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import on_side

    env_kwargs = on_side(env_kwargs, "eval" if held_out else None)

    from ..evaluate import evaluate
    from ..hf_policy import HFPolicy

    was_training = model.training
    model.eval()
    t0 = time.perf_counter()
    out = evaluate(
        HFPolicy(model, tokenizer, seed=0),
        tokenizer,
        lambda: gym.make(env_id, **env_kwargs),
        episodes=episodes,
        seed=EVAL_SEED,
        max_new_tokens=max_new_tokens,
    )
    model.train(was_training)
    return {**out, "time/eval": time.perf_counter() - t0}


def regime_held_out(model: Any, tokenizer: Any, regime: Regime, episodes: int) -> dict[str, float]:
    """:func:`held_out_accuracy` on a regime's task."""
    return held_out_accuracy(
        model, tokenizer, regime.env, regime.env_kwargs, regime.max_new_tokens, episodes
    )


def overlap(regime: Regime, episodes: int, train_draws: int = 10_000) -> dict[str, int]:
    """How many of the ``episodes`` held-out problems (the eval stream on the eval side, as
    every evaluation of the regime draws them) are among ``train_draws`` problems the train
    side gives, the side every training prompt and demonstration comes from: 0 when the
    partition holds."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import on_side

    from ..seeds import task_seeds

    def keys(side: str, seeds: list[int]) -> set[str]:
        env = gym.make(regime.env, **on_side(regime.env_kwargs, side)).unwrapped
        out = set()
        for seed in seeds:
            env.reset(seed=seed)
            out.add(env.content_key(env.task))
        env.close()
        return out

    held = keys("eval", task_seeds(EVAL_SEED, "eval", 0, episodes))
    trained = keys("train", list(range(train_draws)))
    return {"eval_tasks": len(held), "train_tasks": len(trained), "overlap": len(held & trained)}
