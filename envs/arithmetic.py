"""``forkgym/Arithmetic-v0``: procedural arithmetic with difficulty knobs and a curriculum.

Each task is an expression of ``terms`` random ``digits``-digit numbers joined by operators
drawn from ``operations`` (any of ``+-*/``), evaluated exactly with the usual precedence.
``level`` is a curriculum knob that overrides digits and terms: level 0 is two 1-digit terms,
and each level adds a digit or a term in turn. Division makes exact fractional answers.
``solution_style`` is the gold answer's form: ``worked`` restates the expression in a
sentence, ``compact`` is ``expression = \\boxed{result}``, ``answer`` the boxed result alone.
Restating the operands right before the result makes the sum far easier for a tiny model to
learn; ``compact`` keeps that at half the tokens of ``worked``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .exact_eval import check_expression_shape, expression_key, random_expression
from .math_env import ANSWER_INSTRUCTION, MathEnv
from .task import Draws, Task

__all__ = ["ArithmeticEnv", "curriculum"]

_SOLUTIONS = {  # the gold answer's form, by solution_style
    "worked": "{expression} = {answer}, so the answer is $\\boxed{{{answer}}}$.",
    "compact": "{expression} = \\boxed{{{answer}}}",
    "answer": "$\\boxed{{{answer}}}$",
}


def curriculum(level: int) -> tuple[int, int]:
    """(digits, terms) for a curriculum level: 0 -> (1, 2), 1 -> (2, 2), 2 -> (2, 3), ..."""
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    return 1 + (level + 1) // 2, 2 + level // 2


class ArithmeticEnv(MathEnv):
    """Compute an arithmetic expression exactly; the answer goes in ``\\boxed{}``."""

    task_prefix = "arith"

    def __init__(
        self,
        digits: int = 2,
        terms: int = 2,
        operations: str = "+-*",
        level: int | None = None,
        max_attempts: int = 1,
        solution_style: str = "worked",
        instruction: bool = True,
        **common: Any,
    ) -> None:
        """``instruction=False`` leaves the answer-format sentence out of the prompt (8 of its
        25 tokens with the tiny tokenizer): a policy warm-started on the env's demonstrations
        knows the format, and every forward pass of rollout and training carries the prompt."""
        if solution_style not in _SOLUTIONS:
            raise ValueError(f"solution_style must be one of {sorted(_SOLUTIONS)}")
        self.solution_style = solution_style
        self.instruction = instruction
        if level is not None:
            digits, terms = curriculum(level)
        self.digits, self.terms = digits, terms
        self.operations = check_expression_shape(digits, terms, operations)
        config = {
            "digits": digits,
            "terms": terms,
            "operations": self.operations,
            "level": level,
            "solution_style": solution_style,
            "instruction": instruction,
        }
        super().__init__(config=config, max_attempts=max_attempts, **common)

    def content_key(self, task: Task) -> str:
        """The expression with its commutative parts in one order (:func:`expression_key`):
        ``45 + 23`` and ``23 + 45`` are one problem, here and in every env that poses it."""
        return "expression: " + expression_key(task.data["expression"])

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        draw = Draws(rng, 2 * self.terms)
        expression, answer, ops = random_expression(draw, self.digits, self.terms, self.operations)
        exact = (
            " Give the exact value (a reduced fraction if it is not an integer)."
            if "/" in ops
            else ""
        )
        return Task(
            task_id=task_id,
            prompt=f"Compute {expression}.{exact}"
            + (f" {ANSWER_INSTRUCTION}" if self.instruction else ""),
            answer=answer,
            family="arithmetic",
            difficulty=self.digits * self.terms,
            solution=_SOLUTIONS[self.solution_style].format(expression=expression, answer=answer),
            data={"expression": expression},
        )
