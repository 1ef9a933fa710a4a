"""The sweep: its grid, its seeds, its steps past an edge, its choice, and validation tasks
that no report scores."""

import json
import math
from dataclasses import replace

import pytest

from forkgym.bench import PRESETS
from forkgym.bench.held_out import _content_keys, evaluation_tasks, validation_tasks
from forkgym.bench.methods import resolve_method
from forkgym.bench.tuning import MAX_EXTENSIONS, apply, grid, swept, tune, tuning_table

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


def test_a_methods_tune_options_are_more_axes_of_its_grid_and_stay_integer():
    regime = replace(REGIME, tune_options={"vine": {"rollouts": (2, 4, 8)}})
    vine = grid(regime, resolve_method("vine"))
    assert vine == [{"lr": lr, "rollouts": n} for lr in REGIME.tune_lrs for n in (2, 4, 8)]
    assert all(type(s["rollouts"]) is int for s in vine)
    assert grid(regime, resolve_method("rloo")) == grid(REGIME, resolve_method("rloo"))


def test_a_method_may_have_its_own_learning_rate_grid():
    regime = replace(REGIME, tune_options={"sft": {"lr": (4e-4, 8e-4)}, "vine": {"lr": (5e-5,), "rollouts": (2, 4)}})  # fmt: skip
    assert grid(regime, resolve_method("sft")) == [{"lr": 4e-4}, {"lr": 8e-4}]
    assert grid(regime, resolve_method("vine")) == [{"lr": 5e-5, "rollouts": 2}, {"lr": 5e-5, "rollouts": 4}]  # fmt: skip
    assert grid(regime, resolve_method("rloo")) == [{"lr": lr} for lr in REGIME.tune_lrs]


def test_a_setting_reaches_the_run_and_leaves_the_other_critic_options_alone():
    method = resolve_method("ppo")
    regime, tuned = apply(REGIME, method, {"lr": 3e-4, "value_lr": 1e-3})
    assert regime.lr == 3e-4
    kwargs = tuned.overrides["algorithm_kwargs"]
    assert kwargs["value_lr"] == 1e-3
    assert {k: v for k, v in kwargs.items() if k != "value_lr"} == method.overrides["algorithm_kwargs"]  # fmt: skip
    assert "value_lr" not in method.overrides["algorithm_kwargs"]  # the registry is untouched


def test_every_key_but_lr_is_an_algorithm_keyword():
    method = resolve_method("vine")
    regime, tuned = apply(REGIME, method, {"lr": 2e-4, "rollouts": 8})
    assert regime.lr == 2e-4
    assert tuned.overrides["algorithm_kwargs"] == {**method.overrides["algorithm_kwargs"], "rollouts": 8}  # fmt: skip
    assert method.overrides["algorithm_kwargs"]["rollouts"] != 8  # the registry is untouched
    regime, tuned = apply(REGIME, resolve_method("sft"), {"lr": 2e-4})
    assert tuned == resolve_method("sft")


@pytest.mark.parametrize("preset", ["smoke", "quick"])
def test_validation_tasks_are_eval_side_and_never_a_reported_problem(preset):
    p = PRESETS[preset]
    regime = p.regimes[0]
    tasks = validation_tasks(regime, p.eval_episodes)
    assert len(tasks) == p.eval_episodes and tasks == validation_tasks(regime, p.eval_episodes)
    reported = set(_content_keys(regime, "eval", evaluation_tasks(regime, p.eval_episodes)))
    chosen = _content_keys(regime, "eval", tasks)  # raises if a seed left the eval side
    assert not reported & set(chosen)
    trained = set(_content_keys(regime, "train", list(range(2000))))
    assert not trained & set(chosen)


def fake_run(score, runs=None):
    """A tuning run that writes ``score(lr, algorithm_kwargs, seed)`` as its validation
    accuracy (and notes what it ran in ``runs``)."""

    def run(regime, method, seed, folder):
        assert regime.validation and seed in SMOKE.tune_seeds
        kwargs = method.overrides.get("algorithm_kwargs", {})
        if runs is not None:
            runs.append((regime.lr, kwargs, seed, folder.name))
        folder.mkdir(parents=True, exist_ok=True)  # a resumed run finds its folder
        accuracy = score(regime.lr, kwargs, seed)
        (folder / "validation.json").write_text(json.dumps({"eval_accuracy": accuracy}))

    return run


def peaked(at):
    """A score peaked at the learning rate ``at``, falling with its distance in decades."""
    return lambda lr, kwargs, seed: 1 - abs(math.log10(lr / at)) / 3


def test_every_setting_runs_on_both_tuning_seeds_and_is_scored_by_their_mean(tmp_path):
    assert SMOKE.tune_seeds == (100, 101)
    per_seed = {(1e-4, 100): 0.9, (1e-4, 101): 0.1, (3e-4, 100): 0.6, (3e-4, 101): 0.6}
    runs = []

    def score(lr, kwargs, seed):  # past the grid's top: worse on both seeds
        return per_seed.get((lr, seed), 0.2)

    record = tune(tmp_path, REGIME, SMOKE, resolve_method("sft"), fake_run(score, runs), print)
    assert [(lr, seed) for lr, _, seed, _ in runs[:4]] == [(1e-4, 100), (1e-4, 101), (3e-4, 100), (3e-4, 101)]  # fmt: skip
    first = record["scores"][0]
    assert first["per_seed"] == {"100": 0.9, "101": 0.1}
    assert first["validation_accuracy"] == pytest.approx(0.5)
    assert record["seeds"] == [100, 101]
    # seed 100 alone would choose 1e-4; the mean over both chooses 3e-4
    assert record["choice"] == {"lr": 3e-4} and record["edge"] == []
    assert len({name for *_, name in runs}) == len(runs)  # one folder per setting and seed
    assert "sft-lr=0.0001-seed100" in {name for *_, name in runs}
    table = "\n".join(tuning_table(tmp_path, REGIME, SMOKE))
    assert "| sft | 100, 101 | lr=0.0001: 0.500, lr=0.0003: 0.600, lr=0.0009: 0.200 | lr=0.0003 |" in table  # fmt: skip
    assert "tuning seeds (100, 101)" in table and "at the edge" not in table


def test_a_choice_at_the_grids_edge_is_extended_until_it_is_inside(tmp_path):
    runs = []
    record = tune(tmp_path, REGIME, SMOKE, resolve_method("rloo"), fake_run(peaked(9e-4), runs), print)  # fmt: skip
    lrs = [lr for lr, *_ in runs]
    # the grid (1e-4, 3e-4), then 9e-4 (the best, but at the top), then 2.7e-3 (worse): stop
    assert lrs == pytest.approx([1e-4, 1e-4, 3e-4, 3e-4, 9e-4, 9e-4, 2.7e-3, 2.7e-3])
    assert record["choice"] == {"lr": pytest.approx(9e-4)} and record["edge"] == []
    assert record["axes"]["lr"] == pytest.approx([1e-4, 3e-4, 9e-4, 2.7e-3])


def test_run_many_takes_each_step_past_an_edge_on_all_its_seeds_and_changes_nothing(tmp_path):
    one_at_a_time = tune(tmp_path / "a", REGIME, SMOKE, resolve_method("rloo"), fake_run(peaked(9e-4)), print)  # fmt: skip
    batches, runs = [], []
    run = fake_run(peaked(9e-4), runs)

    def run_many(pending):  # as the benchmark's workers do: each run, then its done.json
        batches.append([(r.lr, seed) for r, _, seed, _, _ in pending])
        for regime, method, seed, folder, _ in pending:
            run(regime, method, seed, folder)
            (folder / "done.json").write_text(json.dumps({"seconds": 1.0}))

    record = tune(tmp_path / "b", REGIME, SMOKE, resolve_method("rloo"), run, print, run_many)
    assert record == one_at_a_time
    # the grid's settings, then the two steps past its top, each one batch of both seeds
    assert [[seed for _, seed in batch] for batch in batches] == [[100, 101]] * 4
    assert [batch[0][0] for batch in batches] == pytest.approx([1e-4, 3e-4, 9e-4, 2.7e-3])
    assert len(runs) == 8


def test_the_step_below_the_bottom_edge_is_the_same_ratio(tmp_path):
    record = tune(tmp_path, REGIME, SMOKE, resolve_method("rloo"), fake_run(peaked(1e-5)), print)
    assert record["axes"]["lr"] == pytest.approx([1e-4 / 27, 1e-4 / 9, 1e-4 / 3, 1e-4, 3e-4], rel=1e-5)  # fmt: skip
    assert record["choice"] == {"lr": pytest.approx(1e-4 / 9, rel=1e-5)} and record["edge"] == []


def test_a_monotone_score_stops_after_three_steps_and_stays_flagged(tmp_path):
    runs = []
    method = resolve_method("raft")
    record = tune(tmp_path, REGIME, SMOKE, method, fake_run(lambda lr, *_: lr, runs), print)
    assert MAX_EXTENSIONS == 3
    assert record["axes"]["lr"] == pytest.approx([1e-4, 3e-4, 9e-4, 2.7e-3, 8.1e-3])
    assert len(runs) == 2 * 5
    assert record["choice"] == {"lr": pytest.approx(8.1e-3)} and record["edge"] == ["lr"]
    table = "\n".join(tuning_table(tmp_path, REGIME, SMOKE))
    assert "| raft | 100, 101 |" in table and "lr=0.0081 (**at the edge** of lr) |" in table


def test_tune_options_reach_the_runs_algorithm_kwargs_and_integer_axes_step_as_integers(tmp_path):
    regime = replace(REGIME, tune_lrs=(1e-4, 3e-4, 9e-4), tune_options={"vine": {"rollouts": (2, 4)}})  # fmt: skip
    runs = []

    def score(lr, kwargs, seed):  # lr peaked inside the grid; rollouts best at 8, past the grid
        return peaked(3e-4)(lr, kwargs, seed) - abs(kwargs["rollouts"] - 8) / 100

    method = resolve_method("vine")
    record = tune(tmp_path, regime, SMOKE, method, fake_run(score, runs), print)
    rollouts = [kwargs["rollouts"] for _, kwargs, *_ in runs]
    assert rollouts[:12] == [2, 2, 4, 4] * 3 and rollouts[12:] == [8, 8, 16, 16]
    assert all(type(n) is int for n in rollouts)
    assert all(kwargs["chunk"] == method.overrides["algorithm_kwargs"]["chunk"] for _, kwargs, *_ in runs)  # fmt: skip
    assert record["choice"] == {"lr": 3e-4, "rollouts": 8} and record["edge"] == []
    assert "vine-lr=0.0003,rollouts=16-seed101" in {name for *_, name in runs}


def test_nothing_is_tried_past_a_bound(tmp_path):
    """A warm-up of 0 steps is the lowest there is: chosen, it is not an edge to extend."""
    options = {"ppo": {"value_warmup_steps": (0, 6)}}
    regime = replace(REGIME, tune_lrs=(1e-4, 3e-4, 9e-4), tune_value_lrs=(), tune_options=options)  # fmt: skip
    runs = []

    def score(lr, kwargs, seed):
        return peaked(3e-4)(lr, kwargs, seed) - kwargs["value_warmup_steps"] / 100

    record = tune(tmp_path, regime, SMOKE, resolve_method("ppo"), fake_run(score, runs), print)
    assert len(runs) == 2 * 6  # the grid alone
    assert record["choice"] == {"lr": 3e-4, "value_warmup_steps": 0} and record["edge"] == []


COORDINATE = replace(
    REGIME,
    tune_lrs=(1e-4, 3e-4, 9e-4),
    tune_value_lrs=(2e-4, 1e-3),
    tune_options={
        "ppo": {"value_warmup_steps": (0, 6)},
        "vine": {"rollouts": (2, 4), "chunk": (16, 32)},
    },
    tune_crossed=False,
)


def test_a_coordinate_search_starts_with_the_rates_and_the_methods_own_values():
    own = resolve_method("vine").overrides["algorithm_kwargs"]
    assert (own["rollouts"], own["chunk"]) == (4, 16)
    assert grid(COORDINATE, resolve_method("vine")) == [{"lr": lr, "rollouts": 4, "chunk": 16} for lr in COORDINATE.tune_lrs]  # fmt: skip
    # PPO's warm-up is its own (6); its critic's rate is not set, so the grid's first
    ppo = grid(COORDINATE, resolve_method("ppo"))
    assert ppo == [{"lr": lr, "value_lr": 2e-4, "value_warmup_steps": 6} for lr in COORDINATE.tune_lrs]  # fmt: skip
    assert grid(COORDINATE, resolve_method("rloo")) == [{"lr": lr} for lr in COORDINATE.tune_lrs]
    # one rate but another axis: still a sweep
    one_rate = replace(COORDINATE, tune_lrs=(1e-4,))
    assert len(grid(one_rate, resolve_method("vine"))) == 1 and swept(one_rate, SMOKE, resolve_method("vine"))  # fmt: skip
    assert not swept(one_rate, SMOKE, resolve_method("rloo"))


def test_a_coordinate_search_moves_one_axis_at_a_time_from_the_choice_so_far(tmp_path):
    runs = []

    def score(lr, kwargs, seed):  # rate best at 3e-4, 2 continuations best, chunk indifferent
        return peaked(3e-4)(lr, kwargs, seed) - abs(kwargs["rollouts"] - 2) / 100

    record = tune(tmp_path, COORDINATE, SMOKE, resolve_method("vine"), fake_run(score, runs), print)
    tried = [
        (lr, kwargs["rollouts"], kwargs["chunk"]) for lr, kwargs, seed, _ in runs if seed == 100
    ]
    assert tried == [
        (1e-4, 4, 16), (3e-4, 4, 16), (9e-4, 4, 16),  # the rates, the rest held
        (3e-4, 2, 16),  # continuations at the chosen rate
        (3e-4, 2, 32),  # chunk at the choice so far (a tie: the first run stays)
        (3e-4, 1, 16),  # 2 continuations are the lower edge: one step past it (worse)
        (3e-4, 2, 8),  # so is a chunk of 16 (a tie again)
    ]  # fmt: skip
    assert record["choice"] == {"lr": 3e-4, "rollouts": 2, "chunk": 16}
    crossed = tune(tmp_path / "crossed", replace(COORDINATE, tune_crossed=True), SMOKE, resolve_method("vine"), fake_run(score), print)  # fmt: skip
    assert crossed["choice"] == record["choice"] and len(crossed["scores"]) > 2 * len(record["scores"]) - 2  # fmt: skip
    assert "one axis at a time" in "\n".join(tuning_table(tmp_path, COORDINATE, SMOKE))


def test_a_resumed_sweep_never_reruns_a_finished_run(tmp_path):
    runs = []
    score = peaked(9e-4)
    run = fake_run(score, runs)

    def crashing(regime, method, seed, folder):
        if len(runs) == 5:  # the sixth run (9e-4 on seed 101) dies before it is done
            folder.mkdir(parents=True)
            raise RuntimeError("interrupted")
        run(regime, method, seed, folder)

    method = resolve_method("rloo")
    with pytest.raises(RuntimeError, match="interrupted"):
        tune(tmp_path, REGIME, SMOKE, method, crashing, print)
    assert len(runs) == 5 and not (tmp_path / REGIME.name / "tune" / "rloo.json").exists()
    done = [name for *_, name in runs]
    resumed = []
    record = tune(tmp_path, REGIME, SMOKE, method, fake_run(score, resumed), print)
    assert not {name for *_, name in resumed} & set(done)  # the finished runs were read back
    assert [name for *_, name in resumed] == ["rloo-lr=0.0009-seed101", "rloo-lr=0.0027-seed100", "rloo-lr=0.0027-seed101"]  # fmt: skip
    assert record["choice"] == {"lr": pytest.approx(9e-4)}

    def run_nothing(*_):
        raise AssertionError("a finished sweep is read from its record")

    assert tune(tmp_path, REGIME, SMOKE, method, run_nothing, print) == record


def test_a_tie_goes_to_the_setting_run_first(tmp_path):
    runs = []
    record = tune(tmp_path, REGIME, SMOKE, resolve_method("rloo"), fake_run(lambda *_: 0.5, runs), print)  # fmt: skip
    # the first setting, 1e-4, sits at the bottom: one step below it ties, and 1e-4 stays
    assert record["choice"] == {"lr": REGIME.tune_lrs[0]} and record["edge"] == []
    assert [lr for lr, *_ in runs][4:] == pytest.approx([1e-4 / 3] * 2, rel=1e-5)


def test_the_sft_runs_score_is_its_last_evaluation(tmp_path):
    def run(regime, method, seed, folder):
        folder.mkdir(parents=True)
        rows = [{"step": 1, "eval_accuracy": 0.0}, {"step": 2, "eval_accuracy": peaked(3e-4)(regime.lr, {}, seed)}, {"step": 3}]  # fmt: skip
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    regime = replace(REGIME, tune_lrs=(1e-4, 3e-4, 9e-4))
    record = tune(tmp_path, regime, SMOKE, resolve_method("sft"), run, print)
    assert record["choice"] == {"lr": 3e-4}
    assert record["scores"][1]["validation_accuracy"] == pytest.approx(1.0)


def test_without_tuning_seeds_every_method_runs_at_the_regime_lr(tmp_path):
    def run(*_):
        raise AssertionError("no tuning run expected")

    preset = replace(PRESETS["quick"], tune_seeds=())
    regime = preset.regimes[0]
    assert regime.lr not in regime.tune_lrs[:1]
    record = tune(tmp_path, regime, preset, resolve_method("ppo"), run, log=lambda _: None)
    assert record == {"choice": {"lr": regime.lr}, "scores": [], "seeds": [], "edge": []}
    assert tuning_table(tmp_path, regime, preset) == []
