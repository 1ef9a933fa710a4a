"""The presets' task spaces: held out by meaning, with enough problems on the eval side."""

from __future__ import annotations

import pytest

from forkgym.bench.held_out import distinct_problems, overlap
from forkgym.bench.presets import PRESETS

# smoke checks the machinery on 1-digit sums (55 problems in all): it reports no result
REGIMES = [
    pytest.param(preset, regime, id=f"{name}/{regime.name}")
    for name, preset in PRESETS.items()
    for regime in preset.regimes
]


@pytest.mark.parametrize(("preset", "regime"), REGIMES)
def test_no_evaluated_problem_is_a_training_problem_by_meaning(preset, regime):
    found = overlap(regime, min(preset.eval_episodes, 200), train_draws=4000)
    assert found["overlap"] == 0 and found["train_tasks"] > 0


@pytest.mark.parametrize(("preset", "regime"), [r for r in REGIMES if r.values[0].name != "smoke"])  # fmt: skip
def test_every_reported_regime_holds_500_distinct_eval_side_problems(preset, regime):
    counts = distinct_problems(regime, enough=500)
    assert counts["eval_problems"] >= 500, counts


@pytest.mark.parametrize(("preset", "regime"), [r for r in REGIMES if r.values[0].name == "boundary"])  # fmt: skip
def test_the_boundary_evaluates_one_list_of_distinct_problems_and_validates_on_others(preset, regime):  # fmt: skip
    from forkgym.bench.held_out import _content_keys, evaluation_tasks, validation_tasks

    reported = _content_keys(regime, "eval", evaluation_tasks(regime, preset.eval_episodes))
    validation = _content_keys(regime, "eval", validation_tasks(regime, preset.validation_episodes))
    assert len(set(reported)) == len(reported) == preset.eval_episodes >= 1000
    assert len(set(validation)) == len(validation) and not set(reported) & set(validation)
    assert evaluation_tasks(regime, preset.eval_episodes) == evaluation_tasks(regime, preset.eval_episodes)  # fmt: skip


@pytest.mark.parametrize(("preset", "regime"), [r for r in REGIMES if r.values[0].name == "boundary"])  # fmt: skip
def test_the_boundary_sweeps_every_method_per_regime_on_two_tuning_seeds(preset, regime):
    from forkgym.bench import resolve_method
    from forkgym.bench.tuning import axes, grid

    assert len(preset.tune_seeds) >= 2 and not set(preset.tune_seeds) & set(preset.seeds)
    for name in regime.methods:
        method = resolve_method(name)
        assert len(grid(regime, method)) > 1, name
        found = set(axes(regime, method))
        if name == "ppo":  # the critic's rate and pretraining are swept with the policy's rate
            assert found == {"lr", "value_lr", "value_warmup_steps"}
        elif name == "vine":  # its continuations and the spacing of its states
            assert found == {"lr", "rollouts", "chunk"}
        else:
            assert found == {"lr"}, name
