"""Math environments: the assistant answers; the verifier grades; optional retries.

With ``max_attempts=1`` an episode is one turn. With more, a wrong or invalid answer gets a
feedback message and another try; the episode ends at the first correct answer, at an
infrastructure failure (which no retry would fix), or after the last attempt.
"""

from __future__ import annotations

from typing import Any

from forkgym.verifiers import Status

from .base import TextEnv, Turn

__all__ = ["ANSWER_INSTRUCTION", "MathEnv"]

ANSWER_INSTRUCTION = "Put your final answer within \\boxed{}."

_FEEDBACK = {
    Status.INCORRECT: "That answer is not correct.",
    Status.INVALID: "I could not find a final answer in \\boxed{}.",
}


class MathEnv(TextEnv):
    """Base of the single-answer math environments."""

    system_prompt = "You are a careful mathematician. Reason step by step. " + ANSWER_INSTRUCTION
    instruction_texts = (ANSWER_INSTRUCTION,)

    def __init__(self, *, config: dict[str, Any], max_attempts: int = 1, **common: Any) -> None:
        common.pop("max_turns", None)  # attempts are the turn budget of a math env
        super().__init__(
            config={**config, "max_attempts": max_attempts}, max_turns=max_attempts, **common
        )

    def respond(self, action: str) -> Turn:
        outcome = self.grade(action)
        span = self.answer_span(outcome)
        retry = outcome.status in _FEEDBACK and self.turn < self.max_turns
        if not retry:
            return Turn(status=outcome.status.value, outcome=outcome, span=span)
        left = self.max_turns - self.turn
        feedback = f"{_FEEDBACK[outcome.status]} Try again ({left} attempt{'s' * (left > 1)} left). {ANSWER_INSTRUCTION}"
        return Turn(
            status="retry",
            messages=[{"role": "user", "content": feedback}],
            span=span,
            info={"attempt_status": outcome.status.value},
        )

    def gold_action(self) -> str:
        task = self.task
        return task.solution or f"The answer is $\\boxed{{{task.answer}}}$."
