"""forkgym/CheckedSteps-v0: the chain holds only if every report is right, and the state says so."""

import gymnasium as gym
import pytest

import forkgym.envs  # noqa: F401 - registers the environments
from forkgym.envs import check_llm_env

ID = "forkgym/CheckedSteps-v0"


def make(**kwargs):
    env = gym.make(ID, **kwargs)
    return env, env.unwrapped


def play(env, actions):
    out = None
    for action in actions:
        out = env.step(action)
    return out


@pytest.mark.parametrize(("steps", "digits"), [(1, 1), (3, 2), (6, 3)])
def test_the_gold_trajectory_reports_every_step_then_answers(steps, digits):
    env, raw = make(steps=steps, digits=digits)
    for seed in range(5):
        env.reset(seed=seed)
        values = raw.task.data["values"]
        assert len(values) == steps and all(v >= 0 for v in values)
        assert raw.task.answer == str(values[-1])
        turns = 0
        while True:
            _, reward, terminated, truncated, info = env.step(raw.gold_action())
            turns += 1
            if terminated or truncated:
                break
            assert info["status"] == "tool_ok"
        assert info["status"] == "correct" and reward == 1.0 and turns == steps + 1


def test_a_wrong_report_breaks_the_chain_and_feedback_says_so():
    env, raw = make(steps=3)
    env.reset(seed=1)
    right = raw.task.data["values"][0]
    obs, *_ = env.step(raw.format_call("submit", value=right + 1))
    true_next = f"{right} {' '.join(map(str, raw.task.data['operations'][1]))}"
    assert obs["messages"][-1]["content"] == f"Incorrect: the chain is broken. Next: {true_next}"
    for value in raw.task.data["values"][1:]:
        env.step(raw.format_call("submit", value=value))
    _, reward, terminated, _, info = env.step(raw.task.solution)
    assert terminated and info["status"] == "incorrect" and reward == 0.0
    assert info["outcome"].details["chain"] == "a reported result was wrong"


def test_without_feedback_a_wrong_report_reads_like_a_right_one():
    texts = []
    for offset in (0, 1):
        env, raw = make(steps=2, feedback=False)
        env.reset(seed=4)
        obs, *_ = env.step(raw.format_call("submit", value=raw.task.data["values"][0] + offset))
        texts.append(obs["messages"][-1]["content"])
        env.step(raw.format_call("submit", value=raw.task.data["values"][1]))
        info = env.step(raw.task.solution)[4]
        assert info["status"] == ("correct" if offset == 0 else "incorrect")
    assert texts[0] == texts[1] and texts[0].startswith("Recorded. Next: ")


def test_a_right_box_without_the_reports_is_incorrect():
    env, raw = make(steps=3)
    env.reset(seed=2)
    env.step(raw.format_call("submit", value=raw.task.data["values"][0]))
    info = env.step(raw.task.solution)[4]
    assert info["status"] == "incorrect"
    assert info["outcome"].details["chain"] == "not every operation was reported"


def test_bad_reports_are_tool_errors_and_the_episode_goes_on():
    env, raw = make(steps=1, max_turns=5)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(raw.format_call("submit", value="12"))
    assert info["status"] == "tool_error" and not terminated and reward == 0.0
    env.step(raw.gold_action())
    obs, *_, info = env.step(raw.format_call("submit", value=3))  # one report too many
    assert info["status"] == "tool_error" and "every operation" in obs["messages"][-1]["content"]
    assert env.step(raw.gold_action())[4]["status"] == "correct"


def test_a_fork_mid_chain_carries_the_broken_chain_and_continues_identically():
    env, raw = make(steps=3)
    env.reset(seed=7)
    env.step(raw.format_call("submit", value=-5))  # broken at step 1
    twin = raw.fork()
    for e in (raw, twin):
        for value in e.task.data["values"][1:]:
            e.step(e.format_call("submit", value=value))
    assert raw._observation() == twin._observation()
    assert raw.step(raw.task.solution)[4]["status"] == twin.step(twin.task.solution)[4]["status"] == "incorrect"  # fmt: skip


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="steps"):
        gym.make(ID, steps=0)
    with pytest.raises(ValueError, match="digits"):
        gym.make(ID, digits=9)


def test_the_suite_checks_pass_without_feedback_and_with_long_chains():
    check_llm_env(ID, feedback=False, steps=5, seeds=2, cross_process_seeds=2, vector_envs=2)
