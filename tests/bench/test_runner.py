"""The benchmark end to end on the smoke preset: report, budget, and resuming a stopped run."""

import json
import shutil

import pytest

from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from forkgym.bench import PRESETS, run_bench
from forkgym.bench.report import check_report, write_report

pytestmark = pytest.mark.slow
METHODS = ["rloo", "ppo", "sft"]
TIMING = ("time/", "tokens_per_s", "group_span_s_mean", "barrier_idle_s")


def _comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def _undated(report):
    return [line for line in report.splitlines() if not line.startswith("Written ")]


def test_an_interrupted_benchmark_resumes_to_the_same_runs_and_report(tmp_path, monkeypatch):
    preset = PRESETS["smoke"]
    whole = tmp_path / "whole"
    run_bench(preset, whole, methods=METHODS, log=lambda _: None)
    assert check_report(whole, preset, METHODS) == []
    report = (whole / "report.md").read_text()
    for column in ("sampled / accepted", "trained on", "budget kept", "explained variance"):
        assert column in report
    # the folder as committed (.gitignore: no per-step logs, evaluations, checkpoints or
    # SQLite logs) reports exactly as the one that ran, from each run's compact figures
    slim = tmp_path / "slim"
    shutil.copytree(whole, slim, ignore=shutil.ignore_patterns("metrics.jsonl", "eval", "checkpoints", "metrics.db*", "*.png"))  # fmt: skip
    assert (slim / "arithmetic-k4" / "ppo-seed0" / "steps.jsonl.gz").exists()
    write_report(
        slim, preset, log=lambda _: None, command=f"forkgym bench --preset smoke --out {whole}"
    )
    assert _undated((slim / "report.md").read_text()) == _undated(report)

    # stop the ppo seed-0 run at its 4th step (after the step-2 checkpoint), as a kill would
    calls = {"n": 0}
    original = Trainer.train_step

    def dying(self):
        if self.config.algorithm == "ppo" and self.config.seed == 0:
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt
        return original(self)

    part = tmp_path / "part"
    monkeypatch.setattr(Trainer, "train_step", dying)
    with pytest.raises(KeyboardInterrupt):
        run_bench(preset, part, methods=METHODS, log=lambda _: None)
    monkeypatch.setattr(Trainer, "train_step", original)
    ppo = part / "arithmetic-k4" / "ppo-seed0"
    assert not (ppo / "done.json").exists() and (ppo / "checkpoints").exists()
    assert (part / "arithmetic-k4" / "rloo-seed1" / "done.json").exists()  # kept, not rerun
    lines = []
    run_bench(preset, part, methods=METHODS, log=lines.append)
    assert any("resuming ppo-seed0 at step 2" in line for line in lines)
    assert not any("rloo seed" in line for line in lines)
    for run in ("ppo-seed0", "rloo-seed0", "ppo-seed1"):
        a = read_metrics(whole / "arithmetic-k4" / run)
        b = read_metrics(part / "arithmetic-k4" / run)
        assert _comparable(a) == _comparable(b)
    assert check_report(part, preset, METHODS) == []


def test_a_folder_holding_another_benchmark_is_refused(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps({"preset": {"name": "quick"}, "methods": None, "seeds": None}))  # fmt: skip
    with pytest.raises(ValueError, match="holds a different benchmark"):
        run_bench(PRESETS["smoke"], tmp_path, log=lambda _: None)


def test_the_boundary_machinery_on_two_regimes_sharing_a_warm_start(tmp_path):
    """The boundary preset's parts at a toy scale: two regimes of one task share one warm
    start, Vine's continuations are counted in its budget, the ceiling on a multi-turn env,
    Vine's value error and the crossover plot are in the report, which passes the check."""
    from dataclasses import replace

    from forkgym.bench.presets import narrow

    small = dict(budget_tokens=1_500, warm_accuracy=None, warm_max_tokens=20_000, prompts_per_step=2)  # fmt: skip
    methods = ("rloo", "ppo", "vine")
    preset = narrow(PRESETS["boundary"], ["steps2-k8", "steps2-k1"])
    regimes = tuple(
        replace(r, **small, k=min(r.k, 2), methods=methods, ceiling_prompts=2 if r.k == 1 else 0,
                vine_error_prompts=2 if r.k == 1 else 0)
        for r in preset.regimes
    )  # fmt: skip
    # no sweep at this scale (tests/bench/test_tuning.py covers it): every method at `lr`
    preset = replace(preset, regimes=regimes, seeds=(0, 1), eval_episodes=4, tune_seeds=())
    out = tmp_path / "b"
    run_bench(preset, out, log=lambda _: None)
    assert check_report(out, preset) == []
    assert not (out / "steps2-k1" / "warm").exists()  # the K = 8 regime's warm start
    vine = read_metrics(out / "steps2-k1" / "vine-seed0")
    assert sum(r["tokens_generated_values"] for r in vine) > 0
    report = (out / "report.md").read_text()
    assert "plots/crossover.png" in report and (out / "plots" / "crossover.png").exists()
    assert "Vine's values against a reference" in report
    assert "value continuations" in report
    assert json.loads((out / "steps2-k1" / "ceiling.json").read_text())["stride"] == 8


def test_jobs_run_a_regimes_cells_in_worker_processes(tmp_path):
    preset = PRESETS["smoke"]
    lines = []
    run_bench(preset, tmp_path, methods=["rloo", "sft"], log=lines.append, jobs=2)
    # the sweeps' grids (2 rates x 2 tuning seeds each) ran in the workers first: the sweep
    # itself ran only the steps past an edge, none of the grid's settings
    assert any("tuning: 8 grid runs" in line for line in lines)
    assert any("8 runs in 2 processes" in line for line in lines)
    sequential = [line for line in lines if line.strip().startswith("tune ")]
    assert not any(f"lr={lr:g} " in line for line in sequential for lr in (1e-4, 3e-4))
    for name in ("rloo", "sft"):
        record = json.loads((tmp_path / "arithmetic-k4" / "tune" / f"{name}.json").read_text())
        assert len(record["scores"]) >= 2 and record["seeds"] == [100, 101]
    # every tuning run, the steps past an edge too, ran in a worker (run_cell's done.json)
    tuning = sorted((tmp_path / "arithmetic-k4" / "tune").glob("*/done.json"))
    assert len(tuning) >= 8
    assert all(json.loads(done.read_text())["seconds"] > 0 for done in tuning)
    assert any("4 runs in 2 processes" in line for line in lines)
    for run in ("rloo-seed0", "rloo-seed1", "sft-seed0", "sft-seed1"):
        done = json.loads((tmp_path / "arithmetic-k4" / run / "done.json").read_text())
        assert done["seconds"] > 0
    assert check_report(tmp_path, preset, ["rloo", "sft"]) == []
