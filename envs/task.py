"""A task: one problem instance, derived deterministically from (env, kwargs, seed) or a row."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Task"]


@dataclass(frozen=True)
class Task:
    """Everything hidden about an episode's problem.

    ``prompt`` is the user message; ``answer`` the reference the verifier grades against;
    ``solution`` a worked solution ending in the boxed answer (the gold final message), and
    ``data`` any hidden world the tools read (a table, numbers), JSON-serialisable.
    """

    task_id: str
    prompt: str
    answer: str
    family: str
    difficulty: int | float | str = 0
    solution: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
