"""`forkgym bench --ray ADDRESS` against a real local Ray cluster the test starts: the command
runs in its own process, joins the cluster by address, places every run of the sweeps' grids
and every reported run as a task, and its runs and choices equal the same benchmark's made here
without Ray."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

pytestmark = [pytest.mark.integrations, pytest.mark.slow]

ray = pytest.importorskip("ray", reason="needs forkgym[ray]")

from forkgym.agents.run.runlog import read_metrics  # noqa: E402
from forkgym.bench import PRESETS, run_bench  # noqa: E402
from forkgym.bench.presets import narrow  # noqa: E402
from forkgym.bench.report import check_report  # noqa: E402

METHODS = ["rloo", "sft"]
TIMING = ("time/", "tokens_per_s", "group_span_s_mean", "barrier_idle_s")


@pytest.fixture
def cluster_address():
    """A fresh single-node cluster; its address, which another process can join."""
    folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Unix socket paths must be short
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=folder, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def _metrics(folder):
    return [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in read_metrics(folder)]


def test_the_grid_and_reported_runs_run_as_tasks_and_equal_the_local_ones(
    tmp_path, cluster_address
):
    out = tmp_path / "on-ray"
    command = [sys.executable, "-m", "forkgym", "bench", "--preset", "smoke",
               "--regimes", "arithmetic-k4", "--methods", ",".join(METHODS),
               "--out", "on-ray", "--ray", cluster_address, "--check"]  # fmt: skip
    # a relative --out from another working directory: the workers must get absolute paths
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "runs on the Ray cluster at" in done.stdout, done.stdout[-3000:]
    # every tuning run (each method's grid of 2 rates x 2 tuning seeds, any step past its edge)
    # and every reported run (2 seeds each) ran as a task
    tuning = list((out / "arithmetic-k4" / "tune").glob("*/done.json"))
    assert len(tuning) >= 4 * len(METHODS)
    assert done.stdout.count(" done on ") == len(tuning) + 2 * len(METHODS)

    preset = narrow(PRESETS["smoke"], ["arithmetic-k4"], None, None)
    assert check_report(out, preset, METHODS) == []
    local = tmp_path / "local"
    run_bench(preset, local, methods=METHODS, log=lambda _: None)
    for run in ("rloo-seed0", "rloo-seed1", "sft-seed0", "sft-seed1"):
        placed = json.loads((out / "arithmetic-k4" / run / "done.json").read_text())
        assert placed["seconds"] > 0
        assert _metrics(out / "arithmetic-k4" / run) == _metrics(local / "arithmetic-k4" / run), run
    for method in METHODS:  # the sweeps read the grid runs made on the cluster and chose alike
        record = f"arithmetic-k4/tune/{method}.json"
        assert json.loads((out / record).read_text()) == json.loads((local / record).read_text())
