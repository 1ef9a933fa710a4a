"""Benchmark methods are training configs the trainer accepts, named once."""

import pytest

from forkgym.agents.run.config import TrainConfig
from forkgym.bench import METHODS, PRESETS, resolve_method
from forkgym.bench.runner import _train_config


@pytest.mark.parametrize("name", sorted(m for m in METHODS if METHODS[m].kind == "rl"))
def test_every_rl_method_is_a_valid_config_at_k8(name, tmp_path):
    preset = PRESETS["quick"]
    config = _train_config(preset.regimes[0], preset, resolve_method(name), 0, "m", tmp_path)
    assert isinstance(config, TrainConfig)
    assert config.max_tokens_generated == preset.regimes[0].budget_tokens


def test_group_methods_are_marked_and_refused_at_k1_by_the_config():
    for method in METHODS.values():
        if method.kind != "rl":
            continue
        values = {"k": 1, "prompts_per_step": 4, **method.overrides}
        if method.needs_group:
            with pytest.raises(ValueError):
                TrainConfig(**values)
        else:
            TrainConfig(**values)


def test_a_reduction_suffix_overrides_the_reduction_and_bad_names_are_refused():
    m = resolve_method("grpo@seq_mean_token_mean")
    assert m.name == "grpo@seq_mean_token_mean" and m.overrides["reduction"] == "seq_mean_token_mean"  # fmt: skip
    assert m.overrides["estimator"] == "grpo"
    with pytest.raises(ValueError, match="unknown reduction"):
        resolve_method("grpo@mean")
    with pytest.raises(ValueError, match="registered"):
        resolve_method("grpoo")
    with pytest.raises(ValueError, match="no reduction"):
        resolve_method("sft@token_mean")


def test_presets_name_known_methods_and_quick_has_six_or_more():
    for preset in PRESETS.values():
        for regime in preset.regimes:
            for name in regime.methods:
                resolve_method(name)
    quick = PRESETS["quick"]
    assert len(quick.seeds) >= 3
    assert len([m for m in quick.regimes[0].methods if METHODS[m].kind != "trl"]) >= 6
    full = {r.k for r in PRESETS["full"].regimes}
    assert 1 in full and 8 in full
    assert any(r.env.endswith("Calculator-v0") for r in PRESETS["full"].regimes)


def test_trl_is_kept_to_single_turn_regimes():
    from forkgym.bench.runner import _max_turns

    turns = {r.name: _max_turns(r) for r in PRESETS["full"].regimes}
    assert turns["arithmetic-k8"] == 1 and turns["calculator-k8"] > 1
    assert not any("trl_grpo" in r.methods for r in PRESETS["full"].regimes if turns[r.name] > 1)


def test_gigpo_is_grpo_at_the_episode_level_and_a_valid_config_on_a_multi_turn_regime(tmp_path):
    method = resolve_method("gigpo")
    assert method.kind == "rl" and method.needs_group
    assert method.overrides == {"algorithm": "gigpo", "estimator": "grpo"}
    preset = PRESETS["boundary"]
    regime = next(r for r in preset.regimes if r.name == "steps2-k8")
    config = _train_config(regime, preset, method, 0, "m", tmp_path)
    assert config.algorithm == "gigpo" and config.estimator == "grpo" and config.k == 8
    with pytest.raises(ValueError, match="k >= 2"):
        TrainConfig(**{**method.overrides, "env": regime.env, "k": 1, "prompts_per_step": 4})


def test_gigpo_is_in_every_multi_turn_regime_and_in_no_single_turn_one():
    from forkgym.bench.runner import _max_turns

    for name in ("boundary", "full"):
        for regime in PRESETS[name].regimes:
            multi = _max_turns(regime) > 1
            if multi and regime.k >= 2:
                assert "gigpo" in regime.methods, (name, regime.name)
            if not multi:
                assert "gigpo" not in regime.methods, (name, regime.name)
    boundary = {r.name: r for r in PRESETS["boundary"].regimes}
    for regime in ("steps2-k8", "steps3-k8"):
        assert "gigpo" in boundary[regime].methods
    for regime in ("arithmetic-k8", "arithmetic-k1"):
        assert "gigpo" not in boundary[regime].methods
    # swept as GRPO is, on the same learning rates
    assert boundary["steps2-k8"].tune_lrs and "gigpo" not in boundary["steps2-k8"].tune_options
