"""Rejection-sampling fine-tuning: correct responses kept, a supervised step on them."""

import copy

import pytest
import torch

from forkgym.agents.advantages.algorithms import build_algorithm
from forkgym.agents.advantages.raft import accepted
from forkgym.agents.learner.stage import Learner
from forkgym.agents.models import load_policy_model
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from tests.agents.advantages.test_ppo import _batch_for
from tests.agents.learner.test_learner import tokens_of
from tests.agents.premises import HalfPaid
from tests.agents.run.test_trainer import config

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_policy_model(tiny_model_dir)[0]


def test_accepted_keeps_valid_correct_responses_up_to_a_cap():
    correct = torch.tensor([[True, False, True, True], [False, False, False, False]])
    valid = torch.tensor([[True, True, False, True], [True, True, True, True]])
    assert accepted(correct, valid, None).tolist() == [[True, False, False, True], [False] * 4]
    assert accepted(correct, valid, 1).tolist() == [[True, False, False, False], [False] * 4]


def test_the_raft_step_is_the_token_mean_cross_entropy_of_the_accepted_rows(model):
    tokens = tokens_of(["correct", "incorrect", "correct"], [3, 4, 2])
    batch = _batch_for(tokens)
    cfg = TrainConfig(algorithm="raft", loss="vanilla_pg", reduction="token_mean", k=3, lr=1e-3)
    adv = build_algorithm(cfg, model).advantages(batch, tokens)
    assert adv.train_rows.tolist() == [True, False, True] and adv.rows.tolist() == [1, 0, 1]
    learner = Learner(copy.deepcopy(model), cfg, max_episode_tokens=8)
    logprobs = learner.current_logprobs(tokens)
    kept = tokens.with_action_mask(tokens.action_mask & adv.train_rows[:, None])
    nll = -logprobs[kept.action_mask].double().mean()
    update = learner.update(kept, adv.rows, step=0)
    assert update.tokens_trained == 5  # 3 + 2 accepted tokens; the rejected 4 are out
    assert update.metrics["loss"] == pytest.approx(float(nll), rel=1e-5)


def test_a_raft_run_trains_on_accepted_tokens_only(tmp_path, warm_model_dir):
    from tests.conftest import WARM_ENV_KWARGS

    cfg = config(
        tmp_path, warm_model_dir, "raft", algorithm="raft", loss="vanilla_pg",
        reduction="token_mean", env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12, eval_every=0,
    )  # fmt: skip
    Trainer(cfg, verifier=HalfPaid()).run()  # pays by the text, not by this CPU's model
    rows = read_metrics(tmp_path / "raft")
    paid = [m["raft/accepted_responses"] for m in rows[1:]]
    assert any(paid) and not all(n == m["episodes"] for n, m in zip(paid, rows[1:], strict=True)), (
        f"premise: some responses accepted and some rejected, got {paid}"
    )
    for m in rows:
        assert m["tokens_trained"] <= m["tokens_generated"]
        if m["raft/accepted_responses"] == 0:
            assert m["tokens_trained"] == 0
        if m["raft/accepted_responses"] < m["episodes"]:
            assert m["tokens_trained"] < m["tokens_generated"]


def test_raft_options_are_checked():
    with pytest.raises(ConfigError, match="max_per_prompt must be >= 1"):
        TrainConfig(algorithm="raft", algorithm_kwargs={"max_per_prompt": 0})
    with pytest.raises(ConfigError, match="algorithm_kwargs"):
        TrainConfig(algorithm="raft", algorithm_kwargs={"keep": 1})
