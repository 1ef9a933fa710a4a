"""forkgym envs served by OpenEnv's own server and driven by OpenEnv's own clients, over a
real socket: seeded starts, rewards, errors, forks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import gymnasium as gym
import httpx
import pytest

pytestmark = pytest.mark.integrations

openenv = pytest.importorskip("openenv.core", reason="needs forkgym[openenv]")
uvicorn = pytest.importorskip("uvicorn")

import forkgym.envs  # noqa: E402, F401
from forkgym.integrations.openenv import (  # noqa: E402
    ForkgymAction,
    ForkgymEnvClient,
    create_app,
)


class _Served:
    """uvicorn serving one app in a thread on a free loopback port."""

    def __init__(self, app) -> None:
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def arithmetic() -> Iterator[str]:
    served = _Served(create_app("forkgym/Arithmetic-v0"))
    yield served.url
    served.stop()


@pytest.fixture(scope="module")
def calculator() -> Iterator[str]:
    served = _Served(create_app("forkgym/Calculator-v0", max_sessions=4))
    yield served.url
    served.stop()


def _generic(url: str):
    return openenv.GenericEnvClient(base_url=url).sync()


def _local(env_id: str, seed: int):
    env = gym.make(env_id)
    obs, info = env.reset(seed=seed)
    return env, obs, info


def test_a_seeded_reset_is_forkgyms_first_observation(arithmetic):
    _env, obs, info = _local("forkgym/Arithmetic-v0", 11)
    with _generic(arithmetic) as client:
        result = client.reset(seed=11)
        again = client.reset(seed=11)
        other = client.reset(seed=12)
    assert result.observation["messages"] == list(obs["messages"])
    assert result.observation["prompt"] == obs["prompt"]
    assert result.observation["task_id"] == info["task_id"]
    assert result.done is False and result.reward is None
    assert again.observation == result.observation  # same seed, same start, any session
    assert other.observation["task_id"] != info["task_id"]


def test_gold_scores_one_wrong_zero_unboxed_invalid(arithmetic):
    env, _obs, _info = _local("forkgym/Arithmetic-v0", 5)
    gold = env.gold_action()
    with _generic(arithmetic) as client:
        client.reset(seed=5)
        right = client.step({"message": gold})
        client.reset(seed=5)
        wrong = client.step({"message": r"so the answer is $\boxed{" + env.task.answer + "1}$"})
        client.reset(seed=5)
        unboxed = client.step({"message": "I am not sure."})
    assert (right.reward, right.done) == (1.0, True)
    assert right.observation["outcome"]["status"] == "correct"
    assert right.observation["status"] == "correct"
    assert right.observation["messages"][-1] == {"role": "assistant", "content": gold}
    assert (wrong.reward, wrong.done, wrong.observation["outcome"]["status"]) == (
        0.0,
        True,
        "incorrect",
    )
    assert (unboxed.reward, unboxed.done, unboxed.observation["outcome"]["status"]) == (
        0.0,
        True,
        "invalid",
    )


def test_reset_by_task_id_rebuilds_the_task(arithmetic):
    _, obs, info = _local("forkgym/Arithmetic-v0", 21)
    with _generic(arithmetic) as client:
        result = client.reset(task_id=info["task_id"])
    assert result.observation["messages"] == list(obs["messages"])


def test_malformed_actions_get_a_clear_error_and_the_session_goes_on(arithmetic):
    env, _, _ = _local("forkgym/Arithmetic-v0", 3)
    with _generic(arithmetic) as client:
        with pytest.raises(RuntimeError, match="call reset"):  # stepping before any reset
            client.step({"message": "hello"})
        client.reset(seed=3)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # no `message` field
            client.step({"text": "hello"})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # not a string
            client.step({"message": 42})
        with pytest.raises(RuntimeError, match="unknown reset arguments"):
            client.reset(seed=3, difficulty=9)
        # the same session still serves: the episode was not consumed by the bad actions
        result = client.step({"message": env.gold_action()})
        assert (result.reward, result.done) == (1.0, True)
        with pytest.raises(RuntimeError, match="episode is over"):
            client.step({"message": env.gold_action()})
    # HTTP's step route validates the action schema the same way, with the details
    response = httpx.post(f"{arithmetic}/step", json={"action": {"text": "hi"}}, timeout=10)
    assert response.status_code == 422
    assert "message" in response.text
    assert httpx.get(f"{arithmetic}/health", timeout=10).status_code == 200


def test_a_tool_episode_through_the_typed_client_and_a_fork_from_its_state(calculator):
    env, obs, info = _local("forkgym/Calculator-v0", 8)
    call = env.gold_action()
    env.step(call)
    answer = env.gold_action()
    with ForkgymEnvClient(base_url=calculator).sync() as client:
        first = client.reset(seed=8)
        assert first.observation.messages == list(obs["messages"])
        assert first.observation.task_id == info["task_id"]
        middle = client.step(ForkgymAction(message=call))
        assert (middle.done, middle.reward, middle.observation.status) == (False, 0.0, "tool_ok")
        assert middle.observation.messages[-1]["role"] == "tool"
        # the call in OpenAI's shape, and the tool message naming the call it answers
        called = middle.observation.messages[-2]["tool_calls"][0]
        assert called["function"]["name"] == "calculator"
        assert middle.observation.messages[-1]["tool_call_id"] == called["id"]
        state = client.state()
        assert (state.task_id, state.step_count, state.done) == (info["task_id"], 1, False)
        # forkgym's snapshot holds the same conversation the observation shows
        assert state.forkgym["messages"] == middle.observation.messages
        last = client.step(ForkgymAction(message=answer))
        assert (last.done, last.reward, last.observation.outcome["status"]) == (
            True,
            1.0,
            "correct",
        )
    # another session continues from the snapshot: a fork of the episode after the tool call
    with ForkgymEnvClient(base_url=calculator).sync() as client:
        resumed = client.reset(state=state.forkgym)
        assert resumed.observation.messages == middle.observation.messages
        assert resumed.observation.turn == 1
        branch = client.step(ForkgymAction(message=r"$\boxed{0}$"))
        assert (branch.done, branch.reward, branch.observation.outcome["status"]) == (
            True,
            0.0,
            "incorrect",
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_documented_uvicorn_factory_launch(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "FORKGYM_OPENENV_ENV": "forkgym/Arithmetic-v0",
        "FORKGYM_OPENENV_KWARGS": '{"digits": 2}',
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "forkgym.integrations.openenv:app_from_environ",
            "--port",
            str(port),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"server did not start: {proc.stdout.read()}")
            time.sleep(0.1)
        local = gym.make("forkgym/Arithmetic-v0", digits=2)
        obs, _ = local.reset(seed=4)
        with _generic(url) as client:
            assert client.reset(seed=4).observation["messages"] == list(obs["messages"])
            assert client.step({"message": local.gold_action()}).reward == 1.0
    finally:
        proc.terminate()
        proc.wait(30)
