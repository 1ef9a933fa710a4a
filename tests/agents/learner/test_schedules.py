"""Learning-rate schedules: warm-up, decay shapes, the floor, and config validation."""

from __future__ import annotations

import pytest

from forkgym.agents.learner.schedules import LR_SCHEDULES, lr_factor
from forkgym.agents.run.config import ConfigError, TrainConfig


def test_constant_is_one_after_warmup_and_warmup_ramps_linearly():
    assert [lr_factor("constant", s, 10, warmup_steps=4) for s in range(6)] == [
        0.25,
        0.5,
        0.75,
        1.0,
        1.0,
        1.0,
    ]


def test_linear_decays_to_the_final_ratio_and_stays_there():
    factors = [lr_factor("linear", s, 4, final_ratio=0.2) for s in range(7)]
    assert factors == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2])


def test_cosine_is_half_way_at_mid_decay_and_starts_after_warmup():
    assert lr_factor("cosine", 2, 12, warmup_steps=2) == 1.0
    assert lr_factor("cosine", 7, 12, warmup_steps=2) == pytest.approx(0.5)
    assert lr_factor("cosine", 12, 12, warmup_steps=2) == pytest.approx(0.0)
    # the cosine stays above the line in the first half of the decay
    assert lr_factor("cosine", 4, 12, warmup_steps=2) > lr_factor("linear", 4, 12, warmup_steps=2)


def test_unknown_schedule_is_named():
    with pytest.raises(ValueError, match=r"'step'.*constant"):
        lr_factor("step", 0, 10)
    assert set(LR_SCHEDULES) == {"constant", "linear", "cosine"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr_schedule": "exp"}, "lr_schedule='exp' is not one of"),
        ({"warmup_steps": -1}, "warmup_steps=-1 must be >= 0"),
        ({"warmup_steps": 5, "lr_decay_steps": 5}, "lr_decay_steps=5 must be > warmup_steps"),
        ({"lr_final_ratio": 1.5}, "lr_final_ratio=1.5 must be in"),
    ],
)
def test_config_rejects_bad_schedules(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**values)
