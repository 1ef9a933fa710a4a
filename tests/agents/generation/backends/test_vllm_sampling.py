"""How forkgym's sampling settings become vLLM's, and what is refused (no engine needed)."""

from __future__ import annotations

import importlib.util

import pytest

from forkgym.agents.generation.backends.policy import SamplingParams
from forkgym.agents.generation.backends.vllm_policy import engine_sampling_kwargs
from forkgym.agents.run.config import ConfigError, TrainConfig


def test_a_sampled_request_keeps_its_seed_temperature_and_stop_rule():
    params = SamplingParams(max_new_tokens=7, temperature=0.6, stop_token_ids=(2, 9), seed=5)
    kw = engine_sampling_kwargs(params, seed=5)
    assert kw == {
        "n": 1,
        "max_tokens": 7,
        "stop_token_ids": [2, 9],
        "ignore_eos": True,  # the model's own EOS stops only if the caller lists it
        "logprobs": 0,
        "detokenize": False,
        "skip_special_tokens": False,
        "temperature": 0.6,
        "top_p": 1.0,
        "seed": 5,
    }


def test_a_greedy_request_is_temperature_zero_without_a_seed():
    kw = engine_sampling_kwargs(SamplingParams(greedy=True, temperature=0.3), seed=None)
    assert kw["temperature"] == 0.0 and "seed" not in kw and "top_p" not in kw


def test_truncated_sampling_is_refused_unless_accepted():
    params = SamplingParams(top_p=0.9)
    with pytest.raises(ValueError, match="renormalised"):
        engine_sampling_kwargs(params, seed=1)
    assert engine_sampling_kwargs(params, seed=1, allow_truncated_sampling=True)["top_p"] == 0.9


def test_training_with_top_p_below_one_needs_the_opt_in(tmp_path):
    with pytest.raises(ConfigError, match="biased"):
        TrainConfig(top_p=0.95, out=str(tmp_path))
    assert TrainConfig(top_p=0.95, allow_truncated_sampling=True, out=str(tmp_path)).top_p == 0.95


def test_drift_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="rollout_correction"):
        TrainConfig(rollout_correction=["icepop"], out=str(tmp_path))
    with pytest.raises(ConfigError, match="measure_drift"):
        TrainConfig(rollout_correction=["tis"], measure_drift=False, out=str(tmp_path))
    with pytest.raises(ConfigError, match="geo_mask_band"):
        TrainConfig(geo_mask_band=(1.1, 1.2), out=str(tmp_path))
    with pytest.raises(ConfigError, match="tis_clamp"):
        TrainConfig(tis_clamp=0.5, out=str(tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_the_backend_is_refused_with_the_install_step(tmp_path):
    from typer.testing import CliRunner

    from forkgym.cli import app

    with pytest.raises(ConfigError, match="vllm-env"):
        TrainConfig(backend="vllm", out=str(tmp_path))
    result = CliRunner().invoke(
        app, ["eval", "--model", str(tmp_path), "--env", "Arithmetic-v0", "--backend", "vllm"]
    )
    assert result.exit_code == 2 and "forkgym[vllm]" in result.output
