"""Every registered environment passes Gymnasium's checker and forkgym's."""

import subprocess
import sys

import gymnasium as gym
import pytest

from forkgym.envs import ENVIRONMENTS, check_llm_env
from forkgym.envs.checker import hashes_in_subprocess, reset_hashes
from tests.system import SANDBOXED_ENVS, env_params

ENV_IDS = env_params(list(ENVIRONMENTS))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_llm_env_passes(env_id):
    report = check_llm_env(env_id)
    assert set(report["checks"]) == {
        "gymnasium_check_env",
        "cross_process_determinism",
        "fork_and_state_equivalence",
        "make_vec_identical_starts",
        "gold_answers_correct",
        "held_out_by_content",
    }
    held_out = report["checks"]["held_out_by_content"]
    assert held_out["train_tasks"] > 0 and held_out["eval_tasks"] > 0
    assert report["checks"]["fork_and_state_equivalence"]["branch_points"] >= 4


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_thousand_seeds_hash_identically_in_two_processes(env_id):
    seeds = list(range(1000))
    first = hashes_in_subprocess(env_id, {}, seeds, "0")
    second = hashes_in_subprocess(env_id, {}, seeds, "4242")
    assert first == second
    rows = getattr(gym.make(env_id).unwrapped, "tasks", None)  # a dataset has few tasks
    if rows is not None:
        assert len(set(first)) == len(rows)  # 1,000 seeds reach every row
    else:
        assert len(set(first)) > 990  # and the seeds really select different tasks


def test_registry_and_make_return_the_env_itself():
    import forkgym.envs  # noqa: F401

    for env_id in ENVIRONMENTS:
        assert env_id.startswith("forkgym/")
        # making the Python tool needs no sandbox when it is told to run without one
        env = gym.make(
            env_id, **({"isolation": "unsafe-local"} if env_id in SANDBOXED_ENVS else {})
        )
        assert env is env.unwrapped  # fork(), get_state() and gold_action() are reachable
        assert callable(env.fork) and callable(env.get_state)


def test_make_works_in_a_fresh_interpreter_after_import():
    code = "import gymnasium as gym, forkgym.envs; gym.make('forkgym/Arithmetic-v0').reset(seed=1)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_reset_hashes_depend_on_kwargs():
    assert reset_hashes("forkgym/Arithmetic-v0", {"digits": 2}, [0]) != reset_hashes(
        "forkgym/Arithmetic-v0", {"digits": 3}, [0]
    )
