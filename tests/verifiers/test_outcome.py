import json
import math

import pytest

from forkgym.verifiers import (
    DEFAULT_REWARDS,
    INFRASTRUCTURE_STATUSES,
    POLICY_STATUSES,
    Outcome,
    RewardMap,
    Status,
)


def test_status_vocabulary_is_exactly_the_design():
    assert [s.value for s in Status] == [
        "correct",
        "incorrect",
        "invalid",
        "truncated",
        "timeout",
        "error",
    ]
    assert {s for s in Status if s.is_infrastructure} == {Status.TIMEOUT, Status.ERROR}
    assert set(POLICY_STATUSES) | INFRASTRUCTURE_STATUSES == set(Status)
    assert str(Status.INVALID) == "invalid"
    assert Status("timeout") is Status.TIMEOUT


@pytest.mark.parametrize("status", sorted(INFRASTRUCTURE_STATUSES))
def test_infrastructure_outcomes_refuse_a_reward(status):
    with pytest.raises(ValueError, match="carries no reward"):
        Outcome(status=status, reward=0.0)
    assert Outcome(status=status, reward=None).reward is None
    assert Outcome.from_status(status).reward is None


@pytest.mark.parametrize("status", POLICY_STATUSES)
def test_policy_outcomes_need_a_finite_reward(status):
    with pytest.raises(ValueError, match="needs a numeric reward"):
        Outcome(status=status, reward=None)
    with pytest.raises(ValueError, match="finite"):
        Outcome(status=status, reward=math.nan)
    with pytest.raises(ValueError):
        Outcome(status=status, reward=True)


def test_default_rewards_and_from_status():
    assert Outcome.from_status("correct").reward == 1.0
    for status in ("incorrect", "invalid", "truncated"):
        assert Outcome.from_status(status).reward == 0.0
    assert DEFAULT_REWARDS.reward(Status.TIMEOUT) is None


def test_reward_map_is_configurable_but_not_for_infrastructure():
    rewards = RewardMap.from_mapping({"correct": 1, "invalid": -0.5})
    assert rewards.reward("invalid") == -0.5
    assert Outcome.from_status("invalid", rewards).reward == -0.5
    with pytest.raises(ValueError, match="infrastructure"):
        RewardMap.from_mapping({"timeout": 0.0})
    with pytest.raises(ValueError, match="unknown status"):
        RewardMap.from_mapping({"wrong": 0.0})
    with pytest.raises(TypeError):
        RewardMap(correct="1")


def test_outcome_round_trips_through_json():
    outcome = Outcome(
        status=Status.TIMEOUT,
        reward=None,
        extracted="9^{9^{9}}",
        details={"reason": "time_limit"},
        verifier="math",
        verifier_version="v",
        latency_ms=3001.5,
    )
    data = json.loads(json.dumps(outcome.to_dict()))
    assert data["status"] == "timeout" and data["reward"] is None
    assert Outcome.from_dict(data) == outcome
    assert Outcome.from_dict({"status": "correct", "reward": 1}).is_correct
