"""Whether a regime's budget sits where learning has flattened, read from a finished benchmark
(a pilot): :func:`find_plateau` per regime, :func:`budget_lines` to print the verdicts.

The definition, for one regime:

* The methods considered are the ones the bench compares: every RL method that ran in the
  regime (forkgym's and TRL's). SFT is a reference, not one of them: it spends gold tokens, not
  generated ones, and its curve can keep rising on a small train side long after the RL
  methods have flattened (the CheckedSteps pilot: SFT +0.108 in its last half, RLOO +0.015),
  so it decides only when it is all that ran. A method's curve is its mean held-out accuracy
  over its seeds at each fraction of the budget the runs were evaluated at
  (:attr:`RunSummary.at`; an SFT run's fractions are of the gold tokens it trained on, as in
  the report's table), the last point, 100%, being the final accuracy
  (:attr:`RunSummary.final`). A seed that has no evaluation at a mark is left out of that
  mark's mean.
* The *best method* is the considered one with the highest mean final accuracy (the first in
  the regime's order on a tie).
* Its *last-half gain* is, per seed, the final accuracy minus the accuracy at the middle mark,
  averaged over the seeds, with a 95% t-interval over them (:func:`.stats.interval`; a single
  seed gives none). The middle mark is 50% of the budget; where the preset does not evaluate
  at 50%, the largest evaluated fraction below it, and where none is below it, the warm start
  (fraction 0). The mark used is recorded.
* The budget is *at the plateau* when that mean gain is at most ``tolerance`` (0.02 by
  default; the comparison allows 1e-9 of rounding, so a gain exactly at the tolerance counts).
  The verdict rests on the mean alone; the interval says how far the seeds can be trusted.
* At the plateau, the *plateau budget* is the smallest evaluated fraction (above 0) whose mean
  accuracy is at least the final one minus ``tolerance``, times the budget: where the best
  method had already got as far as it would. A budget still rising has none; the advice is
  then to run the pilot again with at least twice the budget.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .stats import Interval, interval
from .summary import RunSummary

__all__ = ["TOLERANCE", "Plateau", "budget_lines", "find_plateau"]

TOLERANCE = 0.02
_MIDDLE = 0.5
_ROUNDING = 1e-9


@dataclass(frozen=True)
class Plateau:
    """One regime's budget verdict (see the module's docstring for the definition)."""

    regime: str
    best: str  # the method with the highest mean final accuracy
    methods: tuple[str, ...]  # every method considered (the RL ones; SFT only if alone)
    seeds: int  # the best method's seeds
    budget_tokens: int
    accuracy: tuple[tuple[float, float], ...]  # (fraction, best method's mean accuracy), 1.0 last
    middle: float  # the mark the last-half gain starts from (0.5 where evaluated)
    gain: Interval  # final minus the middle mark's accuracy: mean and 95% interval over seeds
    at_plateau: bool
    plateau_fraction: float | None  # the smallest fraction within tolerance of the final
    suggested_tokens: int | None  # plateau_fraction x budget_tokens (None: still rising)
    tolerance: float


def _accuracy_at(run: RunSummary, fraction: float) -> float:
    """A run's held-out accuracy at ``fraction`` of its budget: the warm start at 0, the final
    accuracy at 1, else the evaluation the summary recorded at that mark (nan: none)."""
    if fraction == 0:
        return run.start
    if fraction >= 1:
        return run.final
    return run.at.get(fraction, math.nan)


def find_plateau(
    regime: str,
    budget_tokens: int,
    runs: dict[str, list[RunSummary]],
    tolerance: float = TOLERANCE,
) -> Plateau | None:
    """Whether ``regime``'s budget is at the plateau of its best method's curve, from the
    finished runs (method -> its seeds' summaries); None when no method has a run."""
    ran = {m: rs for m, rs in runs.items() if rs}
    if not ran:
        return None
    ran = {m: rs for m, rs in ran.items() if rs[0].kind != "sft"} or ran  # SFT: a reference
    best = max(ran, key=lambda m: statistics.fmean(r.final for r in ran[m]))
    rs = ran[best]
    fractions = sorted({f for r in rs for f in r.at if 0 < f < 1} | {1.0})
    accuracy = tuple((f, interval([_accuracy_at(r, f) for r in rs]).mean) for f in fractions)
    middle = max((f for f in fractions if f <= _MIDDLE), default=0.0)
    gain = interval([r.final - _accuracy_at(r, middle) for r in rs])
    at_plateau = gain.mean <= tolerance + _ROUNDING  # False for nan: nothing at the mark
    final = accuracy[-1][1]
    reached = [f for f, acc in accuracy if acc >= final - tolerance - _ROUNDING]
    plateau_fraction = reached[0] if at_plateau else None
    suggested = None if plateau_fraction is None else round(plateau_fraction * budget_tokens)
    return Plateau(
        regime=regime,
        best=best,
        methods=tuple(ran),
        seeds=len(rs),
        budget_tokens=budget_tokens,
        accuracy=accuracy,
        middle=middle,
        gain=gain,
        at_plateau=at_plateau,
        plateau_fraction=plateau_fraction,
        suggested_tokens=suggested,
        tolerance=tolerance,
    )


def _gain_words(p: Plateau) -> str:
    if math.isnan(p.gain.mean):
        return "-"
    spread = f" ± {p.gain.half:.3f}" if math.isfinite(p.gain.half) else ""
    return f"{p.gain.mean:+.3f}{spread} ({p.middle:.0%} → 100%)"


def _verdict_words(p: Plateau) -> tuple[str, str]:
    """(the verdict, the budget to set)."""
    double = f"≥ {2 * p.budget_tokens:,}, then run the pilot again"
    if math.isnan(p.gain.mean):
        return f"undetermined: no evaluation at {p.middle:.0%} of the budget", double
    if p.suggested_tokens is not None and p.plateau_fraction is not None:  # at the plateau
        return "at the plateau", f"{p.suggested_tokens:,} ({p.plateau_fraction:.0%} of the budget)"
    return f"still rising: gain above {p.tolerance:.3f}, suggest ≥ 2x", double


def budget_lines(plateaus: list[Plateau]) -> list[str]:
    """A table of the regimes' budget verdicts and the sentence that reads it (nothing for no
    regime)."""
    if not plateaus:
        return []
    tolerance = ", ".join(sorted({f"{p.tolerance:g}" for p in plateaus}))
    head = "| regime | budget | best method (seeds) | mean held-out by fraction of the budget | last-half gain | verdict | budget to set |"  # fmt: skip
    lines = [
        "Is each budget where learning has flattened? For each regime, the RL method with the "
        "highest mean final accuracy (SFT, a reference that spends gold tokens, only where no "
        "RL method ran; its curve is in the regime's table) and its mean held-out "
        "accuracy at each evaluated fraction of the budget; its *last-half gain* is the final "
        "accuracy minus the accuracy at 50% of the budget (where 50% is not evaluated, at the "
        "nearest evaluated fraction below it, or at the warm start; the column names the mark), "
        "per seed, with its mean and 95% interval over the seeds. "
        f"The budget is *at the plateau* when that mean gain is at most {tolerance}; the budget "
        "to set is then the smallest evaluated fraction whose mean accuracy is within the "
        "tolerance of (or above) the final one. A budget still rising needs a pilot with at "
        "least twice the budget (`bench/plateau.py`).",
        "",
        head,
        "|---|---|---|---|---|---|---|",
    ]
    for p in plateaus:
        curve = ", ".join(f"{f:.0%} {acc:.3f}" for f, acc in p.accuracy)
        verdict, budget = _verdict_words(p)
        lines.append(f"| {p.regime} | {p.budget_tokens:,} | {p.best} ({p.seeds}) | {curve} | {_gain_words(p)} | {verdict} | {budget} |")  # fmt: skip
    return [*lines, ""]
