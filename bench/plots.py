"""The benchmark's PNG plots, one set per regime (matplotlib, headless)."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

from .presets import Regime
from .stats import interval
from .summary import RunSummary

__all__ = ["plot_crossover", "plot_regime"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _mean_curve(rs: list[RunSummary], axis: int) -> tuple[list[float], list[float], list[float], list[float]]:  # fmt: skip
    """Per evaluation index (the budget's marks, same in every seed): mean x, mean accuracy
    and its 95% band."""
    n = min(len(r.curve) for r in rs)
    xs, ys, lo, hi = [], [], [], []
    for i in range(n):
        xs.append(statistics.fmean(r.curve[i][axis] for r in rs))
        iv = interval([r.curve[i][2] for r in rs])
        ys.append(iv.mean)
        lo.append(iv[1] if math.isfinite(iv[1]) else iv.mean)
        hi.append(iv[2] if math.isfinite(iv[2]) else iv.mean)
    return xs, ys, lo, hi


def _accuracy(out: Path, regime: Regime, runs: dict[str, list[RunSummary]], axis: int, name: str, xlabel: str) -> Path:  # fmt: skip
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for method, rs in runs.items():
        xs, ys, lo, hi = _mean_curve(rs, axis)
        label = method + (" (x: gold tokens trained)" if rs[0].kind == "sft" and axis == 0 else "")
        (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=label)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12)
    ax.set(xlabel=xlabel, ylabel="held-out greedy accuracy", title=f"{regime.name}: mean and 95% interval over seeds")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out / "plots" / f"{regime.name}-{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _bucket_order(label: str) -> tuple[float, bool]:
    """Strata in numeric order: ``[8,16)`` after ``[0,8)``, the exact ``0`` before ``(0,0.1]``."""
    first = re.findall(r"inf|\d+(?:\.\d+)?", label)
    return (float(first[0]) if first else math.inf, label[:1] in "([")


def _strata(out: Path, regime: Regime, runs: dict[str, list[RunSummary]]) -> Path | None:
    panels = [("adv/by_length", "|advantage| by response length"),
              ("adv/by_reward_std", "|advantage| by group reward std"),
              ("loss/by_length", "|loss| by response length"),
              ("loss/by_reward_std", "|loss| by group reward std")]  # fmt: skip
    rl = {m: rs for m, rs in runs.items() if rs[0].strata}
    if not rl:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    width = 0.8 / len(rl)
    for ax, (prefix, title) in zip(axes.flat, panels, strict=True):
        found = {k[len(prefix) + 1 :] for rs in rl.values() for r in rs for k in r.strata if k.startswith(prefix + "/")}  # fmt: skip
        buckets = sorted(found, key=_bucket_order)
        for i, (method, rs) in enumerate(rl.items()):
            vals = [statistics.fmean([r.strata.get(f"{prefix}/{b}", math.nan) for r in rs]) for b in buckets]  # fmt: skip
            ax.bar([j + i * width for j in range(len(buckets))], vals, width, label=method)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(buckets))], buckets, fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes.flat[0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{regime.name}: per-response |advantage| and |loss|, mean over steps and seeds")
    fig.tight_layout()
    path = out / "plots" / f"{regime.name}-strata.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _lengths(out: Path, regime: Regime, runs: dict[str, list[RunSummary]]) -> Path | None:
    rl = {m: rs for m, rs in runs.items() if any(r.lengths for r in rs)}
    if not rl:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for method, rs in rl.items():
        n = min(len(r.lengths) for r in rs)
        window = max(1, n // 10)
        xs = [statistics.fmean(r.lengths[i][0] for r in rs) for i in range(n)]
        ys = [statistics.fmean(r.lengths[i][1] for r in rs) for i in range(n)]
        smooth = [statistics.fmean(ys[max(0, i - window + 1) : i + 1]) for i in range(n)]
        ax.plot(xs, smooth, label=method)
    ax.set(xlabel="tokens generated", ylabel="mean response length (tokens)",
           title=f"{regime.name}: response length over training (moving mean)")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out / "plots" / f"{regime.name}-length.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_regime(out: Path, regime: Regime, runs: dict[str, list[RunSummary]], warm: dict[str, Any]) -> list[Path]:  # fmt: skip
    """Accuracy against generated tokens and against training time; advantage and loss by
    length and reward spread; response length over training. Returns the files written."""
    runs = {m: rs for m, rs in runs.items() if rs}
    if not runs:
        return []
    made = [
        _accuracy(out, regime, runs, 0, "accuracy-tokens", "tokens generated (every branch)"),
        _accuracy(out, regime, runs, 1, "accuracy-time", "training seconds (evaluations excluded)"),
        _strata(out, regime, runs),
        _lengths(out, regime, runs),
    ]
    return [p for p in made if p is not None]


def plot_crossover(out: Path, preset: Any, found: dict[str, dict[str, list[RunSummary]]]) -> Path:
    """Final held-out accuracy by regime (x) and method (one line each), with 95% intervals
    over seeds: where each way of getting an advantage wins shows as lines crossing."""
    plt = _plt()
    regimes = [r.name for r in preset.regimes if r.name in found]
    methods: list[str] = []
    for name in regimes:
        methods += [m for m in found[name] if m not in methods]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(regimes)), 4.8))
    width = 0.6 / max(1, len(methods))
    for i, method in enumerate(methods):
        xs, ys, err = [], [], []
        for j, name in enumerate(regimes):
            rs = found[name].get(method)
            if not rs:
                continue
            iv = interval([r.final for r in rs])
            xs.append(j - 0.3 + (i + 0.5) * width)
            ys.append(iv.mean)
            err.append(iv.mean - iv[1] if math.isfinite(iv[1]) else 0.0)
        ax.errorbar(xs, ys, yerr=err, marker="o", markersize=4, capsize=2, label=method)
    ax.set_xticks(range(len(regimes)), regimes, fontsize=8)
    ax.set(ylabel="final held-out greedy accuracy", title="accuracy at the full budget, by regime (95% interval over seeds)")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    path = out / "plots" / "crossover.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
