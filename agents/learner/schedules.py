"""Learning-rate schedules: the factor on ``lr`` for each training step.

A schedule is a pure function of the step, so a resumed run sets exactly the learning rate
the uninterrupted run would have (nothing to checkpoint). Every optimizer step of one
training step (PPO epochs, mini-batches) uses that step's rate. ``warmup_steps`` ramps
linearly up to ``lr``; the decay then runs from ``lr`` to ``lr * lr_final_ratio`` over the
steps left up to ``decay_steps`` (the run's ``steps`` by default) and stays there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from forkgym.registry import Registry

__all__ = ["LR_SCHEDULES", "lr_factor", "lr_factor_at"]


def _constant(progress: float) -> float:
    return 1.0


def _linear(progress: float) -> float:
    return 1.0 - progress


def _cosine(progress: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * progress))


# decay shape: progress in [0, 1] after warm-up -> fraction of the way from final to peak
LR_SCHEDULES: Registry[Callable[[float], float]] = Registry("lr_schedule")
LR_SCHEDULES.register("constant", _constant)
LR_SCHEDULES.register("linear", _linear)
LR_SCHEDULES.register("cosine", _cosine)


def lr_factor(
    schedule: str,
    step: int,
    decay_steps: int,
    warmup_steps: int = 0,
    final_ratio: float = 0.0,
) -> float:
    """The multiplier on the peak learning rate for training step ``step`` (0-based)."""
    shape = LR_SCHEDULES.lookup(schedule)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, decay_steps - warmup_steps))
    return final_ratio + (1.0 - final_ratio) * shape(progress)


def lr_factor_at(config: Any, step: int) -> float:
    """:func:`lr_factor` for a training config (``lr_schedule``, ``warmup_steps``, ...)."""
    return lr_factor(
        config.lr_schedule,
        step,
        config.lr_decay_steps or config.steps,
        config.warmup_steps,
        config.lr_final_ratio,
    )
