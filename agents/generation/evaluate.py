"""Held-out evaluation: greedy pass@1 and sampled pass@k on seeds no training step draws."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..batch import RolloutBatch
from ..run.config import TrainConfig
from ..seeds import task_seeds
from .backends.policy import Policy
from .rollout import Rollouts

__all__ = ["ProgressCallback", "evaluate", "evaluate_env"]

# (what, tasks done, tasks in all): "pass@1" for the greedy pass, then "pass@k" if sampled
ProgressCallback = Callable[[str, int, int], Any]


def _collect(
    rollouts: Rollouts,
    seeds: Sequence[int],
    stream: str,
    what: str,
    progress: ProgressCallback | None,
    chunk: int,
) -> list[RolloutBatch]:
    """All tasks in one batch, or chunk by chunk with ``progress`` told after each."""
    if progress is None:
        return [rollouts.collect(seeds, stream, 0)]
    batches = []
    progress(what, 0, len(seeds))
    for start in range(0, len(seeds), chunk):
        part = seeds[start : start + chunk]
        keys = range(start, start + len(part))  # the sampling seeds of the whole list
        batches.append(rollouts.collect(part, stream, 0, keys=keys))
        progress(what, min(start + chunk, len(seeds)), len(seeds))
    return batches


def evaluate(
    policy: Policy,
    tokenizer: Any,
    make_env: Callable[[], Any],
    *,
    episodes: int,
    seed: int,
    k: int = 0,
    max_new_tokens: int = TrainConfig.max_new_tokens,
    temperature: float = 1.0,
    progress: ProgressCallback | None = None,
    chunk: int = 16,
    tasks: Sequence[int] | None = None,
    record: list[dict[str, Any]] | None = None,
) -> dict[str, float]:
    """``eval_accuracy`` (greedy pass@1) over ``episodes`` tasks; ``eval_pass@k`` if k > 0.

    The tasks come from the ``eval`` stream keyed by ``seed``: the same tasks for every
    evaluation of a run, and for every estimator compared at the same seed. With
    ``progress(what, done, total)`` the tasks go to the policy ``chunk`` at a time (the
    same tasks and sampling seeds, so the same results up to the float noise of batch
    composition), and it is told after each chunk; without it, all at once. ``tasks``: the
    task seeds to use instead of the stream's (the benchmark's validation set). ``record``:
    a list that gets each task's greedy outcome, in task order (``task_seed``, ``task_id``,
    ``correct``, ``valid``), for comparisons paired task by task.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    seeds = task_seeds(seed, "eval", 0, episodes) if tasks is None else list(tasks)
    if len(seeds) != episodes:
        raise ValueError(f"{len(seeds)} task seeds given for {episodes} episodes")
    greedy = Rollouts(
        make_env, policy, tokenizer, k=0, greedy=True, max_new_tokens=max_new_tokens, seed=seed
    )
    batches = _collect(greedy, seeds, "eval-greedy", "pass@1", progress, chunk)
    if record is not None:
        for b in batches:
            for p, group in enumerate(b.groups):
                record.append(
                    {
                        "task_seed": group.task_seed,
                        "task_id": group.task_id,
                        "correct": bool(b.greedy_correct[p]),
                        "valid": bool(b.greedy_valid[p]),
                    }
                )
    out = {
        "eval_accuracy": sum(int(b.greedy_correct.sum()) for b in batches) / episodes,
        "eval_infra_failures": float(sum(int((~b.greedy_valid).sum()) for b in batches)),
        "eval_tokens": float(sum(b.cost.tokens_generated for b in batches)),
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
        )
        batches = _collect(sampled, seeds, "eval-sampled", f"pass@{k}", progress, chunk)
        solved = sum(int(b.correct.any(1).sum()) for b in batches)
        out[f"eval_pass@{k}"] = solved / episodes
    return out


def evaluate_env(
    policy: Policy,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, float]:
    """:func:`evaluate` on the registered environment ``env_id``, each episode a fresh
    ``gym.make(env_id, **env_kwargs)``; ``options`` are :func:`evaluate`'s."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    kwargs = dict(env_kwargs or {})
    return evaluate(policy, tokenizer, lambda: gym.make(env_id, **kwargs), **options)
