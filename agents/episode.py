"""What a rollout leaves behind: one :class:`Episode` per branch, one :class:`Group` per task."""

from __future__ import annotations

from dataclasses import dataclass, field

from forkgym.verifiers import Outcome

__all__ = ["Episode", "Group"]


@dataclass
class Episode:
    """One branch, from reset to the end, as token ids."""

    group: int
    branch: int
    kind: str  # "sampled" or "greedy"
    task_id: str
    token_ids: list[int]
    action_mask: list[int]
    logprobs: list[float]  # behaviour log-probs on action tokens, 0.0 elsewhere
    prompt_len: int
    statuses: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    outcome: Outcome | None = None
    truncated: bool = False  # the outcome is `truncated` (a token, turn or time budget)
    wall_s: float = 0.0
    weight_version: int = 0

    @property
    def reward(self) -> float | None:
        return None if self.outcome is None else self.outcome.reward

    @property
    def valid(self) -> bool:
        """False for infrastructure failures (timeout/error): no reward, out of every baseline."""
        return self.outcome is not None and not self.outcome.is_infrastructure

    @property
    def generated_tokens(self) -> int:
        return sum(self.action_mask)


@dataclass
class Group:
    """The branches of one task: ``sampled`` (K) and, when asked for, one ``greedy``."""

    task_id: str
    task_seed: int
    sampled: list[Episode]
    greedy: Episode | None = None
    span_s: float = 0.0  # first branch done -> last branch done
    barrier_idle_s: float = 0.0  # summed over branches: time done and waiting for the slowest
    greedy_diverged: bool | None = None  # multi-turn envs with a greedy branch only
