"""The Python tool on a remote sandbox service (SandboxFusion's /run_code shape), against a
real ``forkgym sandbox serve`` process on a loopback port."""

from __future__ import annotations

import subprocess
import sys
import time

import gymnasium as gym
import httpx
import pytest

import forkgym.envs  # noqa: F401
from forkgym.envs.sandbox import SandboxLimits
from forkgym.envs.sandbox.remote import run_remote

pytestmark = pytest.mark.sandbox
READY = "forkgym sandbox listening on "


@pytest.fixture(scope="module")
def sandbox_url():
    cmd = [sys.executable, "-m", "forkgym", "sandbox", "serve", "--port", "0", "--wall-seconds", "4"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    url = None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if line.startswith(READY):
            url = line[len(READY) :].strip()
            break
        if not line and proc.poll() is not None:
            pytest.fail(f"sandbox serve exited: {proc.stderr.read()}")  # type: ignore[union-attr]
    assert url is not None
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_the_tool_runs_remotely_and_solves_a_task(sandbox_url):
    env = gym.make("forkgym/PythonTool-v0", sandbox_url=sandbox_url)
    env.reset(seed=3)
    info = env.step(env.unwrapped.gold_action())[4]
    assert info["status"] == "tool_ok"
    assert env.step(env.unwrapped.gold_action())[4]["status"] == "correct"


def test_remote_statuses_stay_apart(sandbox_url):
    limits = SandboxLimits(wall_seconds=2.0)
    assert run_remote("print(6 * 7)", limits, sandbox_url).stdout == "42\n"
    assert run_remote("raise ValueError('no')", limits, sandbox_url).status == "tool_error"
    slow = run_remote("import time\ntime.sleep(30)", limits, sandbox_url)
    assert slow.status == "tool_timeout" and slow.reason == "wall_limit"
    hook_off = "import sys\nm = sys.modules['__main__']\nm._PROCESS_EVENTS.clear()\n"
    who = run_remote(hook_off + "import os\nos.system('/usr/bin/id')", limits, sandbox_url)
    assert "uid=0(" not in who.stdout  # the OS walls hold on the server too
    gone = run_remote("print(1)", limits, "http://127.0.0.1:9")  # nothing listens there
    assert gone.status == "tool_error" and gone.reason == "sandbox_unavailable"


def test_the_service_refuses_what_it_does_not_run(sandbox_url):
    r = httpx.post(f"{sandbox_url}/run_code", json={"code": "x", "language": "cpp"})
    assert r.status_code == 422
    assert httpx.get(f"{sandbox_url}/healthz").json()["isolation"] == "bwrap"
