"""Every method at its best, tuned the same way: one learning-rate sweep per method.

Before a regime's reported runs, each method runs once per setting of a small grid (the
regime's ``tune_lrs``; for PPO's methods, crossed with its critic's ``tune_value_lrs``) on the
preset's ``tune_seed``, a seed no reported run uses, with the whole generation budget. Each is
scored by greedy accuracy on the **validation set** at the end of its budget: problems from the
eval side of the content partition (never a training prompt or demonstration) that are not
among the reported evaluation's problems (:func:`~forkgym.bench.held_out.validation_tasks`),
so the choice never looks at a task the report scores. The best setting wins (a tie: the one
listed first); the reported runs use it. Everything is kept in ``OUT/REGIME/tune/``:
``METHOD.json`` (every setting's score and the choice) and one folder per tuning run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .methods import Method
from .presets import Preset, Regime

__all__ = ["Setting", "apply", "grid", "label", "tune", "tuning_table"]

Setting = dict[str, float]  # {"lr": ..., optionally "value_lr": ...}


def grid(regime: Regime, method: Method) -> list[Setting]:
    """The settings ``method`` is tried at (one, the regime's ``lr``, without a sweep)."""
    lrs = regime.tune_lrs or (regime.lr,)
    critic = method.kind == "rl" and method.overrides.get("algorithm") == "ppo"
    if critic and regime.tune_value_lrs:
        return [{"lr": lr, "value_lr": v} for lr in lrs for v in regime.tune_value_lrs]
    return [{"lr": lr} for lr in lrs]


def label(setting: Setting) -> str:
    return ",".join(f"{k}={v:g}" for k, v in setting.items())


def apply(regime: Regime, method: Method, setting: Setting) -> tuple[Regime, Method]:
    """The regime and method a run at ``setting`` uses."""
    regime = replace(regime, lr=setting["lr"])
    if "value_lr" in setting:
        kwargs = {**method.overrides.get("algorithm_kwargs", {}), "value_lr": setting["value_lr"]}
        method = replace(method, overrides={**method.overrides, "algorithm_kwargs": kwargs})
    return regime, method


def _final_accuracy(folder: Path) -> float:
    """The run's last validation accuracy: ``validation.json`` (an RL run, scored after it
    ends) or the last evaluation in its ``metrics.jsonl`` (SFT, TRL)."""
    scored_file = folder / "validation.json"
    if scored_file.exists():
        return float(json.loads(scored_file.read_text())["eval_accuracy"])
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    scored = [r["eval_accuracy"] for r in rows if r.get("eval_accuracy") is not None]
    if not scored:
        raise RuntimeError(f"{folder}: the tuning run recorded no validation accuracy")
    return float(scored[-1])


def tune(
    out: Path,
    regime: Regime,
    preset: Preset,
    method: Method,
    run: Callable[[Regime, Method, int, Path], None],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The chosen setting of ``method`` in ``regime`` (cached in ``OUT/REGIME/tune``).
    ``run(regime, method, seed, folder)`` runs one method to the end of its budget, evaluating
    on the regime's held-out set at the preset's fractions (here: the validation set)."""
    folder = out / regime.name / "tune"
    record_path = folder / f"{method.name}.json"
    if record_path.exists():
        return json.loads(record_path.read_text())
    settings = grid(regime, method)
    if preset.tune_seed is None or len(settings) == 1:  # no sweep: chosen elsewhere, or `lr`
        choice = dict(regime.fixed.get(method.name, {"lr": regime.lr}))
        record: dict[str, Any] = {"choice": choice, "scores": [], "seed": None}
    else:
        scores = []
        for setting in settings:
            run_folder = folder / f"{method.name}-{label(setting)}"
            if not (run_folder / "done.json").exists():
                log(f"  tune {method.name} {label(setting)} (seed {preset.tune_seed})")
                tuned_regime, tuned_method = apply(
                    replace(regime, validation=True), method, setting
                )
                run(tuned_regime, tuned_method, preset.tune_seed, run_folder)
                (run_folder / "done.json").write_text("{}")
            scores.append({"setting": setting, "validation_accuracy": _final_accuracy(run_folder)})
        best = max(range(len(scores)), key=lambda i: (scores[i]["validation_accuracy"], -i))
        record = {"choice": settings[best], "scores": scores, "seed": preset.tune_seed}
    folder.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1))
    return record


def tuning_table(out: Path, regime: Regime, preset: Preset) -> list[str]:
    """The report's lines on the sweep: every method's settings, their validation accuracy,
    and the one its reported runs used (nothing when the regime was not swept)."""
    records = {p.stem: json.loads(p.read_text()) for p in sorted((out / regime.name / "tune").glob("*.json"))}  # fmt: skip
    records = {m: r for m, r in records.items() if r["scores"]}
    if not records:
        return []
    episodes = preset.eval_episodes
    lines = [
        f"Each method's learning rate (PPO's: crossed with its critic's) was chosen by one run per "
        f"setting on seed {preset.tune_seed}, which no reported run uses, scored by greedy "
        f"accuracy at the end of the budget on {episodes} validation problems: eval-side problems "
        "that are none of the reported evaluation's, so the choice never saw a reported task.",
        "",
        "| method | validation accuracy per setting | chosen |",
        "|---|---|---|",
    ]
    for name, record in records.items():
        tried = ", ".join(
            f"{label(s['setting'])}: {s['validation_accuracy']:.3f}" for s in record["scores"]
        )
        lines.append(f"| {name} | {tried} | {label(record['choice'])} |")
    return [*lines, ""]
