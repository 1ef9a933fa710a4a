"""forkgym as a PrimeIntellect `verifiers` (v1) environment: rows from seeded resets, scoring
by forkgym's verifier, a tool episode stepped by forkgym. Real `verifiers` objects throughout;
only the model's side of a rollout is scripted (a real one launches the chat harness through
`uv` and calls a model endpoint, neither of which exists here)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import json
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest

pytestmark = pytest.mark.integrations

# Not `pytest.importorskip("verifiers")`: from a checkout that finds forkgym's own
# `verifiers/` folder (which refuses the import) and would skip for the wrong reason. The
# distribution's metadata says whether PrimeIntellect's package is installed; past that, a
# failing import is a failure.
try:
    importlib.metadata.version("verifiers")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("needs forkgym[prime] (PrimeIntellect's verifiers)", allow_module_level=True)

prime = importlib.import_module("forkgym.integrations.prime")
vf = prime.vf

from verifiers.v1.agent import Segment  # noqa: E402
from verifiers.v1.graph import MessageNode  # noqa: E402

import forkgym.envs  # noqa: E402, F401

REPO = Path(__file__).resolve().parents[2]


def test_the_loader_gets_primeintellects_package_past_forkgyms_folder():
    assert (REPO / "verifiers" / "__init__.py").exists()  # the trap is there in a checkout
    assert "site-packages" in vf.__file__
    assert hasattr(vf, "Taskset") and hasattr(vf, "Env")
    # a fresh interpreter whose sys.path starts with the repository root, as `python -m
    # pytest` or a script in the checkout has it
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "import forkgym.integrations.prime as p; print(p.vf.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "site-packages" in out.stdout


def _first_messages(env_id: str, seed: int, **kwargs):
    env = gym.make(env_id, **kwargs)
    obs, info = env.reset(seed=seed)
    return obs["messages"], info["task_id"], env


@pytest.mark.parametrize("env_id", ["forkgym/Arithmetic-v0", "forkgym/Calculator-v0"])
def test_rows_are_forkgyms_seeded_first_observations(env_id):
    env = prime.load_environment(env_id, num_train=4, num_eval=2, seed=30)
    assert isinstance(env, vf.Env) and isinstance(env, prime.ForkgymEnv)
    rows = list(env.taskset)
    assert len(rows) == 4
    for i, task in enumerate(rows):
        messages, task_id, local = _first_messages(env_id, 30 + i)
        chat = [{"role": "user", "content": task.data.prompt}]
        if task.data.system_prompt is not None:
            chat.insert(0, {"role": "system", "content": task.data.system_prompt})
        assert chat == list(messages)
        assert task.data.id == task_id
        assert task.data.info == {
            "env": env_id,
            "env_kwargs": {},
            "seed": 30 + i,
            "task_id": task_id,
            "split": "train",
        }
        assert task.data.answer == local.task.answer
    evals = list(
        prime.load_environment(env_id, num_train=4, num_eval=2, seed=30, split="eval").taskset
    )
    assert [t.data.info["seed"] for t in evals] == [34, 35]


def test_env_kwargs_reach_the_env_and_the_rows():
    env = prime.load_environment("forkgym/Arithmetic-v0", num_train=1, seed=2, digits=4)
    (task,) = list(env.taskset)
    messages, task_id, _ = _first_messages("forkgym/Arithmetic-v0", 2, digits=4)
    assert task.data.prompt == messages[-1]["content"]
    assert task.data.info["env_kwargs"] == {"digits": 4} and task.data.id == task_id


def test_bad_arguments_fail_at_load_time():
    with pytest.raises(gym.error.Error):
        prime.load_environment("forkgym/NoSuchEnv-v0")
    with pytest.raises(ValueError, match="JSON"):
        prime.load_environment("forkgym/Arithmetic-v0", verifier=object())


def _trace(task, replies, info=None):
    nodes = [MessageNode(message=vf.UserMessage(content=task.data.prompt))]
    for reply in replies:
        nodes.append(
            MessageNode(
                parent=len(nodes) - 1, message=vf.AssistantMessage(content=reply), sampled=True
            )
        )
    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
        info=dict(info or {}),
    )


def _scored(task, replies, info=None):
    trace = _trace(task, replies, info)
    asyncio.run(task.score(trace))  # verifiers' own scoring: the task's @reward and @metric
    return trace


def _metrics(status: str) -> dict[str, float]:
    names = ["correct", "incorrect", "invalid", "truncated", "infra_failure"]
    return {name: float(name == status) for name in names}


def test_the_rubric_grades_with_forkgym_and_keeps_invalid_apart():
    env = prime.load_environment("forkgym/Arithmetic-v0", num_train=3, seed=40)
    for task in env.taskset:
        _, _, local = _first_messages("forkgym/Arithmetic-v0", task.data.info["seed"])
        gold = _scored(task, [local.gold_action()])
        wrong = _scored(task, [r"so it is $\boxed{" + task.data.answer + "7}$"])
        unboxed = _scored(task, ["no idea"])
        assert (gold.reward, gold.metrics) == (1.0, _metrics("correct"))
        assert (wrong.reward, wrong.metrics) == (0.0, _metrics("incorrect"))
        assert (unboxed.reward, unboxed.metrics) == (0.0, _metrics("invalid"))
        assert gold.info["forkgym"]["status"] == "correct"


def test_a_recorded_infrastructure_failure_is_flagged_not_counted_wrong():
    (task,) = list(prime.load_environment("forkgym/Arithmetic-v0", num_train=1).taskset)
    verdict = {"status": "timeout", "reward": None, "extracted": None}
    trace = _scored(task, [r"\boxed{1}"], info={"forkgym": verdict})
    assert trace.rewards["forkgym_reward"].score == 0.0
    assert trace.metrics == _metrics("infra_failure")


def test_a_tool_episode_answers_gold_calls_like_forkgym():
    (task,) = list(prime.load_environment("forkgym/Calculator-v0", num_train=1, seed=9).taskset)
    _, _, local = _first_messages("forkgym/Calculator-v0", 9)
    call = local.gold_action()
    obs, *_ = local.step(call)
    answer = local.gold_action()
    episode = prime.ForkgymEpisode(task.data.info)
    try:
        tool = episode.respond(call)
        assert tool == [m for m in obs["messages"][-1:]] and tool[0]["role"] == "tool"
        assert not episode.done
        assert episode.respond(answer) is None
        assert episode.verdict["status"] == "correct" and episode.verdict["reward"] == 1.0
    finally:
        episode.close()
    # scoring a finished tool conversation offline replays it through forkgym
    assert _scored(task, [call, answer]).reward == 1.0
    assert _scored(task, [call]).metrics == _metrics("truncated")  # stopped before answering


class _ScriptedAgent:
    """Stands in for the `agent` seat of an episode: `interaction(task)` yields an object with
    `turn()` and a live `vf.Trace`, as `verifiers`' Agent does, and closing it scores the
    trace through the task, as a finished rollout does. The replies are scripted."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.user_turns: list[str] = []

    @asynccontextmanager
    async def interaction(self, task):
        trace = _trace(task, [])
        replies = iter(self.replies)
        agent = self

        class Interaction:
            def __init__(self):
                self.trace = trace

            async def turn(self, message=None):
                if message is not None:
                    agent.user_turns.append(message)
                    trace.nodes.append(MessageNode(message=vf.UserMessage(content=message)))
                reply = next(replies, None)
                if reply is None:
                    trace.stop("max_turns")
                    return Segment(messages=[], terminated=True)
                node = MessageNode(message=vf.AssistantMessage(content=reply), sampled=True)
                trace.nodes.append(node)
                return Segment(messages=[node.message])

        yield Interaction()
        await task.score(trace)
        self.trace = trace


def _play(env, task, replies):
    agent = _ScriptedAgent(replies)
    asyncio.run(env.run(task, SimpleNamespace(agent=agent)))
    return agent


def test_the_env_steps_forkgym_with_each_reply_until_its_episode_ends():
    env = prime.load_environment("forkgym/Calculator-v0", num_train=2, seed=50)
    for task in env.taskset:
        _, _, local = _first_messages("forkgym/Calculator-v0", task.data.info["seed"])
        call = local.gold_action()
        obs, *_ = local.step(call)
        answer = local.gold_action()
        # a third reply is never asked for: forkgym's episode ended with the answer
        played = _play(env, task, [call, answer, "unused"])
        assert played.user_turns == [obs["messages"][-1]["content"]]  # the tool's output
        assert played.trace.reward == 1.0 and played.trace.metrics == _metrics("correct")
        assert played.trace.info["forkgym"]["status"] == "correct"
        cut = _play(env, task, [call])  # the agent's run ends before an answer
        assert cut.trace.metrics == _metrics("truncated") and cut.trace.reward == 0.0


def test_a_single_turn_env_takes_one_reply():
    env = prime.load_environment("forkgym/Arithmetic-v0", num_train=1, seed=3)
    (task,) = list(env.taskset)
    _, _, local = _first_messages("forkgym/Arithmetic-v0", 3)
    played = _play(env, task, [local.gold_action(), "unused"])
    assert played.user_turns == [] and played.trace.reward == 1.0


# -- PrimeIntellect's own tools, in fresh processes (issue 26: `vf-validate forkgym-prime`
# failed with "taskset 'forkgym-prime' not found (tried to import 'forkgym_prime')", and with
# an alias every task came back unchecked: there was no gold check)


def test_the_gold_check_plays_forkgyms_gold_actions(monkeypatch):
    for env_id in ("forkgym/Arithmetic-v0", "forkgym/Calculator-v0"):
        for task in prime.load_environment(env_id, num_train=3, seed=70).taskset:
            assert prime.gold_check(task.data.info) is True
            assert asyncio.run(task.validate(None)) is True
    # a gold action that is wrong fails the check: it grades, it does not just run
    (task,) = list(prime.load_environment("forkgym/Arithmetic-v0", num_train=1).taskset)
    env_cls = type(gym.make("forkgym/Arithmetic-v0").unwrapped)
    monkeypatch.setattr(env_cls, "gold_action", lambda self: r"\boxed{-1}")
    assert prime.gold_check(task.data.info) is False


def test_verifiers_imports_the_taskset_by_its_id_in_a_fresh_process(tmp_path):
    code = (
        "from verifiers.v1.utils.loaders import import_taskset, taskset_class, "
        "environment_class\n"
        "print(import_taskset('forkgym-prime').__name__, taskset_class('forkgym-prime').__name__,"
        " environment_class('forkgym-prime').__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["forkgym_prime", "ForkgymTaskset", "ForkgymEnv"]


@pytest.mark.parametrize(("env_id", "n"), [("forkgym/Arithmetic-v0", 4), ("forkgym/Calculator-v0", 3)])  # fmt: skip
def test_vf_validate_finds_and_checks_every_task(tmp_path, env_id, n):
    vf_validate = Path(sys.executable).parent / "vf-validate"
    assert vf_validate.exists(), "verifiers installs the vf-validate command"
    cmd = [str(vf_validate), "forkgym-prime", "--taskset.env", env_id,
           "--taskset.num-train", str(n), "--runtime.type", "subprocess", "--no-rich",
           "-o", "out", "--run.name", "check"]  # fmt: skip
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "out" / "check" / "summary.json").read_text())
    assert summary["total"] == n and summary["outcomes"]["valid"] == n, summary
    assert summary["checks"]["gold"]["valid"] == n  # gold_action() played, graded correct
    assert summary["checks"]["noop"]["valid"] == n  # an untouched task does not pass
