"""The learning-rate sweep: its grid, its choice, and validation tasks that no report scores."""

import json
from dataclasses import replace

import pytest

from forkgym.agents.seeds import task_seeds
from forkgym.bench import PRESETS
from forkgym.bench.held_out import EVAL_SEED, _content_keys, validation_tasks
from forkgym.bench.methods import resolve_method
from forkgym.bench.tuning import apply, grid, tune, tuning_table

SMOKE = PRESETS["smoke"]
REGIME = SMOKE.regimes[0]


def test_every_method_gets_the_same_grid_and_ppo_crosses_it_with_its_critic():
    assert grid(REGIME, resolve_method("rloo")) == [{"lr": lr} for lr in REGIME.tune_lrs]
    assert grid(REGIME, resolve_method("sft")) == grid(REGIME, resolve_method("raft"))
    ppo = grid(REGIME, resolve_method("ppo"))
    assert len(ppo) == len(REGIME.tune_lrs) * len(REGIME.tune_value_lrs)
    assert {s["value_lr"] for s in ppo} == set(REGIME.tune_value_lrs)
    untuned = replace(REGIME, tune_lrs=(), tune_value_lrs=())
    assert grid(untuned, resolve_method("ppo")) == [{"lr": REGIME.lr}]


def test_a_setting_reaches_the_run_and_leaves_the_other_critic_options_alone():
    method = resolve_method("ppo")
    regime, tuned = apply(REGIME, method, {"lr": 3e-4, "value_lr": 1e-3})
    assert regime.lr == 3e-4
    kwargs = tuned.overrides["algorithm_kwargs"]
    assert kwargs["value_lr"] == 1e-3
    assert {k: v for k, v in kwargs.items() if k != "value_lr"} == method.overrides["algorithm_kwargs"]  # fmt: skip
    assert "value_lr" not in method.overrides["algorithm_kwargs"]  # the registry is untouched


@pytest.mark.parametrize("preset", ["smoke", "quick"])
def test_validation_tasks_are_eval_side_and_never_a_reported_problem(preset):
    p = PRESETS[preset]
    regime = p.regimes[0]
    tasks = validation_tasks(regime, p.eval_episodes)
    assert len(tasks) == p.eval_episodes and tasks == validation_tasks(regime, p.eval_episodes)
    reported = set(_content_keys(regime, "eval", task_seeds(EVAL_SEED, "eval", 0, p.eval_episodes)))  # fmt: skip
    chosen = _content_keys(regime, "eval", tasks)  # raises if a seed left the eval side
    assert not reported & set(chosen)
    trained = set(_content_keys(regime, "train", list(range(2000))))
    assert not trained & set(chosen)


def test_the_sweep_picks_the_best_validation_score_and_is_cached(tmp_path):
    scores = {1e-4: 0.25, 3e-4: 0.5}
    runs = []

    def run(regime, method, seed, folder):
        assert regime.validation and seed == SMOKE.tune_seed
        runs.append(regime.lr)
        folder.mkdir(parents=True)
        rows = [{"step": 1, "eval_accuracy": 0.0}, {"step": 2, "eval_accuracy": scores[regime.lr]}]  # fmt: skip
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    method = resolve_method("sft")
    record = tune(tmp_path, REGIME, SMOKE, method, run, log=lambda _: None)
    assert record["choice"] == {"lr": 3e-4} and runs == [1e-4, 3e-4]
    assert tune(tmp_path, REGIME, SMOKE, method, run, log=lambda _: None) == record
    assert runs == [1e-4, 3e-4]  # cached: nothing ran again
    table = "\n".join(tuning_table(tmp_path, REGIME, SMOKE))
    assert "| sft | lr=0.0001: 0.250, lr=0.0003: 0.500 | lr=0.0003 |" in table


def test_a_tie_goes_to_the_setting_listed_first(tmp_path):
    def run(regime, method, seed, folder):
        folder.mkdir(parents=True)
        (folder / "validation.json").write_text(json.dumps({"eval_accuracy": 0.5}))

    record = tune(tmp_path, REGIME, SMOKE, resolve_method("rloo"), run, log=lambda _: None)
    assert record["choice"] == {"lr": REGIME.tune_lrs[0]}


def test_without_a_tuning_seed_every_method_runs_at_the_regime_lr(tmp_path):
    def run(*_):
        raise AssertionError("no tuning run expected")

    preset = replace(PRESETS["quick"], tune_seed=None)
    regime = preset.regimes[0]
    assert regime.lr not in regime.tune_lrs[:1]
    record = tune(tmp_path, regime, preset, resolve_method("ppo"), run, log=lambda _: None)
    assert record == {"choice": {"lr": regime.lr}, "scores": [], "seed": None}
