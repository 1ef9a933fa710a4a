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
