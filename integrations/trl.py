"""forkgym's environments and verifier inside TRL's ``GRPOTrainer``.

Three pieces, each usable on its own (``pip install 'forkgym[trl]'``):

* :func:`env_dataset`: a ``datasets.Dataset`` of an environment's seeded first observations
  (conversational ``prompt``, plus the ``task_id`` that rebuilds exactly that start, the
  ``task_seed`` and the reference ``answer``).
* :class:`EnvReward`: a reward function. It grades the final assistant message of each
  completion (plain text or messages) against the task of its row, in one batch through
  forkgym's verifier, and prices the status with the environment's reward map. Infrastructure
  failures (a verifier timeout or error) score ``None``, which TRL leaves out of the sum, so a
  broken grader never reads as a wrong answer; the statuses are logged as ``forkgym/<status>``.
* :func:`environment_factory`: for multi-turn tool environments. Each instance is reset to
  its row's task, and its public methods are the environment's tools (with the docstrings and
  type hints TRL turns into JSON schemas), run on the episode exactly as a tool call from the
  model would be. TRL hands the instances to the reward function, which grades the final
  answer against each one's task.

Rows carry ``task_id`` rather than relying on the order of seeds, so a prompt is graded
against the task it was built from whatever TRL's sampler does.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium as gym

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.envs.math_env import ANSWER_INSTRUCTION
from forkgym.envs.tool_env import ToolEnv
from forkgym.verifiers import Outcome, Status

__all__ = ["EnvReward", "env_dataset", "env_rows", "environment_factory"]

_PY_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


def _plain(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def env_rows(
    env_id: str,
    seeds: int | Iterable[int],
    *,
    template_tools: bool = False,
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """One row per seed (``seeds`` may be a count: ``range(seeds)``): ``{"prompt": the first
    observation's messages, "task_id", "task_seed", "answer"}``.

    ``template_tools=True`` (with :func:`environment_factory`) leaves the tool descriptions
    out of the system prompt: TRL passes the tools to the chat template, which writes them."""
    env = gym.make(env_id, **env_kwargs)
    inner = env.unwrapped
    if template_tools and not isinstance(inner, ToolEnv):
        raise ValueError(f"{env_id} has no tools; template_tools needs a tool environment")
    rows = []
    for seed in range(seeds) if isinstance(seeds, int) else seeds:
        obs, info = env.reset(seed=int(seed))
        messages = _plain(obs["messages"])
        if template_tools and messages[0]["role"] == "system":
            messages[0]["content"] = f"{inner.instructions}\n\n{ANSWER_INSTRUCTION}"
        rows.append(
            {
                "prompt": messages,
                "task_id": info["task_id"],
                "task_seed": int(seed),
                "answer": inner.task.answer,
            }
        )
    env.close()
    return rows


def env_dataset(
    env_id: str, seeds: int | Iterable[int], *, template_tools: bool = False, **env_kwargs: Any
) -> Any:
    """:func:`env_rows` as a ``datasets.Dataset`` (what ``GRPOTrainer(train_dataset=...)``
    takes)."""
    try:
        from datasets import Dataset
    except ImportError:  # pragma: no cover - trl depends on datasets
        raise ImportError(
            "env_dataset needs the datasets package: pip install 'forkgym[trl]'"
        ) from None
    return Dataset.from_list(env_rows(env_id, seeds, template_tools=template_tools, **env_kwargs))


def _final_answer(completion: str | Sequence[dict[str, Any]]) -> str | None:
    """The text to grade: a plain completion, or the last message when it is the assistant's
    (a conversation that ends on a tool result never gave an answer)."""
    if isinstance(completion, str):
        return completion
    if not completion or completion[-1].get("role") != "assistant":
        return None
    content = completion[-1].get("content")
    return content if isinstance(content, str) else ""


class EnvReward:
    """A TRL reward function grading completions against ``env_id``'s tasks (module doc).

    ``EnvReward("forkgym/Arithmetic-v0", operations="+")``: pass the same env kwargs as the
    dataset, since they decide the tasks and the reward map."""

    def __init__(self, env_id: str, **env_kwargs: Any) -> None:
        self.env_id = env_id
        self.grader = gym.make(env_id, **env_kwargs).unwrapped
        self.__name__ = f"forkgym_{env_id.split('/')[-1]}"  # TRL names its reward columns so

    def outcomes(
        self,
        completions: Sequence[str | Sequence[dict[str, Any]]],
        task_id: Sequence[str] | None = None,
        environments: Sequence[Any] | None = None,
    ) -> list[Outcome]:
        """The verifier's outcome for each completion (``truncated`` when it gave no answer)."""
        if environments is not None:
            task_id = [e.task_id for e in environments]
        if task_id is None:
            raise ValueError(
                "EnvReward needs the task of each completion: a `task_id` column (env_dataset "
                "makes one) or environment_factory's environments"
            )
        answers = [_final_answer(c) for c in completions]
        references = [self.grader.task_from_id(t).answer for t in task_id]
        pairs = [(r, a) for r, a in zip(references, answers, strict=True) if a is not None]
        verifier = self.grader.grader()
        if hasattr(verifier, "verify_many"):
            graded = iter(verifier.verify_many(pairs))
        else:
            graded = iter([verifier.verify(r, a) for r, a in pairs])
        truncated = Outcome.from_status(
            Status.TRUNCATED, details={"reason": "no final answer"}, verifier="env"
        )
        return [truncated if a is None else next(graded) for a in answers]

    def __call__(
        self,
        completions: Sequence[str | Sequence[dict[str, Any]]],
        task_id: Sequence[str] | None = None,
        environments: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        outcomes = self.outcomes(completions, task_id, environments)
        if log_metric is not None and outcomes:
            counts = Counter(o.status.value for o in outcomes)
            for status in Status:
                log_metric(f"forkgym/{status.value}", counts[status.value] / len(outcomes))
        return [self.grader.rewards.reward(o.status) for o in outcomes]


def _tool_method(name: str, description: str, params: dict[str, str]) -> Callable[..., str]:
    """A method named ``name`` that runs the tool, with the signature and Google-style docstring
    from which transformers builds the JSON schema TRL shows the model."""

    def method(self: Any, **arguments: Any) -> str:
        return self._call(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [
            inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=_PY_TYPES[kind])
            for p, kind in params.items()
        ],
        return_annotation=str,
    )
    method.__annotations__ = {p: _PY_TYPES[kind] for p, kind in params.items()} | {"return": str}
    args = "\n".join(f"    {p}: The {p} ({kind}) for {name}." for p, kind in params.items())
    method.__doc__ = f"{description}\n\nArgs:\n{args}\n\nReturns:\n    The tool's output."
    return method


class _EnvTools:
    """Base of the classes :func:`environment_factory` builds: only ``reset`` and the tools are
    public (TRL exposes every other public method to the model as a tool)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self._env = gym.make(env_id, **env_kwargs).unwrapped

    def reset(self, task_id: str | None = None, task_seed: int | None = None, **_: Any) -> None:
        """Start the row's task (``task_id``, else the seed); the prompt is the row's own."""
        options = {"task_id": task_id} if task_id is not None else None
        self._env.reset(seed=task_seed, options=options)

    @property
    def task_id(self) -> str:
        return self._env.task.task_id

    @property
    def env(self) -> ToolEnv:
        return self._env

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        return self._env.call_tool(name, **arguments).content


def environment_factory(env_id: str, **env_kwargs: Any) -> Callable[[], _EnvTools]:
    """A zero-argument factory for ``GRPOTrainer(environment_factory=...)`` whose instances
    expose ``env_id``'s tools as methods. Build the dataset with
    ``env_dataset(env_id, seeds, template_tools=True)`` and grade with ``EnvReward(env_id)``.
    """
    probe = gym.make(env_id, **env_kwargs).unwrapped
    if not isinstance(probe, ToolEnv):
        raise ValueError(
            f"{env_id} has no tools: train it with env_dataset and EnvReward alone "
            "(environment_factory is for multi-turn tool environments)"
        )
    methods = {
        name: _tool_method(name, spec.description, spec.params)
        for name, spec in probe.tools.items()
    }
    cls = type(f"{type(probe).__name__}Tools", (_EnvTools,), methods)
    probe.close()

    def make() -> _EnvTools:
        return cls(env_id, env_kwargs)

    return make
