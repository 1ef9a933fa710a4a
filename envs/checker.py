"""``check_llm_env``: Gymnasium's ``check_env`` plus the guarantees RL on LLMs relies on.

Gymnasium checks same-process reset/step determinism through ``np_random``; an env drawing from
the global ``random`` can pass by luck, and nothing checks other processes or branching. This
checker adds, for a registered id:

1. ``check_env`` with every Gymnasium warning turned into a failure;
2. cross-process determinism: fresh interpreters with different ``PYTHONHASHSEED`` hash the
   first observation and the hidden task of the same seeds;
3. state and fork equivalence: fork (and ``set_state`` a fresh env) after every turn of a
   scripted episode that mixes a malformed action with gold actions; all branches must produce
   identical observations, rewards, flags and infos under identical actions;
4. ``gymnasium.make_vec(id, n)`` reset with ``seed=[s] * n`` gives n identical starts;
5. the gold trajectory of sampled tasks ends ``correct``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env, data_equivalence

from .base import SPLITS, TextEnv, content_split

__all__ = ["LLMEnvCheckError", "check_llm_env", "episode_hash"]

BAD_ACTION = '<tool_call>{"name": oops}</tool_call> Not sure. Maybe \\boxed{-1}?'


class LLMEnvCheckError(AssertionError):
    """A check failed; the message names the env, the check and what to fix."""


def episode_hash(env: TextEnv, obs: dict[str, Any]) -> str:
    """SHA-256 of the first observation and the hidden task: what must match across processes."""
    blob = json.dumps({"obs": obs, "task": env.task.to_dict()}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()


def reset_hashes(env_id: str, kwargs: dict[str, Any], seeds: list[int]) -> list[str]:
    env = gym.make(env_id, **kwargs)
    hashes = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        hashes.append(episode_hash(env.unwrapped, obs))
    env.close()
    return hashes


def hashes_in_subprocess(
    env_id: str, kwargs: dict[str, Any], seeds: list[int], hash_seed: str
) -> list[str]:
    """The same hashes, computed by a fresh interpreter with the given ``PYTHONHASHSEED``."""
    code = (
        "import json, sys\nimport forkgym.envs\nfrom forkgym.envs.checker import reset_hashes\n"
        "args = json.loads(sys.stdin.read())\nprint(json.dumps(reset_hashes(*args)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([env_id, kwargs, seeds]),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if proc.returncode != 0:
        raise LLMEnvCheckError(
            f"{env_id}: the subprocess could not reset the env:\n{proc.stderr[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fail(env_id: str, check: str, message: str) -> LLMEnvCheckError:
    return LLMEnvCheckError(f"{env_id}: {check} failed: {message}")


def _scripted_episode(env: TextEnv, seed: int) -> list[tuple[str, tuple]]:
    """Reset, then one malformed action, then gold actions to the end: [(action, transition)]."""
    env.reset(seed=seed)
    steps: list[tuple[str, tuple]] = []
    done = False
    while not done:
        action = BAD_ACTION if not steps else env.gold_action()
        transition = env.step(action)
        steps.append((action, transition))
        done = transition[2] or transition[3]
    return steps


def _same_transition(a: tuple, b: tuple) -> bool:
    return all(data_equivalence(x, y, exact=True) for x, y in zip(a, b, strict=True))


def _check_gymnasium_api(env_id: str, kwargs: dict[str, Any], verbose: bool) -> dict[str, Any]:
    """The env is a forkgym TextEnv and passes Gymnasium's ``check_env`` with every warning
    an error (its ``human`` render output swallowed unless ``verbose``)."""
    env = gym.make(env_id, **kwargs)
    if not isinstance(env.unwrapped, TextEnv):
        raise _fail(env_id, "type", f"{type(env.unwrapped).__name__} is not a forkgym TextEnv")
    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with warnings.catch_warnings(), sink:
        warnings.simplefilter("error")
        try:
            check_env(env)
        except Exception as exc:
            raise _fail(env_id, "gymnasium check_env", f"{type(exc).__name__}: {exc}") from exc
    env.close()
    return {}


def _check_cross_process_determinism(
    env_id: str, kwargs: dict[str, Any], seeds: int
) -> dict[str, Any]:
    """The first observation and task of each seed repeat in this process and in fresh
    interpreters under two ``PYTHONHASHSEED`` values, and the seeds give varied tasks."""
    plain = {k: v for k, v in kwargs.items() if _is_json(v)}
    seed_list = list(range(seeds))
    here = reset_hashes(env_id, kwargs, seed_list)
    if here != reset_hashes(env_id, kwargs, seed_list):
        raise _fail(env_id, "same-process determinism", "two resets with one seed differ")
    for hash_seed in ("0", "12345"):
        there = hashes_in_subprocess(env_id, plain, seed_list, hash_seed)
        if there != here:
            bad = next(s for s, (a, b) in enumerate(zip(here, there, strict=True)) if a != b)
            raise _fail(
                env_id,
                "cross-process determinism",
                f"seed {bad} gives a different observation or task under PYTHONHASHSEED={hash_seed}; "
                "draw all randomness from self.np_random / SeedSequence, never random or hash()",
            )
    if len(set(here)) < max(2, len(here) // 2):
        raise _fail(
            env_id, "seed sensitivity", f"{len(here)} seeds gave only {len(set(here))} tasks"
        )
    return {"seeds": len(seed_list), "hash_seeds": 2}


def _check_branches_agree(
    env_id: str, kwargs: dict[str, Any], env: TextEnv, seed: int, reference: list, k: int
) -> None:
    """Replay ``k`` steps of the scripted episode, then branch (the env itself, a fork, and a
    fresh env given ``get_state()``): every branch must step exactly like the reference."""
    env.reset(seed=seed)
    for action, _ in reference[:k]:
        env.step(action)
    state = env.get_state()
    if json.loads(json.dumps(state)) != state:
        raise _fail(env_id, "state", "get_state() is not JSON round-trippable")
    twin = env.fork()
    fresh = gym.make(env_id, **kwargs).unwrapped
    fresh.set_state(state)
    for i, (action, expected) in enumerate(reference[k:], start=k + 1):
        for name, branch in (("original", env), ("fork", twin), ("set_state", fresh)):
            got = branch.step(action)
            if not _same_transition(got, expected):
                raise _fail(
                    env_id,
                    "fork equivalence",
                    f"seed {seed}: the {name} branched after step {k} differs at step {i}",
                )


def _check_fork_and_state_equivalence(
    env_id: str, kwargs: dict[str, Any], seeds: int
) -> dict[str, Any]:
    """Branching after every turn of a scripted episode (a malformed action, then gold ones)
    changes nothing: fork and ``set_state`` reproduce the episode exactly."""
    env = gym.make(env_id, **kwargs).unwrapped
    forks = 0
    for seed in range(seeds):
        reference = _scripted_episode(env, seed)
        for k in range(len(reference)):  # branch after k steps
            _check_branches_agree(env_id, kwargs, env, seed, reference, k)
            forks += 1
    env.close()
    return {"seeds": seeds, "branch_points": forks}


def _check_make_vec_identical_starts(
    env_id: str, kwargs: dict[str, Any], num_envs: int
) -> dict[str, Any]:
    """``gym.make_vec(env_id, num_envs)`` reset with one seed for all gives identical starts."""
    venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", **kwargs)
    try:
        obs, _ = venv.reset(seed=[7] * num_envs)
    finally:
        venv.close()
    prompts, messages = obs["prompt"], obs["messages"]
    if len(set(prompts)) != 1 or any(m != messages[0] for m in messages):
        raise _fail(env_id, "make_vec", f"reset(seed=[7]*{num_envs}) gave different starts")
    return {"num_envs": num_envs}


def _check_gold_answers_correct(env_id: str, kwargs: dict[str, Any], seeds: int) -> dict[str, Any]:
    """Following ``gold_action()`` to the end of sampled tasks ends with status ``correct``."""
    env = gym.make(env_id, **kwargs).unwrapped
    for seed in range(seeds):
        env.reset(seed=1000 + seed)
        done, info = False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(env.gold_action())
            done = terminated or truncated
        if info.get("status") != "correct":
            raise _fail(
                env_id,
                "gold answers",
                f"the gold trajectory of seed {1000 + seed} (task {env.task.task_id}) ended "
                f"{info.get('status')!r}: {info.get('outcome')}",
            )
    env.close()
    return {"seeds": seeds}


def _check_held_out_by_content(env_id: str, kwargs: dict[str, Any], seeds: int) -> dict[str, Any]:
    """``task_split="train"`` and ``"eval"`` envs never draw the same problem, and each draws
    only its own side of the content partition."""
    seen: dict[str, set[str]] = {}
    for side in SPLITS:
        env = gym.make(env_id, **{**kwargs, "task_split": side}).unwrapped
        keys = set()
        for seed in range(seeds):
            env.reset(seed=seed)
            key = env.content_key(env.task)
            if content_split(key, env.eval_fraction) != side:
                raise _fail(env_id, "held out by content", f"task_split={side!r} drew a task of the other side (seed {seed})")  # fmt: skip
            keys.add(key)
        env.close()
        seen[side] = keys
    shared = seen["train"] & seen["eval"]
    if shared:
        raise _fail(env_id, "held out by content", f"{len(shared)} problems drawn by both splits, e.g. {next(iter(shared))[:80]!r}")  # fmt: skip
    return {"seeds": seeds, "train_tasks": len(seen["train"]), "eval_tasks": len(seen["eval"])}


def check_llm_env(
    env_id: str,
    *,
    seeds: int = 4,
    cross_process_seeds: int = 16,
    vector_envs: int = 3,
    split_seeds: int = 64,
    verbose: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run every check on ``gym.make(env_id, **kwargs)``; raise on the first failure.

    Returns a report: which checks ran, over how many seeds, and how long each took. Quiet
    unless ``verbose``: Gymnasium's ``check_env`` renders the env in ``human`` mode, which
    prints whole prompts.
    """
    checks: list[tuple[str, Callable[..., dict[str, Any]], Any]] = [
        ("gymnasium_check_env", _check_gymnasium_api, verbose),
        ("cross_process_determinism", _check_cross_process_determinism, cross_process_seeds),
        ("fork_and_state_equivalence", _check_fork_and_state_equivalence, seeds),
        ("make_vec_identical_starts", _check_make_vec_identical_starts, vector_envs),
        ("gold_answers_correct", _check_gold_answers_correct, seeds),
        ("held_out_by_content", _check_held_out_by_content, split_seeds),
    ]
    report: dict[str, Any] = {"env_id": env_id, "checks": {}}
    for name, check, option in checks:
        start = time.perf_counter()
        detail = check(env_id, kwargs, option)
        report["checks"][name] = {"seconds": round(time.perf_counter() - start, 3), **detail}
    return report


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True
