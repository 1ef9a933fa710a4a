"""`forkgym train` under torchrun: two gloo ranks on CPU share each step's prompts, stay in
step (the same weights on every rank), and rank 0 alone writes the run, which resumes on one
process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

# the warm model's task (tests/conftest.py WARM_ENV_KWARGS): its groups mix right and wrong
COMMON = ["--env", "Arithmetic-v0", "--no-progress", "env_kwargs.system_prompt=null",
          "env_kwargs.operations=+", "env_kwargs.digits=1", "env_kwargs.solution_style=compact",
          "env_kwargs.instruction=false", "prompts_per_step=4", "k=4", "max_new_tokens=12",
          "eval_every=2", "eval_episodes=4", "eval_k=0", "threads=1"]  # fmt: skip


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str, ranks: int = 2) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
           f"--master-port={_port()}", "-m", "forkgym", *args]  # fmt: skip
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def test_two_ranks_train_and_the_run_resumes_on_one(tmp_path, warm_model_dir):
    run = tmp_path / "dp"
    done = torchrun("train", "--model", str(warm_model_dir), "--steps", "2", "--out", str(run),
                    "--estimator", "grpo", *COMMON)  # fmt: skip
    # a rank whose weights differed from rank 0's at a checkpoint would have failed the run
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2]  # one log, written once (rank 0)
    assert all(m["data_parallel_ranks"] == 2 for m in lines[1:])
    # both ranks' 2 groups x K=2 branches: the budget counts every rank's tokens
    assert (
        lines[2]["tokens_generated_total"]
        == lines[1]["tokens_generated"] + lines[2]["tokens_generated"]
    )
    assert "eval_accuracy" in lines[2]
    # the summary line is printed once, by rank 0
    assert done.stdout.count('"run"') == 1
    weights = load_file(run / "checkpoints" / "step_0000002" / "model.safetensors")
    start = load_file(warm_model_dir / "model.safetensors")
    assert any(not (weights[k] == start[k]).all() for k in start)  # the ranks trained
    resumed = subprocess.run(
        [sys.executable, "-m", "forkgym", "train", "--model", str(warm_model_dir), "--steps", "3",
         "--out", str(run), "--resume", "--estimator", "grpo", *COMMON],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2, 3]
    assert "data_parallel_ranks" not in lines[3]


def test_data_parallel_refuses_what_it_would_change(tmp_path, tiny_model_dir):
    done = torchrun("train", "--model", str(tiny_model_dir), "--steps", "1", "--out",
                    str(tmp_path / "x"), "--estimator", "reinforce_ema", *COMMON)  # fmt: skip
    assert done.returncode != 0
    assert "whole batch" in done.stderr


def test_sharded_ranks_train_as_replicated_ones_and_the_run_resumes_on_one(
    tmp_path, warm_model_dir
):
    """data_parallel=shard (FSDP2 over gloo): the engines generate with whole copies pushed
    from the shards, checkpoints hold whole weights, and the weights after two steps are the
    replicated run's."""
    own = ["backend_kwargs.share_model=false"]
    runs = {}
    for mode in ("replicate", "shard"):
        runs[mode] = tmp_path / mode
        done = torchrun("train", "--model", str(warm_model_dir), "--steps", "2", "--out",
                        str(runs[mode]), "--estimator", "grpo", f"data_parallel={mode}", *own,
                        *COMMON)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    a = load_file(runs["replicate"] / "checkpoints" / "step_0000002" / "model.safetensors")
    b = load_file(runs["shard"] / "checkpoints" / "step_0000002" / "model.safetensors")
    assert set(a) <= set(b)
    for key in a:
        assert torch.allclose(a[key], b[key], rtol=1e-5, atol=2e-5), key
    lines = [json.loads(line) for line in (runs["shard"] / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert lines[2]["sync/bytes"] > 0 and lines[2]["drift/logprob_abs_max"] < 1e-4
    resumed = subprocess.run(
        [sys.executable, "-m", "forkgym", "train", "--model", str(warm_model_dir), "--steps", "3",
         "--out", str(runs["shard"]), "--resume", "--estimator", "grpo", *own, *COMMON],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [json.loads(line) for line in (runs["shard"] / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert [m["step"] for m in lines] == [0, 1, 2, 3]


def test_an_asynchronous_data_parallel_run_resumes_exactly(tmp_path, warm_model_dir):
    """max_staleness=1 on two ranks: each rank's batches generated ahead are kept in the
    checkpoint (rank 0 gathers them), so a run stopped after step 2 and resumed on two ranks
    logs what the uninterrupted run logs."""
    common = ["--model", str(warm_model_dir), "--steps", "3", "--estimator", "grpo",
              "max_staleness=1", "backend_kwargs.share_model=false", *COMMON]  # fmt: skip
    full = tmp_path / "full"
    done = torchrun("train", "--out", str(full), *common)
    assert done.returncode == 0, done.stderr[-3000:]

    def metrics(run):
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        skip = ("time/", "async/wait_s", "async/push_wait_s", "tokens_per_s", "group_span_s_mean", "barrier_idle_s")  # fmt: skip
        return [{k: v for k, v in m.items() if not k.startswith(skip)} for m in lines]

    expected = metrics(full)
    assert expected[2]["async/staleness_max"] == 1
    # a token budget that the uninterrupted run crossed at step 2 stops the same run there
    budget = expected[2]["tokens_generated_total"]
    part = tmp_path / "part"
    done = torchrun("train", "--out", str(part), *common, f"max_tokens_generated={budget}")
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads((part / "checkpoints" / "step_0000002" / "prefetched.json").read_text())
    assert state["world_size"] == 2 and [list(r) for r in state["ranks"]] == [["2"], ["2"]]
    done = torchrun("train", "--out", str(part), "--resume", *common, f"max_tokens_generated={budget * 10}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = metrics(part)
    assert [m["step"] for m in got] == [0, 1, 2, 3]
    assert got[3] == expected[3]


def test_vine_runs_on_two_ranks_and_counts_every_ranks_continuations(tmp_path, warm_model_dir):
    """Each rank values the states of its own groups (continuation seeds are keyed by the
    task and the state, not the rank); the budget counts both ranks' continuations."""
    run = tmp_path / "vine"
    done = torchrun("train", "--model", str(warm_model_dir), "--steps", "1", "--out", str(run),
                    "algorithm=vine", "algorithm_kwargs.rollouts=2", "loss=ppo_clip", *COMMON)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    step = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    mine = step["gen/tokens_sampled"] + step["gen/value_tokens"]  # rank 0's own share
    assert step["gen/value_tokens"] > 0 and step["tokens_generated"] > mine


def test_gigpo_runs_on_two_ranks(tmp_path, warm_model_dir):
    """Anchor groups live inside a task's group, and a rank holds whole groups: each rank
    matches the states of its own groups."""
    run = tmp_path / "gigpo"
    done = torchrun("train", "--model", str(warm_model_dir), "--steps", "1", "--out", str(run),
                    "algorithm=gigpo", "estimator=grpo", "loss=ppo_clip", *COMMON)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    step = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    # one turn per episode: every branch starts from the task's one state
    assert step["gigpo/anchor_fraction"] == 1.0 and step["gigpo/anchor_size_mean"] == 4.0
