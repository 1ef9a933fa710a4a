"""``forkgym/WordProblems-v0``: seeded multi-step word problems with exact integer answers.

A problem is a chain of ``steps`` events applied to a starting count (buying packs, giving
some away, doubling, sharing equally), phrased from a few templates. Every intermediate value
is a non-negative integer by construction (shares are only drawn from exact divisors), and the
worked solution shows one line per event.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .math_env import ANSWER_INSTRUCTION, MathEnv
from .task import Draws, Task

__all__ = ["WordProblemsEnv"]

NAMES = ["Amara", "Bruno", "Chiara", "Dev", "Elif", "Farah", "Goran", "Hiro", "Ines", "Jonas"]
SETTINGS = [  # (things, container, place)
    ("stickers", "sheet", "the stationery shop"),
    ("marbles", "bag", "the toy fair"),
    ("seedlings", "tray", "the garden centre"),
    ("postcards", "bundle", "the museum shop"),
    ("cupcakes", "box", "the bakery"),
]


def _event(draw: Draws, total: int, name: str, things: str, container: str) -> tuple[str, str, int]:
    """One event: (sentence, solution line, new total)."""
    kind = draw.pick(("buy", "give", "share", "double"))
    if kind == "share":
        divisors = [d for d in range(2, 10) if total % d == 0 and total // d > 0]
        if not divisors:
            kind = "buy"
        else:
            d = draw.pick(divisors)
            new = total // d
            return (
                f"{name} shares the {things} equally among {d} friends, keeping one share.",
                f"{total} / {d} = {new}",
                new,
            )
    if kind == "give" and total > 1:
        x = draw.between(1, total)
        return f"{name} gives away {x} {things}.", f"{total} - {x} = {total - x}", total - x
    if kind == "double" and total < 5000:
        k = draw.between(2, 4)
        word = {2: "doubles", 3: "triples"}[k]
        return (
            f"A lucky week {word} the number of {things} {name} has.",
            f"{total} * {k} = {total * k}",
            total * k,
        )
    packs, size = draw.between(2, 10), draw.between(3, 25)
    new = total + packs * size
    return (
        f"{name} buys {packs} {container}s with {size} {things} in each.",
        f"{total} + {packs} * {size} = {new}",
        new,
    )


class WordProblemsEnv(MathEnv):
    """Multi-step word problems; ``steps`` events between the start and the question."""

    task_prefix = "word"

    def __init__(self, steps: int = 3, max_attempts: int = 1, **common: Any) -> None:
        if not 1 <= steps <= 12:
            raise ValueError(f"steps must be in 1..12, got {steps}")
        self.steps = steps
        super().__init__(config={"steps": steps}, max_attempts=max_attempts, **common)

    def content_key(self, task: Task) -> str:
        """The chain of computations the story asks for (``12 + 3 * 4 = 24; 24 - 5 = 19``),
        without the story: the same numbers told of another person or thing are one problem."""
        return "word problem: " + "; ".join(task.data["steps"])

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        draw = Draws(rng, 3 + 4 * self.steps)
        name = draw.pick(NAMES)
        things, container, place = draw.pick(SETTINGS)
        total = draw.between(5, 60)
        sentences = [f"{name} goes to {place} and starts with {total} {things}."]
        lines = []
        for _ in range(self.steps):
            sentence, line, total = _event(draw, total, name, things, container)
            sentences.append(sentence)
            lines.append(line)
        question = f"How many {things} does {name} have at the end?"
        solution = "\n".join([*lines, f"So {name} has $\\boxed{{{total}}}$ {things}."])
        return Task(
            task_id=task_id,
            prompt=" ".join([*sentences, question, ANSWER_INSTRUCTION]),
            answer=str(total),
            family="word_problem",
            difficulty=self.steps,
            solution=solution,
            data={"steps": lines},
        )
