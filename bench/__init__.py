"""``forkgym bench``: methods compared at one budget of generated tokens, with intervals.

:mod:`.methods` names the methods (training configs), :mod:`.presets` the regimes and
budgets, :mod:`.tuning` sweeps each method per regime, :mod:`.runner` runs and resumes the
matrix (:mod:`.ray_cells` places its runs on a Ray cluster), :mod:`.report` and :mod:`.plots`
write ``report.md`` and the PNGs, :mod:`.stats` and :mod:`.paired` hold the intervals and
tests, :mod:`.plateau` says whether a budget is where learning flattens, :mod:`.trl_run` runs
TRL's GRPOTrainer on the same terms.
"""

from .methods import METHODS, Method, resolve_method
from .presets import PRESETS, Preset, Regime
from .report import write_report
from .runner import run_bench

__all__ = ["METHODS", "PRESETS", "Method", "Preset", "Regime", "resolve_method", "run_bench", "write_report"]  # fmt: skip
