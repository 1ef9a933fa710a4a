"""Every method at its best, tuned the same way: one sweep per method and regime.

Before a regime's reported runs, each method runs once per setting of a small grid and per
tuning seed (the preset's ``tune_seeds``, seeds no reported run uses), with the whole
generation budget. The grid's axes: the regime's ``tune_lrs`` (or the method's own ``lr``
grid in ``tune_options``, e.g. SFT's, whose best rate lies well above the RL methods'); for
PPO's methods, its critic's
``tune_value_lrs``; and the regime's ``tune_options`` for that method, any keyword of its
algorithm (Vine's ``rollouts``, the critic's ``value_warmup_steps``). Every setting is scored
on every tuning seed by greedy accuracy on the **validation set** at the end of its budget:
problems from the eval side of the content partition (never a training prompt or
demonstration) that are not among the reported evaluation's problems
(:func:`~forkgym.bench.held_out.validation_tasks`), so the choice never looks at a task the
report scores. A setting's score is its mean over the seeds; the best one wins (a tie: the
one run first).

A regime may search its axes one at a time instead (``tune_crossed`` False): the learning
rate's values first, every other axis held at the method's own value (or the axis's first);
then each other axis's values at the choice so far, one axis after another. PPO's 3 rates, 2
critic rates and 2 warm-ups are then 5 settings instead of 12; an interaction between two
axes that only their joint change reveals is what that gives up.

A choice at the lowest or highest value of an axis with two or more values says only that the
best may lie past the grid, so the sweep then runs one more value one step past that edge (the
others at the current choice; the step is the ratio of the two edge-most values, or their
difference where one is 0; an integer axis stays integer and never goes below 1, or 0 where
its grid has 0) and chooses again, at most three times per axis. The record names every axis
whose choice is still at an edge after that (``edge``): nothing past a bound (a warm-up of 0
steps, 1 continuation) counts as one.

A grid's runs are independent of each other: :func:`grid_runs` lists those not done yet, and
the benchmark (bench/runner.py) runs them side by side (``--jobs``, ``--ray``) before
:func:`tune`, which then reads their scores. A step past an edge waits for the choice before
it; given ``run_many``, it runs on its tuning seeds side by side as well.

Everything is kept in ``OUT/REGIME/tune/``: ``METHOD.json`` (every setting's score on each
seed and their mean, the choice, the edges left) and one folder per setting and seed
(``METHOD-lr=0.0001-seed100``). A finished tuning run (its ``done.json``) never runs again,
and a finished sweep is read back from its record.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .cells import read_steps
from .methods import Method
from .presets import Preset, Regime

__all__ = [
    "MAX_EXTENSIONS",
    "Setting",
    "apply",
    "axes",
    "grid",
    "grid_runs",
    "label",
    "swept",
    "tune",
    "tuning_table",
]

Setting = dict[str, float]  # {"lr": ..., optionally "value_lr": ... and the method's options}
Runs = list[tuple[Regime, Method, int, Path, Setting]]  # (regime, method, seed, folder, setting)
MAX_EXTENSIONS = 3  # steps past an edge, per axis


def axes(regime: Regime, method: Method) -> dict[str, tuple[float, ...]]:
    """The values each of ``method``'s swept settings takes (``lr`` first: the method's own
    ``tune_options`` grid for it if it has one, else the regime's ``tune_lrs``)."""
    options = regime.tune_options.get(method.name, {})
    found: dict[str, tuple[float, ...]] = {"lr": tuple(options.get("lr", ())) or regime.tune_lrs or (regime.lr,)}  # fmt: skip
    critic = method.kind == "rl" and method.overrides.get("algorithm") == "ppo"
    if critic and regime.tune_value_lrs:
        found["value_lr"] = regime.tune_value_lrs
    for key, values in options.items():
        if key == "lr":
            continue
        if key in found:
            raise ValueError(f"{regime.name}: tune_options[{method.name!r}] repeats {key!r}")
        found[key] = tuple(values)
    return found


def _base(method: Method, axis: str, values: tuple[float, ...]) -> float:
    """Where a coordinate search holds ``axis`` while another axis moves: the method's own
    value when the grid has it, else the grid's first."""
    own = method.overrides.get("algorithm_kwargs", {}).get(axis)
    return own if own in values else values[0]


def grid(regime: Regime, method: Method) -> list[Setting]:
    """The settings ``method`` is tried at before any choice (one, the regime's ``lr``,
    without a sweep): every combination of the axes' values, or, in a coordinate search
    (``regime.tune_crossed`` False), the learning rate's values with each other axis held."""
    found = axes(regime, method)
    if not regime.tune_crossed:
        held = {axis: _base(method, axis, values) for axis, values in found.items()}
        return [{**held, "lr": lr} for lr in found["lr"]]
    return [dict(zip(found, values, strict=True)) for values in itertools.product(*found.values())]


def label(setting: Setting) -> str:
    return ",".join(f"{k}={v:g}" for k, v in setting.items())


def apply(regime: Regime, method: Method, setting: Setting) -> tuple[Regime, Method]:
    """The regime and method a run at ``setting`` uses: ``lr`` is the regime's learning rate,
    every other key an ``algorithm_kwargs`` entry of the method."""
    regime = replace(regime, lr=setting["lr"])
    more = {k: v for k, v in setting.items() if k != "lr"}
    if more:
        kwargs = {**method.overrides.get("algorithm_kwargs", {}), **more}
        method = replace(method, overrides={**method.overrides, "algorithm_kwargs": kwargs})
    return regime, method


def _final_accuracy(folder: Path) -> float:
    """The run's last validation accuracy: ``validation.json`` (an RL run, scored after it
    ends) or the last evaluation in its per-step figures (SFT, TRL)."""
    scored_file = folder / "validation.json"
    if scored_file.exists():
        return float(json.loads(scored_file.read_text())["eval_accuracy"])
    scored = [r["eval_accuracy"] for r in read_steps(folder) if r.get("eval_accuracy") is not None]
    if not scored:
        raise RuntimeError(f"{folder}: the tuning run recorded no validation accuracy")
    return float(scored[-1])


def _tried(scores: list[dict[str, Any]], axis: str) -> list[float]:
    return sorted({s["setting"][axis] for s in scores})


def _side(value: float, tried: list[float]) -> int:
    """-1 or +1 where ``value`` is the lowest or highest of two or more ``tried`` values."""
    if len(tried) < 2:
        return 0
    return -1 if value == tried[0] else 1 if value == tried[-1] else 0


def _past(tried: list[float], side: int, grid_values: tuple[float, ...]) -> float | None:
    """The value one step past the ``side`` edge of ``tried`` (None: none is left)."""
    edge, inner = (tried[0], tried[1]) if side < 0 else (tried[-1], tried[-2])
    new = edge * (edge / inner) if edge > 0 and inner > 0 else edge + (edge - inner)
    if all(isinstance(v, int) for v in grid_values):
        new = max(0 if min(grid_values) < 1 else 1, round(new))
    else:
        new = max(0.0, float(f"{new:.6g}"))
    if any(math.isclose(new, v, rel_tol=1e-9, abs_tol=1e-12) for v in tried):
        return None
    return new


def _sweep(
    regime: Regime,
    method: Method,
    seeds: tuple[int, ...],
    score: Callable[[Setting, int], float],
    prepare: Callable[[Setting], None] = lambda setting: None,
) -> dict[str, Any]:
    """The grid on every seed, then the steps past an edge choice; the record of it all.
    ``prepare(setting)`` is called before a setting is scored (to run its seeds at once)."""
    scores: list[dict[str, Any]] = []

    def evaluate(setting: Setting) -> None:
        prepare(setting)
        per_seed = {str(seed): score(setting, seed) for seed in seeds}
        mean = sum(per_seed.values()) / len(per_seed)
        scores.append({"setting": setting, "validation_accuracy": mean, "per_seed": per_seed})

    def best() -> Setting:
        i = max(range(len(scores)), key=lambda j: (scores[j]["validation_accuracy"], -j))
        return scores[i]["setting"]

    found = axes(regime, method)
    for setting in grid(regime, method):
        evaluate(setting)
    choice = best()
    if not regime.tune_crossed:  # each other axis's values at the choice so far, in turn
        for axis in (a for a in found if a != "lr"):
            tried = [s["setting"] for s in scores]
            for setting in ({**choice, axis: value} for value in found[axis]):
                if setting not in tried:
                    evaluate(setting)
            choice = best()
    extended = dict.fromkeys(found, 0)
    moved = True
    while moved:
        moved = False
        for axis, values in found.items():
            tried = _tried(scores, axis)
            side = _side(choice[axis], tried)
            if not side or extended[axis] >= MAX_EXTENSIONS:
                continue
            new = _past(tried, side, values)
            if new is None:
                continue
            extended[axis] += 1
            evaluate({**choice, axis: new})
            choice, moved = best(), True
    edge = [
        axis
        for axis, values in found.items()
        if (side := _side(choice[axis], _tried(scores, axis)))
        and _past(_tried(scores, axis), side, values) is not None
    ]
    tried_axes = {axis: _tried(scores, axis) for axis in found}
    return {"choice": choice, "scores": scores, "seeds": list(seeds), "axes": tried_axes, "edge": edge}  # fmt: skip


def _tuning(out: Path, regime: Regime) -> Path:
    return out / regime.name / "tune"


def _run_folder(out: Path, regime: Regime, method: Method, setting: Setting, seed: int) -> Path:
    return _tuning(out, regime) / f"{method.name}-{label(setting)}-seed{seed}"


def swept(regime: Regime, preset: Preset, method: Method) -> bool:
    """Whether ``method`` is swept in ``regime``: tuning seeds and more than one setting."""
    return bool(preset.tune_seeds) and math.prod(map(len, axes(regime, method).values())) > 1


def grid_runs(out: Path, regime: Regime, preset: Preset, method: Method) -> Runs:
    """The runs of ``method``'s grid (every setting on every tuning seed) that are not done
    yet, each as ``(regime, method, seed, folder, setting)`` set for that run, for a caller to
    run side by side before :func:`tune`, which then only reads their scores (and runs the
    steps past an edge, each chosen after the one before). None once the sweep is recorded,
    or without one."""
    if (_tuning(out, regime) / f"{method.name}.json").exists() or not swept(regime, preset, method):  # fmt: skip
        return []
    return [
        run
        for setting in grid(regime, method)
        for run in _pending(out, regime, method, setting, preset.tune_seeds)
    ]


def _pending(out: Path, regime: Regime, method: Method, setting: Setting, seeds: tuple[int, ...]) -> Runs:  # fmt: skip
    """The runs of ``setting`` on ``seeds`` not done yet, each set for its run."""
    runs = []
    for seed in seeds:
        folder = _run_folder(out, regime, method, setting, seed)
        if not (folder / "done.json").exists():
            tuned_regime, tuned_method = apply(replace(regime, validation=True), method, setting)
            runs.append((tuned_regime, tuned_method, seed, folder, setting))
    return runs


def tune(
    out: Path,
    regime: Regime,
    preset: Preset,
    method: Method,
    run: Callable[[Regime, Method, int, Path], None],
    log: Callable[[str], None],
    run_many: Callable[[Runs], None] | None = None,
) -> dict[str, Any]:
    """The chosen setting of ``method`` in ``regime`` (cached in ``OUT/REGIME/tune``).
    ``run(regime, method, seed, folder)`` runs one method to the end of its budget, evaluating
    on the regime's held-out set at the preset's fractions (here: the validation set).
    ``run_many(runs)``, if given, runs a step past an edge on all its tuning seeds at once
    (side by side: ``--jobs``, ``--ray``), each run writing its ``done.json``."""
    folder = _tuning(out, regime)
    record_path = folder / f"{method.name}.json"
    if record_path.exists():
        return json.loads(record_path.read_text())
    # no sweep (no tuning seeds, or a grid of one setting): chosen elsewhere, or `lr`
    if not swept(regime, preset, method):
        choice = dict(regime.fixed.get(method.name, {"lr": regime.lr}))
        record: dict[str, Any] = {"choice": choice, "scores": [], "seeds": [], "edge": []}
    else:

        def prepare(setting: Setting) -> None:
            pending = _pending(out, regime, method, setting, preset.tune_seeds)
            if run_many is not None and len(pending) > 1:
                log(f"  tune {method.name} {label(setting)} (seeds {[r[2] for r in pending]})")
                run_many(pending)

        def score(setting: Setting, seed: int) -> float:
            for tuned_regime, tuned_method, _, run_folder, _ in _pending(out, regime, method, setting, (seed,)):  # fmt: skip
                log(f"  tune {method.name} {label(setting)} (seed {seed})")
                run(tuned_regime, tuned_method, seed, run_folder)
                (run_folder / "done.json").write_text("{}")
            return _final_accuracy(_run_folder(out, regime, method, setting, seed))

        record = _sweep(regime, method, preset.tune_seeds, score, prepare)
    folder.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1))
    return record


def tuning_table(out: Path, regime: Regime, preset: Preset) -> list[str]:
    """The report's lines on the sweep: every method's settings, their mean validation
    accuracy over the tuning seeds, the one its reported runs used and whether it is still at
    an edge of its grid (nothing when the regime was not swept)."""
    records = {p.stem: json.loads(p.read_text()) for p in sorted((out / regime.name / "tune").glob("*.json"))}  # fmt: skip
    records = {m: r for m, r in records.items() if r["scores"]}
    if not records:
        return []
    episodes = preset.validation_episodes or preset.eval_episodes
    seeds = ", ".join(str(s) for s in preset.tune_seeds)
    how = (
        "every combination of their values"
        if regime.tune_crossed
        else "one axis at a time: the learning rates with the others held at the method's own "
        "value, then each other axis's values at the choice so far"
    )
    lines = [
        f"Each method's settings (its learning rate; PPO's critic's; any other option the "
        f"regime sweeps; {how}) were each run on the tuning seeds ({seeds}), which no "
        f"reported run uses, and scored by the mean over those seeds of greedy accuracy at the "
        f"end of the budget on {episodes} validation problems: eval-side problems that are none "
        f"of the reported evaluation's, so the choice never saw a reported task. A choice at the "
        f"lowest or highest value of an axis was followed by a run one step past it (at most "
        f"{MAX_EXTENSIONS} per axis); a choice still at an edge after that is flagged.",
        "",
        "| method | seeds | mean validation accuracy per setting | chosen |",
        "|---|---|---|---|",
    ]
    for name, record in records.items():
        tried = ", ".join(
            f"{label(s['setting'])}: {s['validation_accuracy']:.3f}" for s in record["scores"]
        )
        chosen = label(record["choice"])
        if record.get("edge"):
            chosen += f" (**at the edge** of {', '.join(record['edge'])})"
        on = ", ".join(str(s) for s in record.get("seeds", []))
        lines.append(f"| {name} | {on} | {tried} | {chosen} |")
    return [*lines, ""]
