"""``forkgym/CheckedSteps-v0``: a chain of arithmetic steps, each result reported to a tool.

A task is a start value and ``steps`` additions or subtractions of ``digits``-digit numbers;
the prompt gives the start and the first operation (``Start with 50 and apply 3 operations,
one at a time. First: 50 + 85``). The model reports each result with the ``submit(value)``
tool, which answers with the next operation, and ends with the final value boxed. Gold reports
write the operation out before the call (``50 + 85 = 135``), unless
``solution_style="answer"``. The episode succeeds only if every reported result was right and
the boxed answer is the last one: the verifier grades the box, and a box after a wrong or
missing report is ``incorrect`` whatever it says.

``feedback`` sets how much of the outcome the state shows. With ``feedback=True`` (default)
the tool says whether each result was right (``Correct. Next: 135 - 30``) or not
(``Incorrect: the chain is broken. Next: 135 - 30``, the next operation on the true value):
after a wrong report the episode cannot succeed, so the probability of success is readable
from the transcript (0 after "Incorrect"; after "Correct", the chance of getting the
remaining steps right). With ``feedback=False`` the tool records the value and gives the next
operation without the value it applies to (``Recorded. Next: - 30``): whether the chain still
holds is hidden in the model's own arithmetic, as in ``forkgym/Arithmetic-v0``. ``steps`` sets
the episode's length (``steps + 1`` turns for the gold trajectory) and so how sparse its one
reward is. This is the task family on which a value has intermediate states to tell apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from forkgym.verifiers import Outcome, Status

from .task import Draws, Task
from .tool_env import ToolEnv, ToolResult, tool

__all__ = ["CheckedStepsEnv"]


def _operation(op: str, n: int, value: int | None = None) -> str:
    """``+ 25``, or with the value it applies to, ``37 + 25``."""
    return f"{op} {n}" if value is None else f"{value} {op} {n}"


class CheckedStepsEnv(ToolEnv):
    """Carry a value through a chain of operations, reporting each result to a tool."""

    task_prefix = "steps"
    instructions = (
        "Apply the operations one at a time. After each one, report the result with the "
        "submit tool; it answers with the next operation. After the last one, give the final "
        "value as your answer."
    )

    def __init__(
        self,
        steps: int = 3,
        digits: int = 2,
        feedback: bool = True,
        solution_style: str = "worked",
        tool_parser: str = "hermes",
        max_turns: int | None = None,
        **common: Any,
    ) -> None:
        """``max_turns`` defaults to ``steps + 2``: the gold trajectory's ``steps`` reports and
        answer, and one turn of slack. ``solution_style`` is the gold reports' form: ``worked``
        writes the operation out (``62 - 18 = 44``) before the call, ``answer`` is the call
        alone."""
        if not 1 <= steps <= 12:
            raise ValueError(f"steps must be in 1..12, got {steps}")
        if not 1 <= digits <= 4:
            raise ValueError(f"digits must be in 1..4, got {digits}")
        if solution_style not in ("worked", "answer"):
            raise ValueError(f"solution_style must be 'worked' or 'answer', got {solution_style!r}")  # fmt: skip
        self.steps, self.digits, self.feedback = steps, digits, bool(feedback)
        self.solution_style = solution_style
        config = {"steps": steps, "digits": digits, "feedback": self.feedback, "solution_style": solution_style}  # fmt: skip
        super().__init__(
            config=config,
            tool_parser=tool_parser,
            max_turns=steps + 2 if max_turns is None else max_turns,
            **common,
        )

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        draws = Draws(rng, 2 + 2 * self.steps)
        low, high = 10 ** (self.digits - 1), 10**self.digits
        value = draws.between(low, high)
        start, ops, values = value, [], []
        for _ in range(self.steps):
            n = draws.between(max(1, low), high)
            op = "-" if draws.below(2) and value >= n else "+"
            value = value + n if op == "+" else value - n
            ops.append([op, n])
            values.append(value)
        return Task(
            task_id=task_id,
            prompt=(
                f"Start with {start} and apply {self.steps} operations, one at a time. "
                f"First: {_operation(*ops[0], start)}"
            ),
            answer=str(values[-1]),
            family="checked_steps",
            difficulty=self.steps * self.digits,
            solution=f"The final value is $\\boxed{{{values[-1]}}}$.",
            data={"start": start, "operations": ops, "values": values},
        )

    def content_key(self, task: Task) -> str:
        """The whole chain (start and every operation), not the prompt, which shows only the
        first: two chains that begin alike are different problems."""
        data = task.data
        chain = " ".join(f"{op} {n}" for op, n in data["operations"])
        return f"checked steps: {data['start']} {chain}"

    def initial_episode(self, task: Task) -> dict[str, Any]:
        return {"reported": 0, "broken": False}

    @tool("Report the result of the current operation; returns the next one.", value="integer")
    def submit(self, value: int) -> ToolResult:
        episode, data = self.episode, self.task.data
        done = episode["reported"]
        if done >= self.steps:
            return ToolResult("error: every operation has been reported; give the final value", "tool_error")  # fmt: skip
        right = value == data["values"][done]
        episode["reported"] = done + 1
        episode["broken"] = episode["broken"] or not right
        last = done + 1 == self.steps
        if last:
            after = "That was the last operation: give the final value as your answer."
        if not self.feedback:  # the next operation alone: nothing says what the value is
            if not last:
                after = f"Next: {_operation(*data['operations'][done + 1])}"
            return ToolResult(f"Recorded. {after}")
        if not last:  # the next operation on the true value
            after = f"Next: {_operation(*data['operations'][done + 1], data['values'][done])}"
        if right:
            return ToolResult(f"Correct. {after}")
        return ToolResult(f"Incorrect: the chain is broken. {after}")

    def grade(self, action: str) -> Outcome:
        outcome = super().grade(action)
        complete = self.episode["reported"] == self.steps and not self.episode["broken"]
        if outcome.status is not Status.CORRECT or complete:
            return outcome
        reason = "a reported result was wrong" if self.episode["broken"] else "not every operation was reported"  # fmt: skip
        return dataclasses.replace(
            outcome,
            status=Status.INCORRECT,
            reward=self.rewards.reward(Status.INCORRECT),
            details={**outcome.details, "chain": reason},
        )

    def gold_action(self) -> str:
        done, data = self.episode["reported"], self.task.data
        if done < self.steps:
            call = self.format_call("submit", value=data["values"][done])
            if self.solution_style == "answer":
                return call
            before = data["values"][done - 1] if done else data["start"]
            op, n = data["operations"][done]
            return f"{before} {op} {n} = {data['values'][done]}\n{call}"
        return self.task.solution or f"$\\boxed{{{self.task.answer}}}$"
