"""Tool envs: bad actions never raise out of step, and hostile code leaves the machine alone."""

import os
import time
from pathlib import Path

import gymnasium as gym
import pytest

import forkgym.envs  # noqa: F401

CALL = '<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'

BAD_TOOL_ACTIONS = {
    "malformed json": (
        '<tool_call>{"name": "calculator", "arguments": {"expression": }</tool_call>',
        "tool_parse_error",
    ),
    "unclosed call": ('<tool_call>{"name": "calculator"', "tool_parse_error"),
    "name missing": ('<tool_call>{"arguments": {}}</tool_call>', "tool_parse_error"),
    "arguments not an object": (
        '<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>',
        "tool_parse_error",
    ),
    "unknown tool": (CALL.format(name="rm_rf", args="{}"), "tool_error"),
    "wrong argument type": (
        CALL.format(name="calculator", args='{"expression": 12}'),
        "tool_error",
    ),
    "missing argument": (CALL.format(name="calculator", args="{}"), "tool_error"),
    "extra argument": (
        CALL.format(name="calculator", args='{"expression": "1", "x": 2}'),
        "tool_error",
    ),
    "division by zero": (
        CALL.format(name="calculator", args='{"expression": "1/0"}'),
        "tool_error",
    ),
    "power tower": (CALL.format(name="calculator", args='{"expression": "9^9^9^9"}'), "tool_error"),
    "code injection": (
        CALL.format(name="calculator", args="{\"expression\": \"__import__('os').system('ls')\"}"),
        "tool_error",
    ),
    "too many calls": (
        "\n".join([CALL.format(name="calculator", args='{"expression": "1"}')] * 12),
        "tool_error",
    ),
    "double-encoded arguments": (
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"2*3\\"}"}</tool_call>',
        "tool_ok",
    ),
}


@pytest.mark.parametrize("name", list(BAD_TOOL_ACTIONS))
def test_bad_tool_calls_are_statuses_and_the_episode_continues(name):
    action, status = BAD_TOOL_ACTIONS[name]
    env = gym.make("forkgym/Calculator-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["status"] == status
    assert not terminated and not truncated and reward == 0.0
    assert obs["messages"][-1]["role"] == "tool"
    if status != "tool_ok":
        assert obs["messages"][-1]["content"].startswith("error:")
    # the episode goes on to a correct answer
    env.step(
        env.unwrapped.format_call("calculator", expression=env.unwrapped.task.data["expression"])
    )
    assert env.step(env.unwrapped.gold_action())[4]["status"] == "correct"


def test_tag_parser_env_round_trip():
    env = gym.make("forkgym/Calculator-v0", tool_parser="tags")
    env.reset(seed=3)
    action = env.unwrapped.gold_action()
    assert action.startswith("<calculator>")
    obs, *_, info = env.step(action)
    assert (
        info["status"] == "tool_ok" and obs["messages"][-1]["content"] == env.unwrapped.task.answer
    )
    assert "<calculator>" in obs["messages"][0]["content"]  # the system prompt teaches the format


def _children() -> set[int]:
    me = str(os.getpid())
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            kids.add(int(stat.parent.name))
    return kids


HOSTILE_CODE = {
    "loops forever": ("while True:\n    pass", "tool_timeout", "cpu limit"),
    "sleeps forever": ("import time\ntime.sleep(3600)", "tool_timeout", "wall limit"),
    "allocates 10 GB": ("x = bytearray(10 * 2**30)\nprint(len(x))", "tool_error", "MemoryError"),
    "forks": ("import os\nos.fork()\nprint('forked')", "tool_error", "os.fork is not allowed"),
    "starts a process": (
        "import subprocess\nsubprocess.run(['sleep', '100'])",
        "tool_error",
        "not allowed",
    ),
    "opens a socket": (
        "import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=2)",
        "tool_error",
        "not allowed",
    ),
    "writes outside scratch": (  # (/tmp is the scratch tmpfs: the sandbox's own)
        "open('/var/tmp/forkgym-escaped.txt', 'w').write('x')",
        "tool_error",
        "outside the scratch",
    ),
    "kills its parent": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "tool_error",
        "not allowed",
    ),
    "imports ctypes": ("import ctypes", "tool_error", "not allowed"),
    "floods stdout": ("while True:\n    print('y' * 10000)", "tool_error", "output limit"),
    "raises": ("raise ValueError('nope')", "tool_error", "ValueError: nope"),
}


@pytest.mark.sandbox
@pytest.mark.parametrize("name", list(HOSTILE_CODE))
def test_hostile_python_ends_as_a_status_and_leaves_nothing_behind(name):
    code, status, evidence = HOSTILE_CODE[name]
    # the wall limit is the one that must stop a sleeper; for the rest it is far off, so that
    # on a busy machine (a CPU-second may take several seconds there) it cannot come first
    wall = 3.0 if name == "sleeps forever" else 20.0
    env = gym.make("forkgym/PythonTool-v0", cpu_seconds=1, wall_seconds=wall, memory_mb=256)
    env.reset(seed=0)
    before = _children()
    start = time.perf_counter()
    obs, _, terminated, truncated, info = env.step(env.unwrapped.format_call("python", code=code))
    assert time.perf_counter() - start < wall + 7
    assert info["status"] == status, obs["messages"][-1]["content"]
    assert evidence in obs["messages"][-1]["content"]
    assert not terminated and not truncated
    assert _children() <= before  # no stray process survives the call
    assert not Path("/var/tmp/forkgym-escaped.txt").exists()
    env.step(env.unwrapped.format_call("python", code=env.unwrapped.task.data["gold_code"]))
    assert env.step(env.unwrapped.gold_action())[4]["status"] == "correct"


@pytest.mark.sandbox
def test_python_tool_is_deterministic_across_branches():
    env = gym.make("forkgym/PythonTool-v0")
    env.reset(seed=8)
    call = env.unwrapped.format_call(
        "python", code="import random\nprint(random.random(), hash('abc'))"
    )
    fork = env.unwrapped.fork()
    assert env.step(call)[0] == fork.step(call)[0]


@pytest.mark.slow
@pytest.mark.sandbox
def test_python_gold_programs_solve_every_family():
    env = gym.make("forkgym/PythonTool-v0")
    families = set()
    for seed in range(30):
        env.reset(seed=seed)
        env.step(env.unwrapped.gold_action())
        info = env.step(env.unwrapped.gold_action())[4]
        assert info["status"] == "correct", env.unwrapped.task
        families.add(env.unwrapped.task.family)
    assert families == {"digit_sum", "primes", "fibonacci", "divisors", "collatz"}


@pytest.mark.parametrize("style", ["worked", "answer"])
def test_calculator_gold_trajectory_in_each_solution_style(style):
    env = gym.make("forkgym/Calculator-v0", digits=2, terms=2, solution_style=style)
    env.reset(seed=5)
    _, reward, terminated, _, info = env.step(env.unwrapped.gold_action())
    assert (reward, terminated, info["status"]) == (0.0, False, "tool_ok")
    final = env.unwrapped.gold_action()
    answer = env.unwrapped.task.answer
    assert f"$\\boxed{{{answer}}}$" in final
    assert (final == f"$\\boxed{{{answer}}}$") == (style == "answer")
    _, reward, terminated, _, info = env.step(final)
    assert (reward, terminated, info["status"]) == (1.0, True, "correct")
    with pytest.raises(ValueError, match="solution_style"):
        gym.make("forkgym/Calculator-v0", solution_style="essay")


def test_tool_messages_answer_openai_shaped_calls():
    """hermes envs report each call in OpenAI's shape; each tool message names the call it
    answers; a call the parser could not read gets a tool message without an id."""
    env = gym.make("forkgym/Inventory-v0")
    obs, _ = env.reset(seed=2)
    obs, _, _, _, info = env.step(env.unwrapped.gold_action())
    calls = obs["messages"][-1 - len(info["tool_calls"])]["tool_calls"]
    answers = obs["messages"][-len(info["tool_calls"]) :]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    assert [a["name"] for a in answers] == [c["function"]["name"] for c in calls]
    assert all(c["type"] == "function" for c in calls)
    assert env.observation_space.contains(obs)
    fork = env.unwrapped.fork()  # the ids are part of the state, so a fork carries them
    assert fork.get_state()["messages"] == env.unwrapped.get_state()["messages"]
    env.reset(seed=2)
    obs, *_ = env.step('<tool_call>\n{"name": "search_items", "arguments": \n</tool_call>')
    assert "tool_calls" not in obs["messages"][-2] and "tool_call_id" not in obs["messages"][-1]
    assert env.observation_space.contains(obs)


def test_tags_envs_keep_calls_in_the_text_only():
    env = gym.make("forkgym/Calculator-v0", tool_parser="tags")
    env.reset(seed=3)
    obs, *_ = env.step(env.unwrapped.gold_action())
    assert "tool_calls" not in obs["messages"][-2] and "tool_call_id" not in obs["messages"][-1]


def test_call_tool_runs_a_tool_and_call_is_a_deprecated_alias():
    env = gym.make("forkgym/Calculator-v0")
    env.reset(seed=0)
    result = env.unwrapped.call_tool("calculator", expression="6*7")
    assert (result.content, result.status) == ("42", "tool_ok")
    assert env.unwrapped.call_tool("calculator", expression=6).status == "tool_error"
    with pytest.warns(DeprecationWarning, match="format_call"):
        text = env.unwrapped.call("calculator", expression="1+1")
    assert text == env.unwrapped.format_call("calculator", expression="1+1")
