"""`forkgym launch` on a local Ray cluster started by the test: one learner, one generation
worker and one verifier replica train for real, grade over HTTP, and are gone afterwards."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

pytestmark = [pytest.mark.integrations, pytest.mark.slow]

ray = pytest.importorskip("ray", reason="needs forkgym[ray]")

from forkgym.agents.run.config import ConfigError, TrainConfig  # noqa: E402
from forkgym.agents.run.runlog import read_metrics  # noqa: E402
from forkgym.integrations.ray import Layout, launch  # noqa: E402
from tests.conftest import WARM_ENV_KWARGS  # noqa: E402


@pytest.fixture
def ray_tmp():
    """Ray's session folder: short, since its Unix sockets' paths must fit in 107 bytes."""
    folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def local_cluster(ray_tmp):
    """A fresh single-node cluster (logical CPUs: one per part, not the machine's two)."""
    ray.init(num_cpus=4, include_dashboard=False, namespace="forkgym", _temp_dir=ray_tmp,
             log_to_driver=False)  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


def _servers() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if "forkgym serve" in line]


def test_a_short_run_on_a_local_cluster(tmp_path, warm_model_dir, local_cluster):
    out = tmp_path / "run"
    config = TrainConfig(
        model=str(warm_model_dir), env="forkgym/Arithmetic-v0", env_kwargs=WARM_ENV_KWARGS,
        steps=2, prompts_per_step=2, k=4, max_new_tokens=12, lr=1e-3, eval_every=2,
        eval_episodes=4, eval_k=0, threads=1, out=str(out), progress=False,
    )  # fmt: skip
    last = launch(config, Layout(verifier_workers=1))
    assert last["tokens_trained"] > 0 and last["weight_version"] == 2
    # the learner generated on the worker: the weights were pushed to it after each update
    assert last["sync/bytes"] > 0 and "drift/logprob_abs_max" in last
    assert last["drift/logprob_abs_max"] < 1e-4  # the worker's copy equals the learner's weights
    metrics = read_metrics(out)
    assert [m["step"] for m in metrics] == [0, 1, 2] and "eval_accuracy" in metrics[-1]
    # every episode was graded by the replica over HTTP and recorded in its store
    with sqlite3.connect(out / "verifier.db") as db:
        recorded = db.execute(
            "select count(*) from verification_outcomes where run_id = 'run'"
        ).fetchone()[0]
    train_episodes = sum(m.get("episodes", 0) for m in metrics)
    assert recorded >= train_episodes == 2 * 2 * 4
    saved = TrainConfig.load(out / "config.yaml")  # the run's config loads again (the plugin)
    assert saved.backend == "ray" and len(saved.verifier_url) == 1
    # torn down: every CPU the parts held is free again, and no server process is left
    deadline = time.monotonic() + 60  # actors die asynchronously after ray.kill
    while ray.available_resources().get("CPU") != 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 4
    assert _servers() == []


def test_two_learner_ranks_form_one_process_group(tmp_path, warm_model_dir, local_cluster):
    """Two learner actors join one gloo group (rank 0's node and port) and share the
    generation worker, grading on a replica of two uvicorn processes; rank 0 alone writes
    the run."""
    out = tmp_path / "dp"
    config = TrainConfig(
        model=str(warm_model_dir), env="forkgym/Arithmetic-v0", env_kwargs=WARM_ENV_KWARGS,
        estimator="grpo", steps=2, prompts_per_step=2, k=2, max_new_tokens=8, eval_every=0,
        threads=1, out=str(out), progress=False,
    )  # fmt: skip
    cpus = {"learner": 0.5, "generation": 0.5, "verifier": 0.5}
    last = launch(config, Layout(learners=2, verifier_processes=2, cpus=cpus))
    assert last["data_parallel_ranks"] == 2 and last["tokens_trained"] > 0
    assert [m["step"] for m in read_metrics(out)] == [1, 2]


def test_the_command_line_starts_and_stops_its_own_cluster(tmp_path, warm_model_dir, ray_tmp):
    out = tmp_path / "cli"
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "forkgym", "launch", "--model", str(warm_model_dir), "--env",
         "Arithmetic-v0", "--steps", "1", "--out", str(out), "prompts_per_step=2", "k=2",
         "max_new_tokens=8", "eval_every=0", "threads=1",
         *(f"env_kwargs.{k}={v if v is not None else 'null'}" for k, v in WARM_ENV_KWARGS.items())],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["run"] == str(out)
    assert [m["step"] for m in read_metrics(out)] == [1]
    assert _servers() == []


def test_several_replicas_need_a_shared_database():
    with pytest.raises(ValueError, match="shared database"):
        Layout(verifier_replicas=2).check()
    with pytest.raises(ConfigError, match="backend"):
        TrainConfig(backend="no-such-backend")
