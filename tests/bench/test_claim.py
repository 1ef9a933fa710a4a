"""What a benchmark folder ran (bench/runner.py ``_claim``): the preset's settings in
``bench.json``, each regime's in its own ``regime.json``, so one regime's budget can change
while another's finished runs stay valid."""

import dataclasses
import json

import pytest

from forkgym.bench.presets import PRESETS, narrow
from forkgym.bench.runner import _claim, _start_regime

BOUNDARY = narrow(PRESETS["boundary"], ["arithmetic-k8", "steps2-k8"])


def _with_budget(preset, name, budget):
    regimes = tuple(dataclasses.replace(r, budget_tokens=budget) if r.name == name else r for r in preset.regimes)  # fmt: skip
    return dataclasses.replace(preset, regimes=regimes)


def test_a_regime_changed_after_it_ran_is_refused_and_another_may_change(tmp_path):
    _claim(tmp_path, BOUNDARY, None, None)
    assert "regimes" not in json.loads((tmp_path / "bench.json").read_text())["preset"]
    _start_regime(tmp_path, BOUNDARY.regimes[0])  # arithmetic-k8 ran
    assert json.loads((tmp_path / "arithmetic-k8" / "regime.json").read_text())["name"] == "arithmetic-k8"  # fmt: skip
    # steps2-k8 (not started) gets its budget from its pilot: arithmetic-k8's record stands
    _claim(tmp_path, _with_budget(BOUNDARY, "steps2-k8", 123_000), None, None)
    _start_regime(tmp_path, _with_budget(BOUNDARY, "steps2-k8", 123_000).regimes[1])
    with pytest.raises(ValueError, match="ran regime steps2-k8 with other settings"):
        _claim(tmp_path, BOUNDARY, None, None)
    with pytest.raises(ValueError, match=r"ran regime arithmetic-k8 with other settings \(budget_tokens\)"):  # fmt: skip
        _claim(tmp_path, _with_budget(BOUNDARY, "arithmetic-k8", 999), None, None)
    # one regime alone (--regimes) runs into the same folder
    _claim(tmp_path, narrow(_with_budget(BOUNDARY, "steps2-k8", 123_000), ["steps2-k8"]), None, None)  # fmt: skip


def test_other_methods_seeds_or_preset_settings_are_refused(tmp_path):
    _claim(tmp_path, BOUNDARY, ["rloo", "sft"], [0, 1])
    with pytest.raises(ValueError, match="holds a different benchmark"):
        _claim(tmp_path, BOUNDARY, ["rloo"], [0, 1])
    with pytest.raises(ValueError, match="holds a different benchmark"):
        _claim(tmp_path, dataclasses.replace(BOUNDARY, eval_episodes=10), ["rloo", "sft"], [0, 1])


def test_a_manifest_holding_its_regimes_is_split_and_still_checked(tmp_path):
    legacy = {"preset": dataclasses.asdict(BOUNDARY), "methods": None, "seeds": None}
    (tmp_path / "bench.json").write_text(json.dumps(legacy))
    (tmp_path / "steps2-k8").mkdir()  # it ran; arithmetic-k8 did not
    with pytest.raises(ValueError, match="ran regime steps2-k8 with other settings"):
        _claim(tmp_path, _with_budget(BOUNDARY, "steps2-k8", 5), None, None)
    _claim(tmp_path, _with_budget(BOUNDARY, "arithmetic-k8", 5), None, None)
    assert (tmp_path / "steps2-k8" / "regime.json").exists()
    assert not (tmp_path / "arithmetic-k8").exists()
    assert "regimes" not in json.loads((tmp_path / "bench.json").read_text())["preset"]
