"""VinePPO (algorithm: vine): segment advantages from Monte Carlo values of exact forks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from forkgym.agents.advantages.vine import segment_advantages
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from tests.agents.run.test_trainer import comparable, config
from tests.conftest import STEPS_KWARGS, WARM_ENV_KWARGS


@given(
    st.lists(st.booleans(), min_size=1, max_size=40),
    st.data(),
    st.floats(-2, 2, allow_nan=False),
)
def test_segment_advantages_add_up_to_the_reward_minus_the_start_value(mask, data, reward):
    mask = [True, *mask]
    actions = [i for i, a in enumerate(mask) if a]
    picked = data.draw(st.lists(st.sampled_from(actions), unique=True, min_size=1))
    positions = sorted(picked)
    values = data.draw(st.lists(st.floats(0, 1), min_size=len(positions), max_size=len(positions)))  # fmt: skip
    adv = segment_advantages(torch.tensor(mask), positions, values, reward)
    # one advantage per segment: the one at each state's token
    per_segment = [float(adv[p]) for p in positions]
    assert sum(per_segment) == pytest.approx(reward - values[0], abs=1e-5)
    ends = [*positions[1:], len(mask)]
    for start, end, a in zip(positions, ends, per_segment, strict=True):
        for t in range(start, end):
            assert float(adv[t]) == (pytest.approx(a) if mask[t] else 0.0)
    assert adv[: positions[0]].eq(0).all()  # before the first valued state: nothing


def test_segment_advantages_of_a_two_turn_episode():
    mask = torch.tensor([0, 0, 1, 1, 1, 0, 0, 1, 1])
    adv = segment_advantages(mask, [2, 7], [0.25, 0.75], 1.0)
    assert adv.tolist() == [0, 0, 0.5, 0.5, 0.5, 0, 0, 0.25, 0.25]


VINE = dict(
    algorithm="vine", env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12, eval_every=0, k=2,
    loss="ppo_clip", checkpoint_every=2,
)  # fmt: skip


@pytest.mark.float_sensitive
def test_vine_trains_counts_its_continuations_and_resumes_exactly(tmp_path, warm_model_dir):
    options = {"rollouts": 3, "chunk": 6, "group_centering": "loo"}
    vine = {**VINE, "algorithm_kwargs": options}
    Trainer(config(tmp_path, warm_model_dir, "full", steps=3, **vine)).run()
    Trainer(config(tmp_path, warm_model_dir, "part", steps=2, **vine)).run()
    Trainer(config(tmp_path, warm_model_dir, "part", steps=3, **vine), resume=True).run()
    full, part = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert comparable(full) == comparable(part)
    assert [m["step"] for m in full] == [1, 2, 3]
    for m in full:
        # every continuation token is generated, counted in the step's tokens and the budget
        values = m["tokens_generated_values"]
        assert values > 0 and m["gen/value_tokens"] == values
        assert m["tokens_generated"] == m["gen/tokens_sampled"] + values
        assert m["gen/value_continuations"] % 3 == 0
        assert 1 <= m["vine/states_per_episode"] <= 2  # the prompt, and 6 tokens in
        assert "vine/centering_baseline_abs_mean" in m
    assert full[-1]["tokens_generated_total"] == sum(m["tokens_generated"] for m in full)
    assert any(m["vine/adv_abs_mean"] > 0 for m in full)


@pytest.mark.slow
@pytest.mark.float_sensitive
def test_vine_on_a_multi_turn_env_from_the_command_line(tmp_path, steps_model_dir):
    args = [sys.executable, "-m", "forkgym", "train", "--model", str(steps_model_dir),
            "--env", "forkgym/CheckedSteps-v0", "--steps", "2", "--out", str(tmp_path / "run"),
            "--no-progress", "algorithm=vine", "algorithm_kwargs.rollouts=2", "loss=ppo_clip",
            "prompts_per_step=2", "k=2", "max_new_tokens=48", "eval_every=0",
            *[f"env_kwargs.{k}={json.dumps(v)}" for k, v in STEPS_KWARGS.items()]]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = read_metrics(tmp_path / "run")
    assert metrics[-1]["vine/states_per_episode"] > 1  # a state at every turn's start
    assert metrics[-1]["tokens_generated_values"] > 0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"algorithm_kwargs": {"rollouts": 0}}, "rollouts must be >= 1"),
        ({"algorithm_kwargs": {"chunk": 0}}, "chunk must be >= 1"),
        ({"algorithm_kwargs": {"group_centering": "loo"}, "k": 1}, "needs k >= 2"),
        ({"algorithm_kwargs": {"roll_outs": 3}}, "algorithm_kwargs"),
        ({"overlong_buffer": 4}, "set overlong_buffer=0"),
        ({"kl_in_reward": True, "kl_coef": 0.1}, "set kl_in_reward=false"),
        ({"loss": "gspo"}, "needs one advantage per response"),
    ],
)
def test_vine_options_are_checked_before_anything_loads(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(algorithm="vine", **values)
