"""What a rollout leaves behind: one :class:`Episode` per branch, one :class:`Group` per task."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

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
    # Monte Carlo values of states inside the episode (agents/generation/fork_values.py): the state
    # before the action token at value_positions[i] is worth values[i]
    value_positions: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    # the env's state at the start of each turn, when the rollout records states (an algorithm
    # that matches them, GiGPO): where the turn's tokens start, the exact state key
    # (TextEnv.state_key) and the text the env had shown (envs.base.observation_key)
    turn_starts: list[int] = field(default_factory=list)
    state_keys: list[str] = field(default_factory=list)
    text_keys: list[str] = field(default_factory=list)

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (floats round-trip exactly through JSON)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "outcome"}
        data["outcome"] = None if self.outcome is None else self.outcome.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        outcome = data.get("outcome")
        return cls(**{**data, "outcome": None if outcome is None else Outcome.from_dict(outcome)})


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

    @property
    def branches(self) -> list[Episode]:
        """Every episode of the group: the sampled ones, then the greedy one if any."""
        return self.sampled + ([self.greedy] if self.greedy is not None else [])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["sampled"] = [ep.to_dict() for ep in self.sampled]
        data["greedy"] = None if self.greedy is None else self.greedy.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Group:
        greedy = data.get("greedy")
        return cls(
            **{
                **data,
                "sampled": [Episode.from_dict(ep) for ep in data["sampled"]],
                "greedy": None if greedy is None else Episode.from_dict(greedy),
            }
        )
