"""The processes `forkgym bench --jobs` runs its cells in (bench/runner.py ``in_processes``)."""

import json
from pathlib import Path

import pytest

from forkgym.bench.runner import in_processes


def _grade(path: str) -> None:
    """Grade an answer off the verifier's fast path (it needs the verifier's worker process)
    as a run would, and write the verdict to ``path``."""
    import torch

    from forkgym.envs.grading import default_verifier

    outcome = default_verifier().verify("8", "so \\boxed{5+3}")
    Path(path).write_text(json.dumps({"status": outcome.status.value, "threads": torch.get_num_threads()}))  # fmt: skip


def _fail() -> None:
    raise ValueError("this run fails")


def test_a_cells_verifier_starts_its_own_workers_and_grades_off_the_fast_path(tmp_path):
    # a daemonic pool worker could not start them: every such answer was an infra `error`
    files = [str(tmp_path / f"{i}.json") for i in range(3)]
    in_processes([(_grade, (f,)) for f in files], jobs=2, threads=1)
    for f in files:
        assert json.loads(Path(f).read_text()) == {"status": "correct", "threads": 1}


def test_a_failing_cell_stops_the_others_and_says_how_to_resume(tmp_path):
    with pytest.raises(RuntimeError, match="rerun the command to resume"):
        in_processes([(_fail, ()), (_grade, (str(tmp_path / "late.json"),))], jobs=1, threads=1)
    assert not (tmp_path / "late.json").exists()
