"""The outcome vocabulary shared by environments, verifiers, the store, services and agents.

A verification ends in exactly one :class:`Status`. The first four are the policy's doing and
are turned into a reward by a :class:`RewardMap`; ``timeout`` and ``error`` are infrastructure
failures, carry ``reward=None`` and must never be mistaken for a wrong answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

__all__ = [
    "DEFAULT_REWARDS",
    "INFRASTRUCTURE_STATUSES",
    "POLICY_STATUSES",
    "Outcome",
    "RewardMap",
    "Status",
]


class Status(str, Enum):
    """How one verification ended. The string value is the stable wire/database name."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    INVALID = "invalid"  # nothing extractable, empty or unparseable answer, broken format
    TRUNCATED = "truncated"  # hit a token, turn or time budget of the episode
    TIMEOUT = "timeout"  # the verifier or a tool ran out of its time or memory budget
    ERROR = "error"  # verifier missing, crashed or unreachable; environment fault

    @property
    def is_infrastructure(self) -> bool:
        """True for statuses that say nothing about the policy (no reward, not in baselines)."""
        return self in INFRASTRUCTURE_STATUSES

    def __str__(self) -> str:
        return self.value


POLICY_STATUSES: tuple[Status, ...] = (
    Status.CORRECT,
    Status.INCORRECT,
    Status.INVALID,
    Status.TRUNCATED,
)
INFRASTRUCTURE_STATUSES: frozenset[Status] = frozenset({Status.TIMEOUT, Status.ERROR})


@dataclass(frozen=True)
class RewardMap:
    """Reward for each policy status. Infrastructure statuses have no entry by design.

    The default (correct 1, everything else 0) scores ``invalid`` like a wrong answer, so a
    policy cannot escape into unparseable output when unsure; changing that is a visible choice.
    """

    correct: float = 1.0
    incorrect: float = 0.0
    invalid: float = 0.0
    truncated: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"reward for {f.name!r} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"reward for {f.name!r} must be finite, got {value!r}")
            object.__setattr__(self, f.name, float(value))
        # A lookup table: this runs on every step of every environment.
        table = {status: getattr(self, status.value) for status in POLICY_STATUSES}
        table.update(dict.fromkeys(INFRASTRUCTURE_STATUSES))
        object.__setattr__(self, "_by_status", table)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, float]) -> RewardMap:
        """Build from ``{"correct": 1, "invalid": -0.5, ...}``; unknown or infra keys are errors."""
        allowed = {f.name for f in fields(cls)}
        infrastructure = {s.value for s in INFRASTRUCTURE_STATUSES}
        for key in mapping:
            name = str(key)
            if name in infrastructure:
                raise ValueError(
                    f"status {name!r} is an infrastructure failure and cannot carry a reward; "
                    "it is excluded from baselines and losses instead"
                )
            if name not in allowed:
                raise ValueError(f"unknown status {key!r}; expected one of {sorted(allowed)}")
        return cls(**{str(k): v for k, v in mapping.items()})

    def reward(self, status: Status | str) -> float | None:
        """The reward for ``status``; ``None`` for infrastructure statuses."""
        try:
            return self._by_status[status]  # type: ignore[attr-defined]
        except KeyError:
            return self._by_status[Status(status)]  # type: ignore[attr-defined]

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


DEFAULT_REWARDS = RewardMap()


@dataclass(frozen=True)
class Outcome:
    """The result of grading one answer.

    ``reward`` is a float for policy statuses and ``None`` for infrastructure statuses; the
    constructor refuses any other combination, so a missing reward can never become a 0.
    ``extracted`` is the final answer the verifier actually graded (``None`` if none was found).
    ``latency_ms`` is the wall time the caller waited for this item.

    Equality compares the verdict (status, reward, extracted answer, verifier and version),
    not ``details`` or ``latency_ms``: those describe how this particular grading went (cache
    hit or not, time taken) and differ between two gradings of the same answer.
    """

    status: Status
    reward: float | None
    extracted: str | None = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    verifier: str = ""
    verifier_version: str = ""
    latency_ms: float = field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        status = self.status
        if type(status) is not Status:
            status = Status(status)
            object.__setattr__(self, "status", status)
        reward = self.reward
        if status in INFRASTRUCTURE_STATUSES:
            if reward is not None:
                raise ValueError(f"a {status.value!r} outcome carries no reward, got {reward!r}")
            return
        if type(reward) is not float:  # exact type: bool is an int, and None is no number
            if reward is None or isinstance(reward, bool):
                raise ValueError(
                    f"a {status.value!r} outcome needs a numeric reward, got {reward!r}"
                )
            reward = float(reward)
            object.__setattr__(self, "reward", reward)
        if not math.isfinite(reward):
            raise ValueError(f"reward must be finite, got {reward!r}")

    @classmethod
    def from_status(
        cls,
        status: Status | str,
        rewards: RewardMap = DEFAULT_REWARDS,
        **kwargs: Any,
    ) -> Outcome:
        """Build an outcome whose reward comes from ``rewards`` (None for infrastructure)."""
        status = status if type(status) is Status else Status(status)
        return cls(status=status, reward=rewards.reward(status), **kwargs)

    @property
    def is_infrastructure(self) -> bool:
        return self.status.is_infrastructure

    @property
    def is_correct(self) -> bool:
        return self.status is Status.CORRECT

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``status`` becomes its string value."""
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
