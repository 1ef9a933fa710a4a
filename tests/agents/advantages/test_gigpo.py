"""GiGPO (algorithm: gigpo): episode-level estimator plus turn-level groups of exact env states."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
import yaml

from forkgym.agents.advantages.critic_free import CriticFree
from forkgym.agents.advantages.gigpo import GiGPO, anchor_statistics, step_advantages
from forkgym.agents.batch import RolloutBatch, TokenBatch
from forkgym.agents.episode import Episode, Group
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from forkgym.envs.base import observation_key
from forkgym.envs.checked_steps import CheckedStepsEnv
from forkgym.verifiers import Outcome, Status
from tests.agents.run.test_trainer import comparable, config
from tests.conftest import STEPS_KWARGS

R3 = 1 / 3


def episode(branch: int, keys: list[str], reward: float, texts: list[str] | None = None) -> Episode:
    """A hand-made episode: a 2-token prompt, then per turn 2 action tokens and 1 env token."""
    ids, mask, starts = [0, 0], [0, 0], []
    for _ in keys:
        starts.append(len(ids))
        ids += [1, 1, 2]
        mask += [1, 1, 0]
    status = Status.CORRECT if reward > 0 else Status.INCORRECT
    return Episode(
        group=0, branch=branch, kind="sampled", task_id="t", token_ids=ids, action_mask=mask,
        logprobs=[0.0] * len(ids), prompt_len=2,
        outcome=Outcome(status=status, reward=reward), actions=["a"] * len(keys),
        turn_starts=starts, state_keys=keys, text_keys=texts or keys,
    )  # fmt: skip


def batch_of(*episodes: Episode) -> tuple[RolloutBatch, TokenBatch]:
    batch = RolloutBatch.from_groups([Group("t", 0, list(episodes))], len(episodes))
    return batch, TokenBatch.from_rollouts(batch, pad_id=0)


def gigpo(**options) -> GiGPO:
    cfg = TrainConfig(
        algorithm="gigpo", estimator="grpo", k=3, loss="ppo_clip",
        env="forkgym/CheckedSteps-v0", algorithm_kwargs=options,
    )  # fmt: skip
    return GiGPO(cfg, **options)


# Three branches; 0 and 1 reach the same state "a" after turn 1, branch 2 goes elsewhere.
THREE = [(["s0", "a"], 1.0), (["s0", "a"], 0.0), (["s0", "b", "c"], 1.0)]


def per_turn(rows: torch.Tensor, tokens: TokenBatch) -> list[list[float]]:
    """Each row's advantage per turn (the value on the turn's first action token)."""
    out = []
    for row, mask in zip(rows, tokens.action_mask, strict=True):
        firsts = [t for t in range(len(mask)) if mask[t] and not mask[t - 1]]
        out.append([round(float(row[t]), 6) for t in firsts])
        assert all(float(row[t]) == 0.0 for t in range(len(mask)) if not mask[t])
    return out


def test_a_hand_computed_three_branch_group():
    batch, tokens = batch_of(*(episode(b, keys, r) for b, (keys, r) in enumerate(THREE)))
    got = gigpo().advantages(batch, tokens)
    # episode level (GRPO): mean 2/3, population std sqrt(2)/3
    e_hi, e_lo = (1 - 2 / 3) / (2**0.5 / 3), (0 - 2 / 3) / (2**0.5 / 3)
    # step level: anchor s0 holds every branch's turn 0 (returns 1, 0, 1, mean 2/3); anchor a
    # holds turn 1 of branches 0 and 1 (returns 1, 0, mean 1/2); b and c are alone: 0
    expected = [
        [e_hi + R3, e_hi + 0.5],
        [e_lo - 2 * R3, e_lo - 0.5],
        [e_hi + R3, e_hi, e_hi],
    ]
    assert per_turn(got.rows, tokens) == [[round(v, 6) for v in row] for row in expected]
    assert got.metrics["gigpo/anchor_fraction"] == pytest.approx(5 / 7)
    assert got.metrics["gigpo/anchor_size_mean"] == pytest.approx(7 / 4)
    assert got.metrics["gigpo/text_mixed_fraction"] == 0.0


def test_discount_and_step_std():
    batch, tokens = batch_of(*(episode(b, keys, r) for b, (keys, r) in enumerate(THREE)))
    got = per_turn(gigpo(omega=1.0, gamma=0.5).advantages(batch, tokens).rows, tokens)
    episode_level = per_turn(gigpo(omega=0.0).advantages(batch, tokens).rows, tokens)
    # returns: branch 0 (0.5, 1), branch 1 (0, 0), branch 2 (0.25, 0.5, 1); s0's mean 0.25
    step = [[0.25, 0.5], [-0.25, -0.5], [0.0, 0.0, 0.0]]
    for g, e, s in zip(got, episode_level, step, strict=True):
        assert g == pytest.approx([a + b for a, b in zip(e, s, strict=True)], abs=1e-6)
    assert step_advantages([["x", "x"]], [[2.0, 0.0]], std=True) == [[1.0, -1.0]]
    assert step_advantages([["x"], ["x"]], [[0.5], [0.5]], std=True) == [[0.0], [0.0]]


def test_with_omega_zero_it_is_grpo():
    batch, tokens = batch_of(*(episode(b, keys, r) for b, (keys, r) in enumerate(THREE)))
    cfg = TrainConfig(estimator="grpo", k=3)
    grpo = CriticFree(cfg).advantages(batch, tokens)
    got = gigpo(omega=0.0).advantages(batch, tokens)
    assert torch.equal(got.rows, grpo.rows[:, None] * tokens.action_mask)
    assert {k: v for k, v in got.metrics.items() if k.startswith("est/")} == grpo.metrics


def test_with_every_state_distinct_the_step_term_is_zero():
    distinct = [([f"{b}-{t}" for t in range(len(keys))], r) for b, (keys, r) in enumerate(THREE)]
    batch, tokens = batch_of(*(episode(b, keys, r) for b, (keys, r) in enumerate(distinct)))
    got = gigpo().advantages(batch, tokens)
    alone = gigpo(omega=0.0).advantages(batch, tokens)
    assert torch.equal(got.rows, alone.rows)
    assert got.metrics["gigpo/anchor_fraction"] == 0.0
    assert got.metrics["gigpo/step_adv_abs_mean"] == 0.0


def test_infrastructure_failures_are_in_no_anchor_group():
    eps = [episode(b, keys, r) for b, (keys, r) in enumerate(THREE)]
    eps[2].outcome = Outcome(status=Status.TIMEOUT, reward=None)
    batch, tokens = batch_of(*eps)
    got = gigpo().advantages(batch, tokens)
    assert len(tokens) == 2 and got.metrics["gigpo/anchor_fraction"] == 1.0


def test_text_matching_would_merge_what_the_state_key_keeps_apart():
    """CheckedSteps without feedback: a right and a wrong first report both get "Recorded.
    Next: ..."; the texts match and the states do not."""
    env: CheckedStepsEnv = gym.make("forkgym/CheckedSteps-v0", steps=2, digits=1, feedback=False).unwrapped  # fmt: skip
    obs, _ = env.reset(seed=3)
    right = env.task.data["values"][0]
    keys, texts, rewards = [], [], []
    for value in (right, right + 1):
        branch = env.fork()
        state, text = [branch.state_key()], [observation_key(obs["messages"])]
        after, *_ = branch.step(branch.format_call("submit", value=value))
        state.append(branch.state_key())
        text.append(observation_key(after["messages"]))
        *_, info = branch.step(branch.gold_action())
        info = branch.step(branch.gold_action())[-1] if "outcome" not in info else info
        keys.append(state)
        texts.append(text)
        rewards.append(info["outcome"].reward)
    assert rewards == [1.0, 0.0]
    assert texts[0] == texts[1] and keys[0][1] != keys[1][1]
    stats = anchor_statistics([keys], [texts])
    assert stats["text_mixed_fraction"] == 0.5  # of the two text groups, turn 1's mixes states
    exact = step_advantages(keys, [[r, r] for r in rewards])
    by_text = step_advantages(texts, [[r, r] for r in rewards])
    assert [row[1] for row in exact] == [0.0, 0.0]  # alone in their states
    assert [row[1] for row in by_text] == [0.5, -0.5]  # credit that the text invented


# the briefly warmed model rarely finishes a chain: its endings are priced apart so that
# groups differ (a truncated chain below a malformed answer)
PRICED = {**STEPS_KWARGS, "rewards": {"invalid": -0.5, "truncated": -1.0}}
GIGPO = dict(
    algorithm="gigpo", env="forkgym/CheckedSteps-v0", env_kwargs=PRICED, loss="ppo_clip",
    estimator="grpo", k=3, max_new_tokens=48, eval_every=0, checkpoint_every=2,
)  # fmt: skip


@pytest.mark.float_sensitive
def test_gigpo_trains_on_checked_steps_groups_turns_and_resumes_exactly(tmp_path, steps_model_dir):
    Trainer(config(tmp_path, steps_model_dir, "full", steps=3, **GIGPO)).run()
    Trainer(config(tmp_path, steps_model_dir, "part", steps=2, **GIGPO)).run()
    Trainer(config(tmp_path, steps_model_dir, "part", steps=3, **GIGPO), resume=True).run()
    full, part = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert comparable(full) == comparable(part)
    steps = [m for m in full if m["step"] > 0]
    # the warm start's branches meet again after their first report (with feedback)
    assert all(m["gigpo/anchor_fraction"] > 0 for m in steps)
    assert all(m["gigpo/anchor_size_mean"] >= 1 for m in steps)
    assert any(m["gigpo/step_adv_abs_mean"] > 0 for m in steps)


@pytest.mark.slow
@pytest.mark.float_sensitive
def test_gigpo_from_the_command_line_and_from_yaml(tmp_path, steps_model_dir):
    common = {"model": str(steps_model_dir), "prompts_per_step": 2, "steps": 1, "progress": False,
              **{k: v for k, v in GIGPO.items() if k != "checkpoint_every"}}  # fmt: skip
    file = tmp_path / "gigpo.yaml"
    file.write_text(yaml.safe_dump({**common, "algorithm_kwargs": {"omega": 0.5}}))
    runs = {
        "yaml": ["--config", str(file)],
        "cli": ["--model", str(steps_model_dir), "--env", "forkgym/CheckedSteps-v0", "--steps", "1",
                "--no-progress", "algorithm=gigpo", "algorithm_kwargs.omega=0.5", "loss=ppo_clip",
                "estimator=grpo", "k=3", "prompts_per_step=2", "max_new_tokens=48", "eval_every=0",
                *[f"env_kwargs.{k}={json.dumps(v)}" for k, v in PRICED.items()]],
    }  # fmt: skip
    for name, args in runs.items():
        cmd = [sys.executable, "-m", "forkgym", "train", *args, "--out", str(tmp_path / name)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    yaml_run, cli_run = read_metrics(tmp_path / "yaml"), read_metrics(tmp_path / "cli")
    assert comparable(yaml_run) == comparable(cli_run)
    assert yaml_run[-1]["gigpo/anchor_fraction"] > 0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"algorithm_kwargs": {"omega": -1}}, "omega must be"),
        ({"algorithm_kwargs": {"gamma": 0}}, "gamma must be in"),
        ({"algorithm_kwargs": {"omga": 1}}, "algorithm_kwargs"),
        ({"k": 1}, "needs k >= 2"),
        ({"loss": "gspo"}, "needs one advantage per response"),
        ({"env": "nostate/NoStateKey-v0"}, "has no state key"),
    ],
)
def test_gigpo_options_are_checked_before_anything_loads(values, message):
    class NoStateKey(CheckedStepsEnv):
        exact_state = False

    if "nostate/NoStateKey-v0" not in gym.registry:
        gym.register("nostate/NoStateKey-v0", entry_point=NoStateKey)
    base = {"algorithm": "gigpo", "env": "forkgym/CheckedSteps-v0", "loss": "ppo_clip", "k": 2}
    with pytest.raises(ConfigError, match=message) as caught:
        TrainConfig(**{**base, **values})
    assert len(str(caught.value).splitlines()) <= 2
