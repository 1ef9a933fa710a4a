"""Forking and ending episodes through Gymnasium wrappers.

Gymnasium 1.x wrappers do not forward attributes, so ``wrapped.unwrapped.fork()`` gives a bare
environment, and a ``TimeLimit`` added by ``gym.make(..., max_episode_steps=N)`` cuts an
episode without the environment knowing (no outcome in ``info``). These two functions work on
an environment however it is wrapped.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym

from forkgym.verifiers import Outcome

from .base import TextEnv

__all__ = ["episode_outcome", "fork"]


def _text_env(env: gym.Env) -> TextEnv:
    inner = env.unwrapped
    if not isinstance(inner, TextEnv):
        raise TypeError(f"{type(inner).__name__} is not a forkgym environment")
    return inner


def fork(env: gym.Env) -> gym.Env:
    """A fork of ``env`` inside copies of the same wrappers, in their current state (a
    ``TimeLimit``'s elapsed steps, a statistics wrapper's counters): the wrappers are deep-copied
    with the inner environment replaced by its fork, which shares the verifier."""
    inner = _text_env(env)
    twin = inner.fork()
    if env is inner:
        return twin
    return copy.deepcopy(env, {id(inner): twin})


def episode_outcome(env: gym.Env, info: dict[str, Any], truncated: bool) -> Outcome | None:
    """The outcome of the step that returned ``info``: the environment's own, or, when a
    wrapper (``TimeLimit``) truncated an episode the environment had not ended, a
    ``truncated`` outcome (reason ``time_limit``) that ends it there. None mid-episode."""
    if "outcome" in info:
        return info["outcome"]
    if not truncated:
        return None
    inner = _text_env(env)
    *_, ended = inner.truncate("time_limit")
    info.update(ended)
    return ended["outcome"]
