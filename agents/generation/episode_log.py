"""``RUN_DIR/episodes.jsonl``: one line per generated episode of each training step.

Each line says which weights produced the episode (``weight_version``) and how many versions
behind the learner's those were when it was trained on (``staleness``; 0 in a synchronous
run), beside its task, branch, outcome and length, and whether it went into the step's
batch (``kept``: a valid sampled episode of a group that was not dropped as too stale). It is written when ``TrainConfig.log_episodes`` says so,
which asynchronous runs do by default. Under data parallelism it holds rank 0's share. After
a resume from step s, lines past s are dropped, as in ``metrics.jsonl``.

``RUN_DIR/eval/version_NNNNNNN.json`` (rank 0, every run): one evaluation's greedy outcome
per held-out task, in task order, with the version of the weights evaluated
(:func:`write_outcomes`, :func:`read_outcomes`): what a comparison paired task by task reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..batch import RolloutBatch
from ..run.runlog import open_for_steps, read_jsonl

__all__ = ["EpisodeLog", "episode_records", "read_episodes", "read_outcomes", "write_outcomes"]


def episode_records(
    batch: RolloutBatch, step: int, learner_version: int, kept: set[int] | None = None
) -> list[dict[str, Any]]:
    """The lines for a step's batch; ``kept``: the indices of the groups that stayed in the
    batch (None: all of them)."""
    out = []
    for g, group in enumerate(batch.groups):
        for ep in group.branches:
            outcome = ep.outcome
            out.append(
                {
                    "step": step,
                    "group": g,
                    "branch": ep.branch,
                    "kind": ep.kind,
                    "task_id": ep.task_id,
                    "weight_version": ep.weight_version,
                    "staleness": learner_version - ep.weight_version,
                    "status": None if outcome is None else outcome.status.value,
                    "reward": None if outcome is None else outcome.reward,
                    "generated_tokens": ep.generated_tokens,
                    "kept": ep.kind == "sampled" and ep.valid and (kept is None or g in kept),
                }
            )
    return out


def read_episodes(run_dir: str | Path) -> list[dict[str, Any]]:
    return read_jsonl(Path(run_dir) / "episodes.jsonl")


class EpisodeLog:
    """Appends a step's episode lines; a resumed run first drops the lines past its step."""

    def __init__(self, run_dir: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / "episodes.jsonl"
        self._file = open_for_steps(self.path, resume_step)

    def log(self, records: list[dict[str, Any]]) -> None:
        self._file.write("".join(json.dumps(r) + "\n" for r in records))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_outcomes(path: Path, outcomes: list[dict[str, Any]], version: int) -> None:
    """One evaluation's per-task outcomes (``evaluate(record=...)``) to ``path``, whole or
    not at all (written beside, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "weight_version": version,
        "task_seeds": [o["task_seed"] for o in outcomes],
        "task_ids": [o["task_id"] for o in outcomes],
        "correct": [int(o["correct"]) for o in outcomes],
        "valid": [int(o["valid"]) for o in outcomes],
    }
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)


def read_outcomes(run_dir: Path) -> dict[str, Any] | None:
    """The last evaluation's per-task outcomes of a run (None: it wrote none)."""
    files = sorted((Path(run_dir) / "eval").glob("version_*.json"))
    return json.loads(files[-1].read_text()) if files else None
