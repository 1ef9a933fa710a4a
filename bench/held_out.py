"""Held-out accuracy of a benchmark's models: greedy pass@1 on the eval stream's tasks, the
same for every method and seed (and for the experiments, through ``benchmarks/lib/recipes.py``)."""

from __future__ import annotations

import time
from typing import Any

from .presets import Regime

__all__ = [
    "EVAL_SEED",
    "VALIDATION_FRACTION",
    "VALIDATION_SEED",
    "distinct_problems",
    "eval_part",
    "evaluation_tasks",
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
    """:func:`held_out_accuracy` on a regime's task: its reported evaluation set
    (:func:`evaluation_tasks`), or, for a tuning run (``regime.validation``), its validation
    set (:func:`validation_tasks`)."""
    tasks = (validation_tasks if regime.validation else evaluation_tasks)(regime, episodes)
    return held_out_accuracy(
        model, tokenizer, regime.env, regime.env_kwargs, regime.max_new_tokens, episodes,
        tasks=tasks, record=record,
    )  # fmt: skip


def _content_keys(regime: Regime, side: str, seeds: list[int]) -> list[str]:
    from forkgym.agents.run.warm_target import content_keys

    return content_keys(regime.env, regime.env_kwargs, seeds, side=side)


VALIDATION_FRACTION = 0.25  # of the eval side's problems: validation, the rest evaluation
_LISTS: dict[tuple[str, str, str, int], list[int]] = {}


def eval_part(key: str) -> str:
    """``"validation"`` or ``"evaluation"``: which part of the eval side a problem (its
    content key) is in, by another hash of the key than the train/eval split's (the split's
    function on the key with a prefix), so the tuning runs' problems and the reported ones
    are disjoint by construction."""
    from forkgym.envs.base import content_split

    held = content_split(f"validation part: {key}", VALIDATION_FRACTION) == "eval"
    return "validation" if held else "evaluation"


def _task_list(regime: Regime, part: str, count: int) -> list[int]:
    """``count`` task seeds of ``part`` of the regime's eval side, each a distinct problem,
    in the order the part's stream draws them; a task space with fewer distinct problems in
    that part (the smoke preset's 1-digit sums) repeats them, in the stream's order."""
    import json

    from forkgym.agents.seeds import task_seeds

    cache = (regime.env, json.dumps(regime.env_kwargs, sort_keys=True), part, count)
    if cache not in _LISTS:
        stream = EVAL_SEED if part == "evaluation" else VALIDATION_SEED
        distinct: dict[str, int] = {}
        repeats: list[int] = []
        for step in range(200):  # batches of candidates from the part's stream
            candidates = task_seeds(stream, "eval", step, max(count, 64))
            for seed, key in zip(candidates, _content_keys(regime, "eval", candidates), strict=True):  # fmt: skip
                if eval_part(key) != part:
                    continue
                if key in distinct:
                    repeats.append(seed)
                else:
                    distinct[key] = seed
            if len(distinct) >= count:
                break
        chosen = list(distinct.values())[:count]
        chosen += repeats[: count - len(chosen)]
        if len(chosen) < count:
            raise ValueError(f"{regime.name}: no {part} problems on the eval side; use a larger task space")  # fmt: skip
        _LISTS[cache] = chosen
    return list(_LISTS[cache])


def evaluation_tasks(regime: Regime, episodes: int) -> list[int]:
    """The reported evaluation's ``episodes`` task seeds: one fixed list for every method,
    seed and evaluation of the regime (warm start included), each a distinct problem of the
    eval side's evaluation part (:func:`eval_part`)."""
    return _task_list(regime, "evaluation", episodes)


def validation_tasks(regime: Regime, episodes: int) -> list[int]:
    """The tuning runs' and the warm start's stopping rule's ``episodes`` task seeds:
    distinct problems of the eval side's validation part (never a training prompt or
    demonstration, never a reported problem: :func:`eval_part`)."""
    return _task_list(regime, "validation", episodes)


def overlap(regime: Regime, episodes: int, train_draws: int = 10_000) -> dict[str, int]:
    """How many of the ``episodes`` held-out problems (:func:`evaluation_tasks`, as every
    evaluation of the regime draws them) are among ``train_draws`` problems the train side
    gives, the side every training prompt and demonstration comes from: 0 when the partition
    holds."""
    held = set(_content_keys(regime, "eval", evaluation_tasks(regime, episodes)))
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
