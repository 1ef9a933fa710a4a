"""Any forkgym environment as a PrimeIntellect ``verifiers`` environment.

``verifiers`` 0.4 (``verifiers.v1``) builds an environment from a *taskset* (rows, each a
task with ``@vf.reward``/``@vf.metric`` scoring) and an ``Env`` whose ``run()`` plays one task
with the model through an ``interaction``. :func:`load_environment` returns one for a forkgym
env id:

* the rows come from seeded resets: row ``i`` of the train split is forkgym's first
  observation for seed ``seed + i`` (system message as ``system_prompt``, user message as
  ``prompt``), the eval split continues at ``seed + num_train``. ``data.info`` records the env
  id, constructor keywords, seed and task id, so the exact start is rebuilt anywhere;
* :class:`ForkgymEnv` restores a forkgym env to the row's start and steps it with each reply:
  a tool env's tool messages go back to the model (as the next user turn: forkgym's tool calls
  are written in the text, so there is no native call id a ``tool`` message could answer) until
  forkgym's episode ends, a single-turn env ends after one reply;
* the task's scoring is forkgym's: the reward (``forkgym_reward``) is the outcome's reward from
  the env's reward map, and the metrics ``correct``, ``incorrect``, ``invalid``, ``truncated``
  and ``infra_failure`` keep a broken check (verifier timeout or error, which scores 0.0 here
  because a reward must be a number) apart from a wrong answer. A trace not played through
  :class:`ForkgymEnv` (offline scoring) is graded by replaying its assistant messages.

``verifiers``' tools find the taskset by the id ``forkgym-prime`` (:data:`PLUGIN_ID`) in any
process: their plugin loader (0.4) imports an id's module by its top-level name and has no
entry-point lookup, so forkgym installs one module besides its package, ``forkgym_prime``,
which re-exports the taskset and env classes of this one. ``vf-validate forkgym-prime`` checks
each row with :func:`gold_check` (forkgym's own ``gold_action()`` played to the end) and with
its untouched scoring.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.machinery
import importlib.util
import json
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import gymnasium as gym
from pydantic import Field

import forkgym.envs  # noqa: F401  (registers the forkgym/ ids with Gymnasium)
import forkgym.verifiers as _forkgym_verifiers
from forkgym.envs import TextEnv
from forkgym.keys import reset_seeds
from forkgym.verifiers import Status

__all__ = [
    "PLUGIN_ID",
    "ForkgymData",
    "ForkgymEnv",
    "ForkgymEnvConfig",
    "ForkgymEpisode",
    "ForkgymTask",
    "ForkgymTaskset",
    "ForkgymTasksetConfig",
    "gold_check",
    "load_environment",
    "prime_verifiers",
]

PLUGIN_ID = "forkgym-prime"
"""The taskset id ``verifiers`` resolves to this module (through the alias at the end)."""


def prime_verifiers() -> ModuleType:
    """PrimeIntellect's ``verifiers.v1``, never forkgym's own ``verifiers`` folder.

    In a source checkout the repository root holds forkgym's sub-package folder
    ``verifiers/`` (installed as ``forkgym.verifiers``), and whatever puts the root on
    ``sys.path`` (``python -m pytest`` from it, a script there) makes a plain
    ``import verifiers`` find that folder first, which refuses to be imported under that name.
    So the package is looked up on ``sys.path`` without the entries whose ``verifiers/`` is
    forkgym's folder; from an installed forkgym no entry is skipped and this is a plain import.
    """
    loaded = sys.modules.get("verifiers")
    if loaded is None:
        own = Path(_forkgym_verifiers.__file__).resolve().parent

        def is_forkgyms(entry: str) -> bool:
            try:
                return (Path(entry or ".") / "verifiers").resolve() == own
            except (OSError, ValueError):
                return False

        path = [entry for entry in sys.path if not is_forkgyms(entry)]
        spec = importlib.machinery.PathFinder.find_spec("verifiers", path)
        if spec is None or spec.loader is None:
            raise ImportError("PrimeIntellect's verifiers is not installed")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules["verifiers"] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules["verifiers"]
            raise
    return importlib.import_module("verifiers.v1")


try:
    vf = prime_verifiers()
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "forkgym.integrations.prime needs PrimeIntellect's verifiers: pip install 'forkgym[prime]'"
    ) from exc


# -- forkgym envs, restored to a row's start --------------------------------------------------


class _Pool:
    """Idle forkgym envs per configuration: building one per grading costs more than grading."""

    def __init__(self) -> None:
        self._idle: dict[str, list[TextEnv]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def env(self, env_id: str, env_kwargs: Mapping[str, Any]) -> Iterator[TextEnv]:
        key = json.dumps([env_id, env_kwargs], sort_keys=True)
        with self._lock:
            idle = self._idle.setdefault(key, [])
            env = idle.pop() if idle else None
        if env is None:
            env = gym.make(env_id, **env_kwargs)  # type: ignore[assignment]
        try:
            yield env
        finally:
            with self._lock:
                self._idle[key].append(env)


_POOL = _Pool()


def _restore(env: TextEnv, info: Mapping[str, Any]) -> dict[str, Any]:
    """Reset ``env`` to the row's start: the same seed is the same reset (task, RNG state and
    all), checked against the recorded task id; a row without a seed rebuilds its task id."""
    if info.get("seed") is None:
        obs, _ = env.reset(options={"task_id": info["task_id"]})
        return obs
    obs, reset_info = env.reset(seed=int(info["seed"]))
    if reset_info["task_id"] != info["task_id"]:
        raise ValueError(
            f"seed {info['seed']} of {info['env']} gives task {reset_info['task_id']}, but the "
            f"row recorded {info['task_id']}: the env's version or keywords changed since the "
            "rows were built"
        )
    return obs


def _verdict(outcome: Any) -> dict[str, Any]:
    return {
        "status": outcome.status.value,
        "reward": outcome.reward,  # None for timeout/error
        "extracted": outcome.extracted,
    }


def _status_metrics(verdict: Mapping[str, Any]) -> dict[str, float]:
    status = Status(verdict["status"])
    return {
        "correct": float(status is Status.CORRECT),
        "incorrect": float(status is Status.INCORRECT),
        "invalid": float(status is Status.INVALID),
        "truncated": float(status is Status.TRUNCATED),
        "infra_failure": float(status.is_infrastructure),
    }


class ForkgymEpisode:
    """One row's forkgym episode: what :class:`ForkgymEnv` steps with the model's replies.

    ``respond(reply)`` is the environment's answer to one assistant message: the tool messages
    to send back, or ``None`` once forkgym's episode has ended (``verdict`` then holds the
    outcome). Holds a pooled env until :meth:`close`.
    """

    def __init__(self, info: Mapping[str, Any]) -> None:
        self.info = dict(info)
        self._lease = _POOL.env(self.info["env"], self.info.get("env_kwargs") or {})
        self.env = self._lease.__enter__()
        try:
            self.messages: list[dict[str, str]] = list(_restore(self.env, self.info)["messages"])
        except BaseException:
            self.close()
            raise
        self.verdict: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.verdict is not None

    def respond(self, reply: str) -> list[dict[str, str]] | None:
        if self.done:
            raise RuntimeError("the forkgym episode is over")
        obs, _, terminated, truncated, info = self.env.step(reply)
        new = list(obs["messages"][len(self.messages) + 1 :])  # after the assistant message
        self.messages = list(obs["messages"])
        if terminated or truncated:
            self.verdict = _verdict(info["outcome"])
            return None
        return new

    def finish(self, reason: str) -> dict[str, Any]:
        """End an unfinished episode as ``truncated`` (the model stopped or hit a limit)."""
        if self.verdict is None:
            *_, info = self.env.truncate(reason)
            self.verdict = _verdict(info["outcome"])
        return self.verdict

    def close(self) -> None:
        if self._lease is not None:
            lease, self._lease = self._lease, None
            lease.__exit__(None, None, None)


GOLD_TURNS = 64
"""The most gold replies one gold check plays before calling the episode unfinished."""


def gold_check(info: Mapping[str, Any]) -> bool:
    """The row's gold trajectory grades ``correct``: a forkgym env reset to the row's start,
    stepped with its own ``gold_action()`` until forkgym's episode ends."""
    episode = ForkgymEpisode(info)
    try:
        for _ in range(GOLD_TURNS):
            if episode.respond(episode.env.gold_action()) is None:
                break
        verdict = episode.finish("gold_unfinished")
    finally:
        episode.close()
    return verdict["status"] == Status.CORRECT.value


def _replay(info: Mapping[str, Any], replies: list[str]) -> dict[str, Any]:
    """forkgym's verdict on a finished conversation: its assistant messages, stepped in order."""
    episode = ForkgymEpisode(info)
    try:
        for reply in replies:
            if episode.respond(reply) is None:
                break
        return episode.finish("no_answer")
    finally:
        episode.close()


# -- the verifiers taskset and env --------------------------------------------------------------


class ForkgymTasksetConfig(vf.TasksetConfig):
    """Which forkgym rows load (``--env.taskset.*``)."""

    env: str = "forkgym/Arithmetic-v0"
    """The forkgym env id."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor keywords for ``gym.make`` (JSON: they are recorded in every row)."""
    split: Literal["train", "eval"] = "train"
    num_train: int = Field(1000, ge=0)
    num_eval: int = Field(100, ge=0)
    seed: int = Field(0, ge=0)
    """Train rows are seeds ``seed .. seed+num_train-1``, eval rows the next ``num_eval``."""


class ForkgymData(vf.TaskData):
    """A row: forkgym's first observation, its reference answer, and how to rebuild it."""

    answer: str = ""
    """The task's reference answer (forkgym's verifier grades against it)."""
    info: dict[str, Any] = Field(default_factory=dict)
    """``env``, ``env_kwargs``, ``seed``, ``task_id``, ``split``: the exact start."""


class ForkgymTask(vf.Task[ForkgymData]):
    """One row, scored by forkgym (see the module docstring)."""

    async def validate(self, runtime: Any) -> bool | None:
        """``verifiers``' gold check (``vf-validate``): :func:`gold_check` of this row."""
        return await asyncio.to_thread(gold_check, self.data.info)

    @vf.metric
    async def forkgym_status(self, task: ForkgymData, trace: Any) -> dict[str, float]:
        return _status_metrics(await _trace_verdict(task, trace))

    @vf.reward
    async def forkgym_reward(self, task: ForkgymData, trace: Any) -> float:
        reward = (await _trace_verdict(task, trace))["reward"]
        return 0.0 if reward is None else float(reward)  # infra: flagged by infra_failure


async def _trace_verdict(data: ForkgymData, trace: Any) -> dict[str, Any]:
    """The verdict :class:`ForkgymEnv` recorded on the trace, else a replay of its replies."""
    verdict = trace.info.get("forkgym")
    if verdict is None:
        replies = [message.content or "" for message in trace.assistant_messages]
        verdict = await asyncio.to_thread(_replay, data.info, replies)
        trace.info["forkgym"] = verdict
    return verdict


class ForkgymTaskset(vf.Taskset[ForkgymTask, ForkgymTasksetConfig]):
    """forkgym's seeded first observations as rows."""

    def load(self) -> Iterator[ForkgymTask]:
        config = self.config
        if config.split == "train":
            seeds = reset_seeds(config.seed, 0, config.num_train)
        else:
            seeds = reset_seeds(config.seed, config.num_train, config.num_eval)
        env: TextEnv = gym.make(config.env, **config.env_kwargs)  # type: ignore[assignment]
        try:
            for seed in seeds:
                obs, info = env.reset(seed=seed)
                system, prompt = _system_and_prompt(obs["messages"])
                yield ForkgymTask(
                    ForkgymData(
                        id=info["task_id"],
                        name=f"{config.env}#{seed}",
                        prompt=prompt,
                        system_prompt=system,
                        answer=env.task.answer,
                        info={
                            "env": config.env,
                            "env_kwargs": config.env_kwargs,
                            "seed": seed,
                            "task_id": info["task_id"],
                            "split": config.split,
                        },
                    ),
                    config.task,
                )
        finally:
            env.close()


def _system_and_prompt(messages: Any) -> tuple[str | None, str]:
    roles = [m["role"] for m in messages]
    if roles == ["user"]:
        return None, messages[0]["content"]
    if roles == ["system", "user"]:
        return messages[0]["content"], messages[1]["content"]
    raise ValueError(f"a first observation should be [system,] user; got roles {roles}")


class ForkgymEnvConfig(vf.EnvConfig):
    """One seat, ``agent`` (as in a plain eval): the policy, on the tool-less chat harness in
    a local process, since forkgym's tools run in forkgym's env, not in the agent's box."""

    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime={"type": "subprocess"})


class ForkgymEnv(vf.Env[ForkgymEnvConfig]):
    """Plays a row with the model; forkgym's env answers each reply until its episode ends."""

    async def run(self, task: Any, agents: Any) -> None:
        episode = await asyncio.to_thread(ForkgymEpisode, task.data.info)
        try:
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn()  # the row's prompt opens the exchange
                while not segment.terminated:
                    messages = await asyncio.to_thread(episode.respond, segment.last_reply)
                    if messages is None:
                        break
                    segment = await interaction.turn(
                        "\n\n".join(m["content"] for m in messages) or "(no output)"
                    )
                reason = interaction.trace.stop_condition or "agent_stopped"
                await asyncio.to_thread(episode.finish, reason)
                # recorded before the interaction closes, when the task's scoring reads it
                interaction.trace.info["forkgym"] = episode.verdict
        finally:
            episode.close()


def load_environment(
    env_id: str = "forkgym/Arithmetic-v0",
    num_train: int = 1000,
    num_eval: int = 100,
    seed: int = 0,
    split: Literal["train", "eval"] = "train",
    **env_kwargs: Any,
) -> Any:
    """A ``verifiers`` environment (:class:`ForkgymEnv`) over ``env_id``'s seeded tasks.

    ``env_kwargs`` go to ``gym.make`` and into every row, so they must be JSON; ``split``
    picks the train rows (seeds ``seed + i``) or the eval rows after them.
    """
    gym.spec(env_id)  # an unknown id fails here, not in the first rollout
    try:
        json.dumps(env_kwargs)
    except TypeError as exc:
        raise ValueError(
            f"env_kwargs must be JSON (they are recorded in every row): {exc}"
        ) from None
    config = ForkgymEnvConfig(
        taskset=ForkgymTasksetConfig(
            id=PLUGIN_ID,
            env=env_id,
            env_kwargs=env_kwargs,
            split=split,
            num_train=num_train,
            num_eval=num_eval,
            seed=seed,
        )
    )
    return vf.load_environment(config)
