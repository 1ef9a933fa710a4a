"""Held-out accuracy of a benchmark's models: greedy pass@1 on the eval stream's tasks, the
same for every method and seed (and for the experiments, through ``benchmarks/lib/recipes.py``)."""

from __future__ import annotations

import time
from typing import Any

from .presets import Regime

__all__ = [
    "EVAL_SEED",
    "VALIDATION_SEED",
    "distinct_problems",
    "held_out_accuracy",
    "overlap",
    "regime_held_out",
    "validation_tasks",
]

EVAL_SEED = 10_000  # held-out tasks: the eval stream, shared by every method and seed
VALIDATION_SEED = 20_000  # the tuning runs' tasks: eval side, none of the reported ones


def held_out_accuracy(
    model: Any,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    max_new_tokens: int,
    episodes: int,
    held_out: bool = True,
    tasks: list[int] | None = None,
    record: list[dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Greedy pass@1 on ``episodes`` held-out tasks of the eval stream (:data:`EVAL_SEED`),
    drawn from the eval side of the env's content partition (``held_out``; training and SFT
    draw from its train side), with the seconds it took; the model is evaluated in eval mode
    and handed back as it was. ``tasks``: other task seeds on the same side (the validation
    set, :func:`validation_tasks`); ``record``: gets each task's outcome (``evaluate``'s)."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import on_side

    env_kwargs = on_side(env_kwargs, "eval" if held_out else None)

    from forkgym.agents.generation.backends.hf_policy import HFPolicy
    from forkgym.agents.generation.evaluate import evaluate

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
        tasks=tasks,
        record=record,
    )
    model.train(was_training)
    return {**out, "time/eval": time.perf_counter() - t0}


def regime_held_out(model: Any, tokenizer: Any, regime: Regime, episodes: int, record: list[dict[str, Any]] | None = None) -> dict[str, float]:  # fmt: skip
    """:func:`held_out_accuracy` on a regime's task: its reported evaluation set, or, for a
    tuning run (``regime.validation``), its validation set."""
    tasks = validation_tasks(regime, episodes) if regime.validation else None
    return held_out_accuracy(
        model, tokenizer, regime.env, regime.env_kwargs, regime.max_new_tokens, episodes,
        tasks=tasks, record=record,
    )  # fmt: skip


def _content_keys(regime: Regime, side: str, seeds: list[int]) -> list[str]:
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import on_side

    env = gym.make(regime.env, **on_side(regime.env_kwargs, side)).unwrapped
    try:
        out = []
        for seed in seeds:
            env.reset(seed=seed)
            out.append(env.content_key(env.task))
        return out
    finally:
        env.close()


_VALIDATION: dict[tuple[str, str, int], list[int]] = {}


def validation_tasks(regime: Regime, episodes: int) -> list[int]:
    """The tuning runs' ``episodes`` task seeds: problems from the eval side of the content
    partition (never a training prompt or demonstration) that are NOT among the reported
    evaluation's problems, so choosing a learning rate never looks at a reported task. A
    problem may repeat, as in the reported stream. Deterministic; an error if the eval side
    has too few other problems."""
    import json

    from forkgym.agents.seeds import task_seeds

    key = (regime.env, json.dumps(regime.env_kwargs, sort_keys=True), episodes)
    if key not in _VALIDATION:
        reported = set(_content_keys(regime, "eval", task_seeds(EVAL_SEED, "eval", 0, episodes)))
        chosen: list[int] = []
        for step in range(100):  # batches of candidates from the validation stream
            candidates = task_seeds(VALIDATION_SEED, "eval", step, episodes)
            keys = _content_keys(regime, "eval", candidates)
            chosen += [s for s, k in zip(candidates, keys, strict=True) if k not in reported]
            if len(chosen) >= episodes:
                chosen = chosen[:episodes]
                break
        if len(chosen) < episodes:
            raise ValueError(
                f"{regime.name}: only {len(chosen)} eval-side problems outside the reported "
                f"{episodes}; use fewer eval episodes or a larger task space"
            )
        _VALIDATION[key] = chosen
    return list(_VALIDATION[key])


def overlap(regime: Regime, episodes: int, train_draws: int = 10_000) -> dict[str, int]:
    """How many of the ``episodes`` held-out problems (the eval stream on the eval side, as
    every evaluation of the regime draws them) are among ``train_draws`` problems the train
    side gives, the side every training prompt and demonstration comes from: 0 when the
    partition holds."""
    from forkgym.agents.seeds import task_seeds

    held = set(_content_keys(regime, "eval", task_seeds(EVAL_SEED, "eval", 0, episodes)))
    trained = set(_content_keys(regime, "train", list(range(train_draws))))
    return {"eval_tasks": len(held), "train_tasks": len(trained), "overlap": len(held & trained)}


def distinct_problems(regime: Regime, draws: int = 40_000, enough: int | None = None) -> dict[str, int]:  # fmt: skip
    """How many distinct problems (content keys: the problem by meaning) each side of the
    regime's partition holds, among the tasks of ``draws`` resets of the unsplit env (seeds 0,
    1, ...: the whole task space); ``enough``: stop once each side has that many."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.envs.base import content_split, on_side

    env = gym.make(regime.env, **on_side(regime.env_kwargs, None)).unwrapped
    fraction = float(regime.env_kwargs.get("eval_fraction", env.eval_fraction))
    sides: dict[str, set[str]] = {"train": set(), "eval": set()}
    try:
        for seed in range(draws):
            env.reset(seed=seed)
            key = env.content_key(env.task)
            sides[content_split(key, fraction)].add(key)
            if enough is not None and min(len(v) for v in sides.values()) >= enough:
                break
    finally:
        env.close()
    return {f"{side}_problems": len(keys) for side, keys in sides.items()}
