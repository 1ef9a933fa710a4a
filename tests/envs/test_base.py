"""The TextEnv contract, exercised on real environments."""

import json

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

import forkgym.envs  # noqa: F401
from forkgym.envs import UnicodeText, chat_observation_space
from forkgym.verifiers import MathVerifier, RewardMap, Status


def make(env_id="forkgym/Arithmetic-v0", **kwargs):
    return gym.make(env_id, **kwargs)


def test_observation_is_a_conversation_in_its_space():
    env = make()
    obs, info = env.reset(seed=3)
    assert obs in env.observation_space
    roles = [m["role"] for m in obs["messages"]]
    assert roles == ["system", "user"]
    assert obs["prompt"].endswith("Assistant:") and obs["messages"][1]["content"] in obs["prompt"]
    assert info == {"task_id": env.task.task_id, "turn": 0, "status": None}


def test_spaces_hold_any_unicode_text():
    space = UnicodeText(10)
    assert (
        space.contains("π≈3.14\x00\ud800")
        and not space.contains("x" * 11)
        and not space.contains(5)
    )
    assert space.sample() in space
    obs_space = chat_observation_space(100)
    assert obs_space.sample() in obs_space


def test_seeded_resets_are_reproducible_and_task_ids_rebuild_tasks():
    env = make()
    first, info = env.reset(seed=11)
    env.reset(seed=12)
    again, info_again = env.reset(seed=11)
    assert first == again and info == info_again
    task = env.task
    env.reset(seed=99, options={"task_id": task.task_id})
    assert env.task == task
    with pytest.raises(ValueError, match="not one of ArithmeticEnv's ids"):
        env.reset(options={"task_id": "calc-0000000000000001"})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"difficulty": 3})


def test_order_is_enforced_and_actions_must_be_text():
    env = make()
    with pytest.raises(ResetNeeded):
        env.step("\\boxed{1}")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="assistant's text"):
        env.step(42)
    env.step("\\boxed{1}")
    with pytest.raises(ResetNeeded):
        env.step("\\boxed{1}")


def test_terminal_step_carries_the_outcome_and_the_span_used():
    env = make()
    env.reset(seed=5)
    action = f"Working... so the result is \\boxed{{{env.task.answer}}}. Done."
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["status"] == "correct" and info["outcome"].status is Status.CORRECT
    start, end = info["action_span"]
    assert action[start:end] == env.task.answer
    assert obs["messages"][-1] == {"role": "assistant", "content": action}  # never rewritten


def test_retries_give_feedback_then_end():
    env = make(max_attempts=3)
    env.reset(seed=1)
    _, r1, t1, _, i1 = env.step("no idea")
    _, r2, t2, _, i2 = env.step("\\boxed{-1}")
    obs, r3, t3, _, i3 = env.step(env.unwrapped.gold_action())
    assert (i1["status"], i1["attempt_status"]) == ("retry", "invalid")
    assert (i2["status"], i2["attempt_status"]) == ("retry", "incorrect")
    assert i3["status"] == "correct" and (r1, r2, r3) == (0.0, 0.0, 1.0) and not (t1 or t2) and t3
    feedback = [m["content"] for m in obs["messages"] if m["role"] == "user"][1:]
    assert "could not find a final answer" in feedback[0] and "not correct" in feedback[1]


def test_last_attempt_ends_terminated_not_truncated():
    env = make(max_attempts=2)
    env.reset(seed=1)
    env.step("\\boxed{-1}")
    _, reward, terminated, truncated, info = env.step("\\boxed{-2}")
    assert (reward, terminated, truncated, info["status"]) == (0.0, True, False, "incorrect")


def test_truncate_from_outside_and_turn_limits():
    env = make()
    env.reset(seed=2)
    _, reward, terminated, truncated, info = env.unwrapped.truncate("max_tokens")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert (
        info["outcome"].status is Status.TRUNCATED
        and info["outcome"].details["reason"] == "max_tokens"
    )
    calc = make("forkgym/Calculator-v0", max_turns=2)
    calc.reset(seed=2)
    call = calc.unwrapped.format_call("calculator", expression="1+1")
    assert calc.step(call)[2:4] == (False, False)
    _, _, terminated, truncated, info = calc.step(call)
    assert (terminated, truncated, info["status"], info["limit"]) == (
        False,
        True,
        "truncated",
        "max_turns",
    )


def test_reward_map_and_infrastructure_outcomes():
    rewards = RewardMap(invalid=-0.5)
    env = make(rewards=rewards)
    env.reset(seed=0)
    assert env.step("nothing boxed")[1] == -0.5
    with MathVerifier(timeout=1.0, workers=1) as slow:
        env = make("forkgym/MathDataset-v0", path="math-sample", verifier=slow)
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step("\\boxed{9^{9^{9^{9}}}}")
    assert info["status"] == "timeout" and info["reward"] is None and info["outcome"].reward is None
    assert reward == 0.0 and terminated  # the float is a placeholder; the outcome says None


def test_the_env_prices_every_ending_once_with_its_own_map():
    """The verifier decides the status; the env's reward map alone sets the reward."""
    with MathVerifier(workers=0, rewards=RewardMap(correct=7.0, incorrect=3.0)) as verifier:
        env = make(
            rewards={"correct": 2.0, "incorrect": -1.0, "truncated": -2.0}, verifier=verifier
        )
        env.reset(seed=0)
        assert env.unwrapped.grade(f"\\boxed{{{env.unwrapped.task.answer}}}").reward == 7.0
        _, reward, _, _, info = env.step(f"\\boxed{{{env.unwrapped.task.answer}}}")
        assert reward == info["outcome"].reward == info["reward"] == 2.0
        env.reset(seed=1)
        assert env.step("\\boxed{-12345}")[4]["outcome"].reward == -1.0
        env.reset(seed=2)
        info = env.unwrapped.truncate("max_tokens")[4]
        assert (info["status"], info["outcome"].reward) == ("truncated", -2.0)
    with pytest.raises(ValueError, match="infrastructure"):
        make(rewards={"timeout": 0.0})


def test_any_verifier_object_can_grade():
    with MathVerifier(extract=["answer_tag"], workers=0) as tagged:
        env = make(verifier=tagged)
        env.reset(seed=4)
        info = env.step(f"<answer>{env.task.answer}</answer>")[4]
    assert info["status"] == "correct"


def test_state_is_json_and_guards_against_other_configs():
    env = make("forkgym/Inventory-v0", flaky_rate=0.5)
    env.reset(seed=3)
    env.step(env.unwrapped.gold_action())
    state = env.unwrapped.get_state()
    assert json.loads(json.dumps(state)) == state
    assert len(json.dumps(state)) < 20_000  # small: no deep copies of the env
    other = make("forkgym/Inventory-v0", flaky_rate=0.1).unwrapped
    with pytest.raises(ValueError, match="does not fit"):
        other.set_state(state)
    twin = make("forkgym/Inventory-v0", flaky_rate=0.5).unwrapped
    twin.set_state(state)
    assert twin.get_state() == state


def test_fork_after_turn_k_replays_identically_with_tool_randomness():
    env = make("forkgym/Inventory-v0", flaky_rate=0.4, max_turns=12).unwrapped
    env.reset(seed=17)
    actions, transitions = [], []
    done = False
    while not done:
        actions.append(env.gold_action())
        transitions.append(env.step(actions[-1]))
        done = transitions[-1][2] or transitions[-1][3]
    assert len(actions) >= 3
    statuses = [t[4]["status"] for t in transitions]
    for k in range(len(actions)):
        env.reset(seed=17)
        for action in actions[:k]:
            env.step(action)
        fork = env.fork()
        for action, expected in zip(actions[k:], transitions[k:], strict=True):
            for branch in (env, fork):
                obs, reward, terminated, truncated, info = branch.step(action)
                assert obs == expected[0] and reward == expected[1]
                assert (terminated, truncated) == expected[2:4]
                assert info["status"] == expected[4]["status"]
    assert statuses[-1] == "correct"


def test_branches_of_a_group_start_identically_and_diverge_only_by_action():
    group = [make("forkgym/Calculator-v0") for _ in range(4)]
    starts = [env.reset(seed=123)[0] for env in group]
    assert all(s == starts[0] for s in starts)
    outs = [
        env.step(action)[0]
        for env, action in zip(group, ["\\boxed{1}", "\\boxed{1}", "x", "x"], strict=True)
    ]
    assert outs[0] == outs[1] and outs[2] == outs[3] and outs[0] != outs[2]
