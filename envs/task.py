"""A task: one problem instance, derived deterministically from (env, kwargs, seed) or a row."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["Draws", "Task"]


@dataclass(slots=True)
class Task:
    """Everything hidden about an episode's problem. Treat it as read-only.

    (Not a frozen dataclass: freezing costs 20 us per construction here, a tenth of an
    arithmetic episode, and a task is rebuilt from its id on every reset and fork anyway.)

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


class Draws:
    """Bounded integers from one vectorised draw of a task's generator.

    Each scalar ``Generator.integers`` call costs microseconds of numpy overhead, which
    dominates a task generator making dozens of small draws on every reset. ``Draws`` takes
    ``n`` uniforms in one call and maps each to ``floor(u * k)`` (bias below ``k / 2**53``).
    """

    __slots__ = ("_i", "_u")

    def __init__(self, rng: np.random.Generator, n: int = 64) -> None:
        self._u = rng.random(n).tolist()
        self._i = 0

    def below(self, k: int) -> int:
        """Uniform in ``0 .. k-1``."""
        u = self._u[self._i]
        self._i += 1
        return int(u * k)

    def between(self, low: int, high: int) -> int:
        """Uniform in ``low .. high-1``."""
        return low + self.below(high - low)

    def pick(self, items: list[Any] | tuple[Any, ...] | str) -> Any:
        return items[self.below(len(items))]
