"""Paired comparisons of two methods evaluated on one fixed list of tasks.

Every method of a regime is evaluated on the same held-out tasks, so most of the evaluation
set's sampling error is shared by the two sides of a comparison: a task one method gets right
the other usually does too. An unpaired test adds two independent binomial terms and throws
that away. Here each run leaves its per-task outcomes (``[seeds, tasks]``, 1 for a correct
greedy answer), and the difference of two methods' mean accuracies is resampled by a
hierarchical bootstrap (Davison & Hinkley 1997, sec. 3.8, resampling at both stages): seeds
of each method with replacement (independent runs), then tasks with replacement, the SAME
tasks for both methods. Its standard error holds the seeds' spread and the tasks', paired.
Seeds and tasks are crossed, not nested, so resampling both counts the outcome-level noise
about twice (Owen 2007, the pigeonhole bootstrap): the interval errs wide, never narrow.

:func:`paired_compare` gives the point difference, the bootstrap's 95% percentile interval,
a two-sided p-value (twice the smaller tail of the resampled differences around 0) and the
standard error; :func:`paired_min_detectable` the smallest difference the design detects with
power 0.8 after a Bonferroni bound on Holm's first step over ``pairs`` comparisons; and
:func:`seeds_needed` how many seeds per method a target difference needs, from a pilot's
variance split into its seed and task parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch

from forkgym.agents.seeds import keyed_generator

__all__ = ["PairedComparison", "paired_compare", "paired_min_detectable", "seeds_needed", "variance_parts"]  # fmt: skip

_NORMAL = NormalDist()


@dataclass(frozen=True)
class PairedComparison:
    difference: float  # mean accuracy of a minus b
    low: float  # 95% bootstrap percentile interval
    high: float
    p: float  # two-sided, uncorrected
    se: float  # the bootstrap's standard error of the difference
    seeds: tuple[int, int]
    tasks: int


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(
            f"per-task outcomes must be [seeds, tasks] on one task list, got {tuple(a.shape)} "
            f"and {tuple(b.shape)}"
        )
    if min(a.shape[0], b.shape[0], a.shape[1]) < 1:
        raise ValueError("each side needs at least one seed and one task")


def _resampled_means(x: torch.Tensor, seed_weights: torch.Tensor, task_weights: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``[R]``: the mean of ``x [S, T]`` under each resample's seed and task counts."""
    per_task = seed_weights @ x  # [R, T]
    return (per_task * task_weights).sum(1) / (x.shape[0] * x.shape[1])


def _counts(draws: torch.Tensor, size: int) -> torch.Tensor:
    """``[R, size]``: how often each index was drawn in each row of ``draws [R, n]``."""
    out = torch.zeros(draws.shape[0], size, dtype=torch.float64)
    return out.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))


def paired_compare(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    resamples: int = 4000,
    key: tuple[int | str, ...] = ("paired",),
) -> PairedComparison:
    """Method a against method b: ``[seeds, tasks]`` outcomes on one task list (column ``t``
    is the same task on both sides). The resamples are keyed by ``key`` (reproducible)."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    _check(a, b)
    generator = keyed_generator("paired-bootstrap", *key)
    (sa, t), sb = a.shape, b.shape[0]
    seeds_a = _counts(torch.randint(sa, (resamples, sa), generator=generator), sa)
    seeds_b = _counts(torch.randint(sb, (resamples, sb), generator=generator), sb)
    tasks = _counts(torch.randint(t, (resamples, t), generator=generator), t)
    diffs = _resampled_means(a, seeds_a, tasks) - _resampled_means(b, seeds_b, tasks)
    point = float(a.mean() - b.mean())
    tail = min(float((diffs <= 0).double().mean()), float((diffs >= 0).double().mean()))
    low, high = torch.quantile(diffs, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return PairedComparison(
        difference=point, low=low, high=high, p=min(1.0, max(2 * tail, 1 / resamples)),
        se=float(diffs.std()), seeds=(sa, sb), tasks=t,
    )  # fmt: skip


def paired_min_detectable(se: float, pairs: int, power: float = 0.8) -> float:
    """The smallest true difference found with probability ``power`` by a two-sided test at
    0.05 / ``pairs`` (the level of Holm's first step: a bound for the others) when the
    difference's standard error is ``se``."""
    alpha = 0.05 / max(1, pairs)
    return (_NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)) * se


def variance_parts(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """A pilot's variance of the difference split in two: ``(run_var, task_var)``, so that a
    design with ``n`` seeds per method and ``T`` tasks has ``var ~ 2 run_var / n + task_var /
    T``. ``task_var`` is the variance over tasks of the per-task paired difference (each
    method's mean over its seeds); ``run_var`` the average of the two methods' variances of
    per-seed accuracies, less what the tasks' own noise puts in them (floored at 0)."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    _check(a, b)
    t = a.shape[1]
    task_var = float((a.mean(0) - b.mean(0)).var()) if t > 1 else 0.0
    parts = []
    for x in (a, b):
        if x.shape[0] < 2:
            parts.append(0.0)
            continue
        within = float(x.var(1).mean()) / t  # a seed's accuracy's noise from its tasks
        parts.append(max(0.0, float(x.mean(1).var()) - within))
    return sum(parts) / 2, task_var


def seeds_needed(run_var: float, task_var: float, tasks: int, target: float, pairs: int, power: float = 0.8) -> float:  # fmt: skip
    """Seeds per method for a minimum detectable difference of ``target`` on ``tasks`` tasks
    (``math.inf`` when the tasks' part alone exceeds it: more tasks are needed, not seeds)."""
    z = paired_min_detectable(1.0, pairs, power)
    room = (target / z) ** 2 - task_var / tasks
    if room <= 0:
        return math.inf
    return max(2, math.ceil(2 * run_var / room)) if run_var > 0 else 2
