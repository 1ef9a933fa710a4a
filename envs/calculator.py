"""``forkgym/Calculator-v0``: arithmetic too hard to do mentally, with an exact calculator.

Tasks chain ``terms`` numbers of ``digits`` digits (five-digit products and the like). The
calculator evaluates with :func:`~forkgym.envs.exact_eval.evaluate`: exact rationals, bounded
sizes, no ``eval``. The gold trajectory is one calculator call and the boxed result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .exact_eval import (
    ExpressionError,
    check_expression_shape,
    evaluate,
    expression_key,
    format_number,
    random_expression,
)
from .task import Draws, Task
from .tool_env import ToolEnv, ToolResult, tool

__all__ = ["CalculatorEnv"]

_SOLUTIONS = {  # the gold final answer's form, by solution_style
    "worked": "The calculator gives {answer}, so the answer is $\\boxed{{{answer}}}$.",
    "answer": "$\\boxed{{{answer}}}$",
}


class CalculatorEnv(ToolEnv):
    """Compute a large arithmetic expression exactly, with a calculator tool."""

    task_prefix = "calc"
    instructions = "Compute the value asked for exactly. Numbers this large need the calculator."

    def __init__(
        self,
        digits: int = 5,
        terms: int = 4,
        operations: str = "+-*",
        tool_parser: str = "hermes",
        max_turns: int = 4,
        solution_style: str = "worked",
        **common: Any,
    ) -> None:
        """``solution_style`` is the gold final answer's form: ``"worked"`` restates the tool's
        result before boxing it; ``"answer"`` is the boxed result alone (a third of the tokens,
        and one copy of the number instead of two)."""
        if solution_style not in _SOLUTIONS:
            raise ValueError(f"solution_style must be one of {sorted(_SOLUTIONS)}")
        self.digits, self.terms = digits, terms
        self.solution_style = solution_style
        self.operations = check_expression_shape(digits, terms, operations)
        config = {
            "digits": digits,
            "terms": terms,
            "operations": self.operations,
            "solution_style": solution_style,
        }
        super().__init__(config=config, tool_parser=tool_parser, max_turns=max_turns, **common)

    def content_key(self, task: Task) -> str:
        """The expression with its commutative parts in one order (:func:`expression_key`):
        ``45 + 23`` and ``23 + 45`` are one problem, here and in every env that poses it."""
        return "expression: " + expression_key(task.data["expression"])

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        expression, answer, _ = random_expression(
            Draws(rng, 2 * self.terms), self.digits, self.terms, self.operations
        )
        return Task(
            task_id=task_id,
            prompt=f"What is the exact value of {expression}?",
            answer=answer,
            family="calculator",
            difficulty=self.digits * self.terms,
            solution=_SOLUTIONS[self.solution_style].format(answer=answer),
            data={"expression": expression},
        )

    @tool(
        "Evaluate an arithmetic expression exactly (+ - * / // % ** and parentheses).",
        expression="string",
    )
    def calculator(self, expression: str) -> ToolResult:
        self.episode["calls"] = self.episode.get("calls", 0) + 1
        try:
            value = evaluate(expression)
        except ExpressionError as exc:
            return ToolResult(f"error: {exc}", "tool_error")
        return ToolResult(format_number(value))

    def gold_action(self) -> str:
        if not self.episode.get("calls"):
            return self.format_call("calculator", expression=self.task.data["expression"])
        return self.task.solution or f"$\\boxed{{{self.task.answer}}}$"
