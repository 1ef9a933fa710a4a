"""Any forkgym environment as an OpenEnv environment server.

OpenEnv (``openenv-core``) serves an :class:`~openenv.core.env_server.Environment` over HTTP
and a WebSocket session per client (``/ws``, what its ``EnvClient`` classes speak). This module
wraps one forkgym env per session in that interface, and :func:`create_app` builds the app with
OpenEnv's own ``create_app``, so any OpenEnv client can drive it::

    # server.py
    from forkgym.integrations.openenv import create_app
    app = create_app("forkgym/Calculator-v0")
    # uvicorn server:app --port 8000

or, without a file, ``FORKGYM_OPENENV_ENV=forkgym/Calculator-v0 uvicorn --factory
forkgym.integrations.openenv:app_from_environ``.

What crosses the wire:

* an action is ``{"message": <the assistant's text>}`` (:class:`ForkgymAction`);
* ``reset`` takes ``seed`` (forkgym's seeding: the same seed gives the same task in any
  process), ``task_id`` (rebuild one task, as ``info["task_id"]`` reported it) and ``state``
  (a forkgym :meth:`~forkgym.envs.TextEnv.get_state` snapshot to continue from: a fork);
* an observation carries the conversation (``messages``, plus the plain-text ``prompt``), the
  task id, the step status and, once the episode ends, forkgym's ``outcome`` (status and
  reward). OpenEnv's serializer drops an observation's ``metadata`` on the wire, so these are
  fields of their own; ``metadata`` holds the same for in-process callers;
* the reward of the ending step is the outcome's reward, ``None`` for a verifier timeout or
  error (forkgym never scores an infrastructure failure as a wrong answer); other steps
  reward 0.0;
* ``state`` is :class:`ForkgymState`, whose ``forkgym`` field is ``get_state()``: pass it back
  as ``reset(state=...)`` to branch an episode in another session.

OpenEnv's plain HTTP ``/step`` route builds a fresh environment per request, so a forkgym
episode (which must be reset first) runs over the WebSocket session, i.e. through a client.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import gymnasium as gym
from fastapi import FastAPI
from pydantic import Field

import forkgym.envs  # noqa: F401  (registers the forkgym/ ids with Gymnasium)
from forkgym.envs import TextEnv

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, Environment, Observation, State
    from openenv.core.env_server import create_app as _openenv_create_app
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "forkgym.integrations.openenv needs OpenEnv: pip install 'forkgym[openenv]'"
    ) from exc

__all__ = [
    "ForkgymAction",
    "ForkgymEnvClient",
    "ForkgymEnvironment",
    "ForkgymObservation",
    "ForkgymState",
    "app_from_environ",
    "create_app",
]

DEFAULT_ENV_ID = "forkgym/Arithmetic-v0"


class ForkgymAction(Action):
    """One assistant message: an answer, or (in tool envs) text containing tool calls."""

    message: str = Field(..., description="The assistant's message, exactly as generated.")


class ForkgymObservation(Observation):
    """The conversation so far and what the last step did (see the module docstring)."""

    messages: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The chat so far: system, user, assistant, tool; with the hermes tool "
        "parser, assistant messages carry OpenAI-shaped tool_calls and tool messages the "
        "tool_call_id and name of the call they answer.",
    )
    prompt: str = Field(default="", description="Plain-text rendering, ending in the cue.")
    env_id: str = Field(default="", description="The forkgym environment id.")
    task_id: str | None = Field(default=None, description="Rebuilds this task in reset().")
    turn: int = Field(default=0, description="Assistant messages taken so far.")
    status: str | None = Field(
        default=None,
        description="The step's status: tool_ok, tool_error, ... or the outcome's status.",
    )
    outcome: dict[str, Any] | None = Field(
        default=None, description="Once done: forkgym's verdict (status, reward, extracted)."
    )


class ForkgymState(State):
    """OpenEnv's state plus forkgym's JSON snapshot (``forkgym``), restorable in reset()."""

    env_id: str = ""
    task_id: str | None = None
    done: bool = True
    forkgym: dict[str, Any] = Field(default_factory=dict)


class ForkgymEnvironment(Environment[ForkgymAction, ForkgymObservation, ForkgymState]):
    """One forkgym env behind OpenEnv's Environment interface (one per client session)."""

    # Every session builds its own forkgym env; the only thing shared is the process's
    # thread-safe math verifier.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, env_id: str = DEFAULT_ENV_ID, env_kwargs: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.env_id = env_id
        self.env: TextEnv = gym.make(env_id, **(env_kwargs or {}))  # type: ignore[assignment]
        self._episode_id: str | None = None

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ForkgymObservation:
        """forkgym's reset (``seed``, ``task_id``), or a restore of a ``state`` snapshot."""
        if kwargs:
            raise ValueError(
                f"unknown reset arguments {sorted(kwargs)}; "
                "supported: seed, episode_id, task_id, state"
            )
        self._episode_id = episode_id
        if state is not None:
            if seed is not None or task_id is not None:
                raise ValueError("reset takes either a state to restore or seed/task_id")
            self.env.set_state(state)
            snapshot = self.env.get_state()
            return self._observation(
                snapshot["messages"],
                status=None,
                reward=None,
                done=bool(snapshot["done"]),
                outcome=None,
            )
        options = None if task_id is None else {"task_id": task_id}
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observation(
            obs["messages"], status=info["status"], reward=None, done=False, outcome=None
        )

    def step(
        self, action: ForkgymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ForkgymObservation:
        """One assistant message; the episode ends when forkgym's does."""
        obs, reward, terminated, truncated, info = self.env.step(action.message)
        outcome = info.get("outcome")
        done = terminated or truncated
        if outcome is not None:
            summary: dict[str, Any] | None = {
                "status": outcome.status.value,
                "reward": outcome.reward,  # None for timeout/error: no reward, not a zero
                "extracted": outcome.extracted,
            }
            step_reward = outcome.reward
        else:
            summary, step_reward = None, float(reward)
        return self._observation(
            obs["messages"], status=info["status"], reward=step_reward, done=done, outcome=summary
        )

    @property
    def state(self) -> ForkgymState:
        snapshot = self.env.get_state()
        return ForkgymState(
            episode_id=self._episode_id,
            step_count=int(snapshot["turn"]),
            env_id=self.env_id,
            task_id=snapshot["task_id"],
            done=bool(snapshot["done"]),
            forkgym=snapshot,
        )

    def close(self) -> None:
        self.env.close()

    def _observation(
        self,
        messages: Any,
        *,
        status: str | None,
        reward: float | None,
        done: bool,
        outcome: dict[str, Any] | None,
    ) -> ForkgymObservation:
        messages = [dict(m) for m in messages]  # role, content and any OpenAI tool fields
        task_id = self.env.task.task_id
        return ForkgymObservation(
            messages=messages,
            prompt=self.env.render_prompt(messages),
            env_id=self.env_id,
            task_id=task_id,
            turn=self.env.turn,
            status=status,
            outcome=outcome,
            reward=reward,
            done=done,
            metadata={
                "env_id": self.env_id,
                "task_id": task_id,
                "turn": self.env.turn,
                "status": status,
                "outcome": outcome,
            },
        )


def create_app(
    env_id: str = DEFAULT_ENV_ID, *, max_sessions: int = 8, **env_kwargs: Any
) -> FastAPI:
    """OpenEnv's FastAPI app serving ``env_id`` (``env_kwargs`` go to ``gym.make``).

    ``max_sessions`` bounds the concurrent WebSocket sessions (one forkgym env each). The env
    is built once here so that a wrong id or keyword fails at startup, not in a session.
    """
    ForkgymEnvironment(env_id, env_kwargs).close()
    return _openenv_create_app(
        functools.partial(ForkgymEnvironment, env_id, env_kwargs),
        ForkgymAction,
        ForkgymObservation,
        env_name=env_id,
        max_concurrent_envs=max_sessions,
    )


def app_from_environ() -> FastAPI:
    """:func:`create_app` configured by environment variables, for ``uvicorn --factory``.

    ``FORKGYM_OPENENV_ENV`` (the env id), ``FORKGYM_OPENENV_KWARGS`` (a JSON object of
    constructor keywords) and ``FORKGYM_OPENENV_MAX_SESSIONS``.
    """
    kwargs = json.loads(os.environ.get("FORKGYM_OPENENV_KWARGS") or "{}")
    if not isinstance(kwargs, dict):
        raise ValueError("FORKGYM_OPENENV_KWARGS must be a JSON object")
    return create_app(
        os.environ.get("FORKGYM_OPENENV_ENV", DEFAULT_ENV_ID),
        max_sessions=int(os.environ.get("FORKGYM_OPENENV_MAX_SESSIONS", "8")),
        **kwargs,
    )


class ForkgymEnvClient(EnvClient[ForkgymAction, ForkgymObservation, ForkgymState]):
    """A typed OpenEnv client for these servers (OpenEnv's ``GenericEnvClient`` works too,
    with plain dicts). Async like every ``EnvClient``; ``.sync()`` gives the blocking one."""

    def _step_payload(self, action: ForkgymAction) -> dict[str, Any]:
        return {"message": action.message, "metadata": action.metadata}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ForkgymObservation]:
        observation = ForkgymObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> ForkgymState:
        return ForkgymState(**payload)
