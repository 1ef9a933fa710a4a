"""Running a benchmark: warm starts, then every method x seed at one generation budget.

Layout of the output folder (everything a report needs is read back from it)::

    OUT/bench.json                     the preset's settings as run, its regimes aside, and
                                       the methods and seeds asked for (a resumed run must
                                       match them)
    OUT/REGIME/regime.json             the regime as run, written as it starts (a resumed
                                       run must match it; a regime not started yet may change)
    OUT/REGIME/warm/                   the regime's warm start (a model folder) + warm.json
                                       (one regime may share another's: Regime.warm_name)
    OUT/REGIME/METHOD-seedS/           one run: metrics.jsonl, config, checkpoints, and once
                                       it ends its compact figures (:mod:`.cells`)
    OUT/REGIME/METHOD-seedS/done.json  written last: the run is complete

Resuming (the same command again): complete runs are skipped, a forkgym run with a checkpoint
continues from it (bit-identical to an uninterrupted run on the CPU), an SFT or TRL run
without ``done.json`` starts again (they are short and have no mid-run checkpoint).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forkgym.agents.generation.episode_log import write_outcomes
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.seeds import child_seed

from .ceiling import measure_ceilings
from .cells import compact_finished, compact_run
from .held_out import EVAL_SEED, evaluation_tasks, held_out_accuracy, regime_held_out
from .methods import Method, resolve_method
from .presets import Preset, Regime
from .tuning import Runs, apply, grid_runs, label, tune
from .vine_error import measure_vine_error

__all__ = [
    "EVAL_SEED",
    "Cell",
    "held_out_accuracy",
    "regime_held_out",
    "run_bench",
    "run_cell",
    "run_cells",
    "run_dir",
]

Log = Callable[[str], None]


def _claim(out: Path, preset: Preset, methods: list[str] | None, seeds: list[int] | None) -> None:
    """Record what ``out`` runs in ``bench.json``, or refuse a folder that ran other settings.
    A regime is checked against its own ``regime.json``, written as its first run starts
    (:func:`_start_regime`), so a regime's budget can still be set (from its pilot) while
    another regime's finished runs stay valid. A ``bench.json`` written before regimes had
    their own record holds them in its preset: they are split out."""
    record = {
        "preset": {k: v for k, v in dataclasses.asdict(preset).items() if k != "regimes"},
        "methods": methods,
        "seeds": seeds,
    }
    record = json.loads(json.dumps(record))  # as it reads back (tuples are lists)
    manifest = out / "bench.json"
    if manifest.exists():
        previous = json.loads(manifest.read_text())
        for ran in previous["preset"].pop("regimes", []):
            if (out / ran["name"]).exists() and not (out / ran["name"] / "regime.json").exists():
                _write_json(out / ran["name"] / "regime.json", ran)
        if previous != record:
            raise ValueError(
                f"{out} holds a different benchmark ({previous['preset']['name']}, methods "
                f"{previous['methods']}, seeds {previous['seeds']}); use another --out"
            )
    for regime in preset.regimes:
        _start_regime(out, regime, write=False)
    _write_json(manifest, record)


def _start_regime(out: Path, regime: Regime, *, write: bool = True) -> None:
    """Refuse ``regime`` if its folder ran it with other settings; else (``write``) record
    it there."""
    path = out / regime.name / "regime.json"
    wanted = json.loads(json.dumps(dataclasses.asdict(regime)))
    if path.exists():
        ran = json.loads(path.read_text())
        if ran != wanted:
            changed = sorted(k for k in wanted.keys() | ran.keys() if wanted.get(k) != ran.get(k))
            raise ValueError(
                f"{out / regime.name} ran regime {regime.name} with other settings "
                f"({', '.join(changed)}); use another --out, or remove that folder to run it again"
            )
    elif write:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, wanted)


def run_dir(out: Path, regime: Regime, method: str, seed: int) -> Path:
    return out / regime.name / f"{method}-seed{seed}"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def warm_start(out: Path, regime: Regime, preset: Preset, base: Path, log: Log) -> dict[str, Any]:
    """The regime's starting policy (cached in ``OUT/REGIME/warm``): SFT on gold
    demonstrations until greedy accuracy on the validation tasks (eval side, none of the
    reported ones: the stopping rule never reads the reported set) reaches
    ``regime.warm_accuracy``, checked every 2,000 tokens or so (or for ``warm_max_tokens``
    when it is None). Its accuracy on the reported set is recorded once it has stopped."""
    from forkgym.agents.models import load_policy_model
    from forkgym.agents.run.sft import every_steps, sft

    folder = out / regime.warm_dir / "warm"
    marker = folder / "warm.json"
    if marker.exists():
        return json.loads(marker.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    seen: dict[str, float] = {}
    target = regime.warm_accuracy
    validating = dataclasses.replace(regime, validation=True)

    def reached(model: Any, tokenizer: Any, tokens: int) -> bool:
        acc = regime_held_out(model, tokenizer, validating, preset.held_out_episodes(validating))[
            "eval_accuracy"
        ]
        seen.update(accuracy=acc, tokens=tokens)
        log(f"  warm start {regime.name}: {tokens:,} SFT tokens -> validation {acc:.3f}")
        return target is not None and acc >= target

    t0 = time.perf_counter()
    result = sft(
        str(base),
        regime.env,
        tokens=regime.warm_max_tokens,
        out=folder,
        seed=0,
        env_kwargs=regime.env_kwargs,
        batch_size=regime.warm_batch_size,
        until=every_steps(reached, 10) if target is not None else None,
    )
    model, tokenizer = load_policy_model(folder)
    validated = regime_held_out(model, tokenizer, validating, preset.held_out_episodes(validating))
    if target is not None and validated["eval_accuracy"] < target:
        raise RuntimeError(
            f"{regime.name}: the warm start reached {validated['eval_accuracy']:.3f} < {target} "
            f"on the validation tasks after {result['tokens']:,} SFT tokens"
        )
    start = regime_held_out(model, tokenizer, regime, preset.held_out_episodes(regime))
    info = {
        "model": str(folder),
        "sft_tokens": int(result["tokens"]),
        "seconds": time.perf_counter() - t0,
        "accuracy": start["eval_accuracy"],
        "validation_accuracy": validated["eval_accuracy"],
        "eval_infra_failures": start["eval_infra_failures"],
    }
    _write_json(marker, info)
    return info


def _train_config(regime: Regime, preset: Preset, method: Method, seed: int, model: str, folder: Path) -> TrainConfig:  # fmt: skip
    first_eval = int(regime.budget_tokens * min(preset.eval_fractions))
    values: dict[str, Any] = dict(
        model=model,
        env=regime.env,
        env_kwargs=dict(regime.env_kwargs),
        seed=seed,
        steps=1_000_000,  # the token budget ends the run
        max_tokens_generated=regime.budget_tokens,
        prompts_per_step=regime.prompts_per_step,
        k=regime.k,
        max_new_tokens=regime.max_new_tokens,
        lr=regime.lr,
        eval_every=0,
        # a tuning run is scored once, at the end, on the validation set (run_rl)
        eval_every_tokens=None if regime.validation else max(1, first_eval),
        eval_at_start=False,  # the warm start's accuracy is measured once per regime
        eval_episodes=preset.eval_episodes,
        eval_k=0,
        eval_seed=EVAL_SEED,
        eval_tasks=evaluation_tasks(regime, preset.eval_episodes),
        checkpoint_every=regime.checkpoint_every,
        keep_checkpoints=1,
        diagnose_losses=True,
        length_edges=list(regime.length_edges),
        out=str(folder),
        progress=False,
    )
    values.update(method.overrides)
    return TrainConfig(**values)


def run_rl(regime: Regime, preset: Preset, method: Method, seed: int, model: str, folder: Path, log: Log) -> None:  # fmt: skip
    from forkgym.agents.run.trainer import Trainer

    config = _train_config(regime, preset, method, seed, model, folder)
    resume = (folder / "checkpoints").exists() and any((folder / "checkpoints").glob("step_*[0-9]"))  # fmt: skip
    if not resume and folder.exists():
        shutil.rmtree(folder)
    trainer = Trainer(config, resume=resume)
    if resume:
        log(f"    resuming {folder.name} at step {trainer.step}")
    trainer.run()
    if regime.validation:  # a tuning run: its score on the validation set, at the end
        scored = regime_held_out(
            trainer.model, trainer.tokenizer, regime, preset.held_out_episodes(regime)
        )
        _write_json(folder / "validation.json", scored)


def run_sft(regime: Regime, preset: Preset, seed: int, model: str, folder: Path, log: Log) -> None:
    """Supervised steps on gold demonstrations for as many tokens as the generation budget
    (the demonstrations come from a seed stream the warm start did not use); held-out
    accuracy at the same fractions of it. Logged like a training run: nothing is generated."""
    from forkgym.agents.run.sft import sft

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    metrics = (folder / "metrics.jsonl").open("w", encoding="utf-8")
    marks = [int(f * regime.budget_tokens) for f in preset.eval_fractions]
    state = {"step": 0, "total": 0, "clock": time.perf_counter()}

    def until(model_: Any, tokenizer: Any, tokens: int, last: bool) -> bool:
        now = time.perf_counter()
        state["step"] += 1
        row: dict[str, Any] = {
            "step": state["step"],
            "tokens_generated": 0,
            "tokens_generated_total": 0,
            "tokens_trained": tokens - state["total"],
            "time/step": now - state["clock"],
        }
        if any(state["total"] < m <= tokens for m in marks):
            outcomes: list[dict[str, Any]] = []
            row.update(
                regime_held_out(
                    model_, tokenizer, regime, preset.held_out_episodes(regime), outcomes
                )
            )
            write_outcomes(folder / "eval" / f"version_{state['step']:07d}.json", outcomes, state["step"])  # fmt: skip
        state["total"] = tokens
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
        state["clock"] = time.perf_counter()
        return False

    sft(
        model,
        regime.env,
        tokens=regime.budget_tokens,
        out=folder / "model",
        seed=child_seed(seed, "sft-baseline"),
        # matched to the RL methods: their learning rate, no warm-up, and as many responses a
        # step as an RL step trains on (K x prompts)
        lr=regime.lr,
        warmup_steps=0,
        batch_size=regime.k * regime.prompts_per_step,
        env_kwargs=regime.env_kwargs,
        until=until,
    )
    metrics.close()


def run_bench(
    preset: Preset,
    out: str | Path,
    *,
    methods: list[str] | None = None,
    seeds: list[int] | None = None,
    log: Log = print,
    command: str | None = None,
    jobs: int = 1,
    ray_address: str | None = None,
) -> Path:
    """Run (or resume) every regime x method x seed of ``preset`` into ``out``; write the
    report (``report.md`` and plots) and return its path. ``methods``/``seeds`` narrow it;
    ``command`` is what the report says produced it. ``jobs`` > 1 runs a regime's
    cells (first its sweeps' grids: method x setting x tuning seed; then, once the tuning has
    chosen, its reported runs: method x seed) in that many processes, the machine's
    threads split between them (:func:`run_cells`); ``ray_address`` places them on that Ray
    cluster instead (:mod:`.ray_cells`). A cell is its run folder, so a stopped benchmark
    resumes however many jobs, or whichever cluster, ran it."""
    from transformers.utils import logging as hf_logging

    from forkgym.agents.models import init_model

    from .report import write_report

    hf_logging.disable_progress_bar()  # one bar per checkpoint save otherwise
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = {name: resolve_method(name) for name in methods} if methods else None
    _claim(out, preset, sorted(chosen) if chosen else None, list(seeds) if seeds else None)
    base = out / "base-model"
    if not (base / "config.json").exists():
        init_model(base)
    for regime in preset.regimes:
        log(f"regime {regime.name}: {regime.about}")
        _start_regime(out, regime)
        warm = warm_start(out, regime, preset, base, log)
        log(f"  start: held-out {warm['accuracy']:.3f} after {warm['sft_tokens']:,} SFT tokens")
        names = list(chosen) if chosen else list(regime.methods)
        runnable = _runnable(regime, names, chosen, log)
        one_run = functools.partial(_one_run, preset=preset, model=warm["model"], log=log)
        # every method's grid first, side by side (jobs, Ray); tune() then reads their scores
        # and runs the steps past an edge, each after the choice before it
        grids = [
            cell
            for name, method in runnable
            for cell in _cells(name, grid_runs(out, regime, preset, method), warm["model"])
        ]
        if grids:
            log(f"  tuning: {len(grids)} grid runs on seeds {list(preset.tune_seeds)}")
        run_cells(grids, preset, log, jobs, ray_address)
        tuned: dict[str, Method] = {}  # each method as its reported runs ran it
        cells: list[Cell] = []  # the reported runs not done yet
        for name, method in runnable:
            # a step past an edge of the grid: its tuning seeds side by side too
            run_many = functools.partial(_run_many, name=name, model=warm["model"], preset=preset, log=log, jobs=jobs, ray_address=ray_address)  # fmt: skip
            choice = tune(out, regime, preset, method, one_run, log, run_many)["choice"]
            tuned_regime, tuned_method = apply(regime, method, choice)
            tuned[name] = tuned_method
            for seed in seeds or preset.seeds:
                folder = run_dir(out, regime, name, seed)
                if not (folder / "done.json").exists():
                    cells.append(Cell(tuned_regime, tuned_method, name, seed, folder, choice, warm["model"]))  # fmt: skip
        run_cells(cells, preset, log, jobs, ray_address)
        first_seed = min(seeds or preset.seeds)
        if regime.ceiling_prompts and "ppo" in names:
            first = run_dir(out, regime, "ppo", first_seed)
            measure_ceilings(out, regime, warm["model"], first, log, stride=regime.ceiling_stride)
        if regime.vine_error_prompts and "vine" in names:
            vine = tuned.get("vine", resolve_method("vine")).overrides["algorithm_kwargs"]
            measure_vine_error(out, regime, run_dir(out, regime, "vine", first_seed), vine, log)
    if compacted := compact_finished(out):  # runs that ended before runs were compacted
        log(f"compacted {compacted} finished runs")
    return write_report(out, preset, log=log, command=command)


def _runnable(
    regime: Regime, names: list[str], chosen: dict[str, Method] | None, log: Log
) -> list[tuple[str, Method]]:
    """The methods of ``names`` that can run in ``regime`` (each one skipped says why)."""
    found = []
    for name in names:
        method = chosen[name] if chosen and name in chosen else resolve_method(name)
        if method.needs_group and regime.k < 2:
            log(f"  skip {name}: it compares the K responses of a prompt and K = 1 here")
        elif method.kind == "trl" and not _have_trl():
            log(f"  skip {name}: TRL is not installed (pip install -e .[bench])")
        elif method.kind == "trl" and _max_turns(regime) > 1:
            log(f"  skip {name}: its reward grades one completion; {regime.env} is multi-turn")
        else:
            found.append((name, method))
    return found


def _cells(name: str, runs: Runs, model: str) -> list[Cell]:
    return [Cell(r, m, name, seed, folder, setting, model) for r, m, seed, folder, setting in runs]  # fmt: skip


def _run_many(runs: Runs, *, name: str, model: str, preset: Preset, log: Log, jobs: int, ray_address: str | None) -> None:  # fmt: skip
    run_cells(_cells(name, runs, model), preset, log, jobs, ray_address)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One reported run: a method at its chosen setting, one seed, its folder (plain data, so a
    worker process can take it)."""

    regime: Regime
    method: Method
    name: str
    seed: int
    folder: Path
    setting: dict[str, float]
    model: str  # the warm start


def run_cell(cell: Cell, preset: Preset, log: Log) -> None:
    log(f"  {cell.name} seed {cell.seed} ({label(cell.setting)})")
    t0 = time.perf_counter()
    _one_run(cell.regime, cell.method, cell.seed, cell.folder, preset=preset, model=cell.model, log=log)  # fmt: skip
    done = {"method": cell.name, "seed": cell.seed, "seconds": time.perf_counter() - t0, "setting": cell.setting}  # fmt: skip
    _write_json(cell.folder / "done.json", done)


def _child(threads: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    import torch

    torch.set_num_threads(threads)
    fn(*args)


def in_processes(work: list[tuple[Callable[..., Any], tuple[Any, ...]]], jobs: int, threads: int) -> None:  # fmt: skip
    """Run each ``(fn, args)`` of ``work`` in a fresh spawned process of its own with
    ``threads`` torch threads, at most ``jobs`` at a time. The processes are not daemonic: a
    run's verifier starts worker processes of its own (its time limits), which a daemonic
    process (a ``multiprocessing.Pool`` worker's) may not, so every answer off the verifier's
    fast path would fail as an ``error``. A process that fails (its traceback goes to
    stderr) ends the ones in flight and raises here; so does an interrupt."""
    import multiprocessing
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")
    pending = list(work)
    running: dict[Any, Any] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                fn, args = pending.pop(0)
                process = context.Process(target=_child, args=(threads, fn, args))
                process.start()
                running[process.sentinel] = process
            for sentinel in wait(list(running)):
                process = running.pop(sentinel)
                process.join()
                if process.exitcode != 0:
                    raise RuntimeError(
                        f"a benchmark run failed in its worker process (exit code "
                        f"{process.exitcode}; its traceback is above); the finished runs are "
                        "kept: fix the cause and rerun the command to resume"
                    )
    finally:
        for process in running.values():
            process.terminate()
            process.join()


def run_cells(
    cells: list[Cell], preset: Preset, log: Log, jobs: int = 1, ray_address: str | None = None
) -> None:
    """Run ``cells``: one after another, in ``jobs`` worker processes (:func:`in_processes`:
    spawned, one per run, each with ``torch.get_num_threads() // jobs`` threads, at least 1)
    that log with ``print``, or as tasks on the Ray cluster at ``ray_address``. A run that
    fails stops the benchmark (the runs in flight are ended); the finished ones keep their
    ``done.json``, and the rerun command resumes the rest."""
    if ray_address is not None:
        from .ray_cells import run_cells_on_ray

        run_cells_on_ray(cells, preset, log, ray_address, run_cell)
        return
    if jobs <= 1 or len(cells) <= 1:
        for cell in cells:
            run_cell(cell, preset, log)
        return
    import torch

    threads = max(1, torch.get_num_threads() // jobs)
    log(f"  {len(cells)} runs in {jobs} processes, {threads} thread(s) each")
    in_processes([(run_cell, (cell, preset, print)) for cell in cells], jobs, threads)


def _one_run(regime: Regime, method: Method, seed: int, folder: Path, *, preset: Preset, model: str, log: Log) -> None:  # fmt: skip
    """One run of ``method`` from the warm start ``model``, whatever its kind, then its
    compact figures (:func:`.cells.compact_run`)."""
    if method.kind == "sft":
        run_sft(regime, preset, seed, model, folder, log)
    elif method.kind == "trl":
        from .trl_run import run_trl

        run_trl(regime, preset, seed, model, folder)
    else:
        run_rl(regime, preset, method, seed, model, folder, log)
    compact_run(folder)


def _max_turns(regime: Regime) -> int:
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    env = gym.make(regime.env, **regime.env_kwargs)
    try:
        return int(getattr(env.unwrapped, "max_turns", 1))
    finally:
        env.close()


def _have_trl() -> bool:
    try:
        import trl  # noqa: F401
    except ImportError:
        return False
    return True
