"""A warm start's stopping rule: greedy accuracy on validation tasks reaching a target.

:func:`accuracy_target` gives :func:`~forkgym.agents.run.sft.sft` an ``until`` hook that
evaluates the model, greedily, on a fixed list of validation tasks and ends SFT once its
accuracy reaches the target. The validation tasks (:func:`validation_tasks`) are chosen so
that the rule never reads the problems a later ``forkgym train`` reports held-out accuracy
on:

- they are drawn from the eval side of the env's content partition (``on_side``,
  envs/base.py), which SFT never demonstrates (it draws the train side);
- none of them poses, by meaning (the env's ``content_key``: ``23 + 45`` is ``45 + 23``), a
  problem among the tasks to keep clear of: by default the first ``eval_episodes`` task seeds
  of the stream ``forkgym train`` and ``forkgym eval`` evaluate on (:func:`reported_tasks`,
  the stream of agents/generation/evaluate.py, keyed by ``eval_seed``). Seed ``i`` of that
  stream does not depend on how many are drawn, so keeping clear of the first 200 keeps clear
  of every evaluation of at most 200 episodes at that seed (train's default 128, the
  quickstart's and ``forkgym eval``'s 200);
- they come from a stream of their own (``"validation"``, keyed by the same ``eval_seed``),
  each a distinct problem, and are the same list at every check and for every seed of the
  warm start. A task space with fewer distinct problems left repeats them in the stream's
  order; one with none left is refused.

The bench does the same for its regimes with a partition of the eval side
(bench/held_out.py ``validation_tasks``); here the evaluation ``forkgym train`` runs is not
partitioned, so its own problems are what is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forkgym.envs.base import on_side

from ..seeds import task_seeds
from .config import TrainConfig

__all__ = [
    "AccuracyTarget",
    "accuracy_target",
    "content_keys",
    "reported_tasks",
    "validation_accuracy",
    "validation_tasks",
]

_BATCH = 64  # candidate tasks drawn at a time
_MAX_BATCHES = 200


def reported_tasks(episodes: int, eval_seed: int = TrainConfig.eval_seed) -> list[int]:
    """The task seeds ``forkgym train`` evaluates on (``eval_episodes``, ``eval_seed``; no
    ``eval_tasks`` list), and ``forkgym eval`` with the same settings."""
    return task_seeds(eval_seed, "eval", 0, episodes)


def content_keys(
    env_id: str, env_kwargs: dict[str, Any], seeds: Sequence[int], side: str = "eval"
) -> list[str]:
    """The problem (``content_key``) each task seed poses on ``side`` of ``env_id``'s content
    partition (the eval side by default)."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    env = gym.make(env_id, **on_side(env_kwargs, side)).unwrapped
    try:
        keys = []
        for seed in seeds:
            env.reset(seed=seed)
            keys.append(env.content_key(env.task))
        return keys
    finally:
        env.close()


def validation_tasks(
    env_id: str,
    env_kwargs: dict[str, Any],
    episodes: int,
    *,
    avoid: Sequence[int],
    eval_seed: int = TrainConfig.eval_seed,
) -> list[int]:
    """``episodes`` eval-side task seeds, none posing a problem that a task of ``avoid`` (eval
    side too, e.g. :func:`reported_tasks`) poses; distinct problems first (see the module's
    docstring). ValueError when every eval-side problem met is one of ``avoid``'s."""
    avoided = set(content_keys(env_id, env_kwargs, avoid))
    distinct: dict[str, int] = {}
    repeats: list[int] = []
    for step in range(_MAX_BATCHES):
        candidates = task_seeds(eval_seed, "validation", step, max(episodes, _BATCH))
        found = len(distinct)
        for seed, key in zip(candidates, content_keys(env_id, env_kwargs, candidates), strict=True):  # fmt: skip
            if key in avoided:
                continue
            if key in distinct:
                repeats.append(seed)
            else:
                distinct[key] = seed
        enough = len(distinct) + len(repeats) >= episodes
        if len(distinct) >= episodes or (enough and len(distinct) == found):
            break  # enough problems, or a batch found no new one and repeats fill the list
    if not distinct:
        raise ValueError(
            f"{env_id}: every eval-side problem drawn is among the {len(avoid)} evaluation "
            "tasks kept clear of; evaluate on fewer episodes or use a larger task space"
        )
    chosen = list(distinct.values())[:episodes]
    return chosen + repeats[: episodes - len(chosen)]


def validation_accuracy(
    model: Any,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    tasks: Sequence[int],
    max_new_tokens: int,
) -> float:
    """Greedy pass@1 of ``model`` on the eval-side ``tasks``; the model is evaluated in eval
    mode and handed back in the mode it was in."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    from ..generation.backends.hf_policy import HFPolicy
    from ..generation.evaluate import evaluate

    kwargs = on_side(env_kwargs, "eval")
    was_training = model.training
    model.eval()
    try:
        out = evaluate(
            HFPolicy(model, tokenizer, seed=0),
            tokenizer,
            lambda: gym.make(env_id, **kwargs),
            episodes=len(tasks),
            seed=0,
            max_new_tokens=max_new_tokens,
            tasks=tasks,
        )
    finally:
        model.train(was_training)
    return out["eval_accuracy"]


@dataclass
class AccuracyTarget:
    """The ``until`` hook of :func:`~forkgym.agents.run.sft.sft`: True once greedy accuracy
    on ``tasks`` reaches ``target``. ``checks`` holds every check (tokens, accuracy), the
    last of the saved model.

    sft asks the hook after every step; it evaluates at every ``every``-th call, at every call
    once a check came within ``near`` of the target (from then on the curve, which rises and
    falls by several points a step, is watched step by step, so the stop does not overshoot by
    a coarse interval's gain), and after the budget's last step, so its last check is of the
    saved model. With the defaults it evaluates at every call.

    ``tolerance`` > 0: a single step can still carry accuracy well past the target (at a
    warm start's rate, from 0.36 to 0.47 on 500 tasks). The hook keeps a copy of the weights
    of the checked model closest to the target within ``tolerance`` of it, and when the check
    that reaches the target lands more than ``tolerance`` above it, loads that copy back into
    the model before ending training, so sft saves a model within ``tolerance`` of the target
    (when one was checked). ``checks`` then ends with the restored model's own check again,
    marked ``restored``."""

    target: float
    env_id: str
    env_kwargs: dict[str, Any]
    tasks: list[int]
    max_new_tokens: int
    log: Callable[[dict[str, float]], None] | None = None
    checks: list[dict[str, float]] = field(default_factory=list)
    every: int = 1
    near: float = 0.0
    tolerance: float = 0.0
    calls: int = 0
    _closest: tuple[dict[str, float], dict[str, Any]] | None = field(default=None, repr=False)

    def due(self, last: bool) -> bool:
        """Whether this call evaluates (see the class's docstring)."""
        close = any(c["validation_accuracy"] >= self.target - self.near for c in self.checks)
        return self.calls % self.every == 0 or (self.near > 0 and close) or last

    def __call__(self, model: Any, tokenizer: Any, tokens: int, last: bool = False) -> bool:
        self.calls += 1
        if not self.due(last):
            return False
        accuracy = validation_accuracy(
            model, tokenizer, self.env_id, self.env_kwargs, self.tasks, self.max_new_tokens
        )
        check = {"tokens": tokens, "validation_accuracy": accuracy}
        self.checks.append(check)
        if self.log is not None:
            self.log(check)
        gap = abs(accuracy - self.target)
        if (
            self.tolerance > 0
            and gap <= self.tolerance
            and (
                self._closest is None
                or gap < abs(self._closest[0]["validation_accuracy"] - self.target)
            )
        ):
            weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self._closest = (check, weights)
        if accuracy < self.target:
            return False
        if accuracy - self.target > self.tolerance > 0 and self._closest is not None:
            closest, weights = self._closest
            model.load_state_dict(weights)
            self.checks.append({**closest, "restored": 1.0})
            if self.log is not None:
                self.log(self.checks[-1])
        return True

    def summary(self) -> dict[str, Any]:
        """What the checks found: the saved model's accuracy (the last check's; a restored
        model's own), whether a check reached the target, and any restoring (the tokens the
        restored model had trained on)."""
        last = self.checks[-1] if self.checks else None
        restored = last is not None and "restored" in last
        return {
            "target_accuracy": self.target,
            "validation_accuracy": None if last is None else last["validation_accuracy"],
            "validation_episodes": len(self.tasks),
            "validation_checks": len(self.checks) - restored,
            "target_reached": any(c["validation_accuracy"] >= self.target for c in self.checks),
            "restored_tokens": last["tokens"] if restored else None,
        }


def accuracy_target(
    target: float,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    episodes: int = 200,
    eval_episodes: int = 200,
    eval_seed: int = TrainConfig.eval_seed,
    max_new_tokens: int = TrainConfig.max_new_tokens,
    log: Callable[[dict[str, float]], None] | None = None,
    every: int = 1,
    near: float = 0.0,
    tolerance: float = 0.0,
) -> AccuracyTarget:
    """The hook that stops a warm start at ``target`` greedy accuracy on ``episodes``
    validation tasks kept clear of the first ``eval_episodes`` tasks ``forkgym train``
    evaluates on at ``eval_seed`` (:func:`validation_tasks`, :func:`reported_tasks`);
    ``every``, ``near``: when it evaluates; ``tolerance``: how far above the target
    the saved model may land before the closest checked one is restored
    (:class:`AccuracyTarget`)."""
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target accuracy must be in [0, 1], got {target!r}")
    if every < 1 or not (0.0 <= near <= 1.0 and 0.0 <= tolerance <= 1.0):
        raise ValueError(
            f"every must be >= 1 and near and tolerance in [0, 1], got {every!r}, {near!r} "
            f"and {tolerance!r}"
        )
    kwargs = dict(env_kwargs or {})
    avoid = reported_tasks(eval_episodes, eval_seed)
    tasks = validation_tasks(env_id, kwargs, episodes, avoid=avoid, eval_seed=eval_seed)
    return AccuracyTarget(
        target,
        env_id,
        kwargs,
        tasks,
        max_new_tokens,
        log,
        every=every,
        near=near,
        tolerance=tolerance,
    )
