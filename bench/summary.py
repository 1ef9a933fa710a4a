"""What one benchmark run's metrics say (:class:`RunSummary`), read by the report and the
plots."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

__all__ = ["RunSummary"]


@dataclass
class RunSummary:
    """What one run's metrics say, at the budget's marks and at its end."""

    method: str
    seed: int
    kind: str
    budget: int
    start: float
    at: dict[float, float]  # fraction of the budget -> held-out accuracy there
    curve: list[tuple[float, float, float]]  # (tokens, training seconds, accuracy), start first
    tokens_generated: int
    last_step_tokens: int
    tokens_trained: int
    tokens_sampled: int
    tokens_accepted: int
    greedy_tokens: int
    steps: int
    train_s: float
    eval_s: float
    s_per_step: float
    groups: dict[str, float]
    infra_failures: int
    lengths: list[tuple[float, float]]  # (tokens, mean response length) per step
    critic: dict[str, float] = field(default_factory=dict)
    value_tokens: int = 0  # Monte Carlo continuations (vine): generated, in tokens_generated
    vine: dict[str, float] = field(default_factory=dict)  # vine's values' explained variance
    strata: dict[str, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # mean seconds per step, by phase
    # gigpo's anchor-group statistics summed over the steps that logged them (empty otherwise):
    # steps, anchor_fraction, anchor_size_mean, step_adv_abs_mean (sums of the per-step
    # values), text_groups and text_mixed (text-matched groups, and those mixing exact states)
    anchors: dict[str, float] = field(default_factory=dict)
    # the last evaluation's greedy outcome per held-out task (RUN/eval/), in task order, and
    # the tasks' seeds: what a comparison paired task by task reads (None: not recorded)
    outcomes: list[int] | None = None
    task_seeds: list[int] | None = None

    @property
    def final(self) -> float:
        return self.curve[-1][2]

    @property
    def auc(self) -> float:
        """The area under held-out accuracy against the budget's fraction (0 to 1, the warm
        start at 0, trapezoids between evaluations, the last one held to the end): the mean
        accuracy over the run, which rewards learning early as well as ending high."""
        points = [(min(tokens / self.budget, 1.0), acc) for tokens, _, acc in self.curve] if self.budget else []  # fmt: skip
        if len(points) < 2:
            return math.nan
        area = sum((x1 - x0) * (a0 + a1) / 2 for (x0, a0), (x1, a1) in itertools.pairwise(points))
        return area + (1.0 - points[-1][0]) * points[-1][1]

    @property
    def within_budget(self) -> bool:
        """Generated at least the budget and stopped at the step that reached it."""
        if self.kind == "sft":
            return self.tokens_generated == 0
        return self.tokens_generated >= self.budget and self.tokens_generated - self.last_step_tokens < self.budget  # fmt: skip
