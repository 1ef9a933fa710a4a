"""Learning curves: held-out accuracy and training reward against generated tokens."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .runlog import read_metrics

__all__ = ["curves", "plot_runs"]


def curves(run: str | Path) -> dict[str, list[float]]:
    """Cumulative generated tokens with the reward and evaluation accuracy at each step."""
    tokens = 0.0
    out: dict[str, list[float]] = {
        "tokens": [],
        "reward": [],
        "eval_tokens": [],
        "eval_accuracy": [],
    }
    for m in read_metrics(run):
        tokens += m.get("tokens_generated") or 0
        if m.get("reward_mean") is not None:
            out["tokens"].append(tokens)
            out["reward"].append(m["reward_mean"])
        if m.get("eval_accuracy") is not None:
            out["eval_tokens"].append(tokens)
            out["eval_accuracy"].append(m["eval_accuracy"])
    return out


def plot_runs(
    runs: Sequence[str | Path],
    out: str | Path,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_eval, ax_reward) = plt.subplots(1, 2, figsize=(11, 4))
    for i, run in enumerate(runs):
        data = curves(run)
        label = labels[i] if labels else Path(run).name
        ax_eval.plot(
            data["eval_tokens"], data["eval_accuracy"], marker="o", markersize=3, label=label
        )
        ax_reward.plot(data["tokens"], data["reward"], alpha=0.8, label=label)
    ax_eval.set(
        xlabel="tokens generated (all branches)", ylabel="held-out greedy accuracy", ylim=(0, 1)
    )
    ax_reward.set(
        xlabel="tokens generated (all branches)", ylabel="training reward (mean over valid)"
    )
    for ax in (ax_eval, ax_reward):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
