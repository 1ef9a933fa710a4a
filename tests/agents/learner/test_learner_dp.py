"""A data-parallel learner step over two gloo ranks equals one process's step on the whole
batch, for every reduction, and checkpoints move between world sizes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from forkgym.agents.learner.reductions import REDUCTIONS

WORKER = Path(__file__).with_name("learner_dp_worker.py")
pytestmark = pytest.mark.slow


def _run(model_dir: Path, out: Path, mode: str, world: int, parallel: str = "replicate") -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                str(model_dir),
                str(out),
                mode,
                str(rank),
                str(world),
                str(port),
                parallel,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world)
    ]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("the ranks did not finish")
    assert all(p.returncode == 0 for p in procs), logs


def test_two_ranks_match_one_process_and_checkpoints_cross_world_sizes(tmp_path, tiny_model_dir):
    _run(tiny_model_dir, tmp_path, "two_steps", 1)
    _run(tiny_model_dir, tmp_path, "two_steps", 2)

    def weights(name: str) -> torch.Tensor:
        return torch.load(tmp_path / name)

    for reduction in REDUCTIONS:
        for step in (0, 1):
            one = weights(f"two_steps-w1-{reduction}-step{step}.pt")
            two = weights(f"two_steps-w2-{reduction}-step{step}.pt")
            start = weights(f"two_steps-w1-{reduction}-step0.pt") if step else None
            # float sums in another order; Adam turns the tiny differences into ~1e-6 of weight
            assert torch.allclose(one, two, rtol=1e-5, atol=2e-5), (reduction, step)
            if start is not None:
                assert not torch.equal(one, start)  # the steps moved the weights
    # a checkpoint written by two ranks resumes on one, and one written by one on two
    for written, resumed in ((2, 1), (1, 2)):
        folder = tmp_path / "resume_from"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for reduction in REDUCTIONS:
            shutil.copy(tmp_path / f"ckpt-w{written}-{reduction}.pt", folder / f"{reduction}.pt")
        _run(tiny_model_dir, tmp_path, "resume", resumed)
        for reduction in REDUCTIONS:
            expected = weights(f"two_steps-w1-{reduction}-step1.pt")
            got = weights(f"resume-w{resumed}-{reduction}-step1.pt")
            assert torch.allclose(expected, got, rtol=1e-5, atol=2e-5), (
                written,
                resumed,
                reduction,
            )


def test_two_sharded_ranks_match_one_process_and_checkpoints_cross_modes(tmp_path, tiny_model_dir):
    """FSDP2 (fully_shard) over gloo: the same step as one process for every reduction, though
    the ranks hold 8 and 4 rows (3 and 2 micro-batches: the lighter rank runs idle passes to
    keep the collectives in step); a sharded checkpoint resumes on one process and a
    single-process one on two sharded ranks."""
    _run(tiny_model_dir, tmp_path, "two_steps", 1)
    _run(tiny_model_dir, tmp_path, "two_steps", 2, "shard")
    for reduction in REDUCTIONS:
        for step in (0, 1):
            one = torch.load(tmp_path / f"two_steps-w1-{reduction}-step{step}.pt")
            two = torch.load(tmp_path / f"two_steps-w2-shard-{reduction}-step{step}.pt")
            assert torch.allclose(one, two, rtol=1e-5, atol=2e-5), (reduction, step)
    for written, resumed, parallel in (("w2-shard", 1, "replicate"), ("w1", 2, "shard")):
        folder = tmp_path / "resume_from"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for reduction in REDUCTIONS:
            shutil.copy(tmp_path / f"ckpt-{written}-{reduction}.pt", folder / f"{reduction}.pt")
        _run(tiny_model_dir, tmp_path, "resume", resumed, parallel)
        tag = f"w{resumed}" + ("-shard" if parallel == "shard" else "")
        for reduction in REDUCTIONS:
            expected = torch.load(tmp_path / f"two_steps-w1-{reduction}-step1.pt")
            got = torch.load(tmp_path / f"resume-{tag}-{reduction}-step1.pt")
            assert torch.allclose(expected, got, rtol=1e-5, atol=2e-5), (written, reduction)
