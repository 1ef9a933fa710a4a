"""``forkgym/MathDataset-v0``: problems from a JSONL file or a Hugging Face dataset.

Each row is one of three styles:

* GSM8K style: ``{"question", "answer"}`` where the answer ends with ``#### <final>``;
* MATH style: ``{"problem", "solution"}`` where the solution's last ``\\boxed{}`` is final;
* plain: ``{"question" | "problem", "answer"}`` with the bare final answer.

An optional ``id`` names the row in task ids (``<name>:<id>``, else the line or row number).
A JSONL file (or bundled sample) is read and validated whole at construction (a bad row is an
error naming its line). Parquet, CSV and Arrow files, ``save_to_disk`` folders and hub
datasets are read lazily through ``datasets`` (:mod:`forkgym.envs.dataset_sources`), with a
column mapping for other names. The data's SHA-256 is part of the environment's identity, so
a state saved against one version of the data refuses to load into another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from .dataset_sources import DatasetRows, build_task, is_datasets_source, open_rows
from .math_env import MathEnv
from .task import Task

__all__ = ["BUNDLED", "MathDatasetEnv", "load_rows"]

BUNDLED = {"gsm8k-sample": "gsm8k_sample.jsonl", "math-sample": "math_sample.jsonl"}


def _row_to_task(name: str, lineno: int, row: Any) -> Task:
    where = f"{name} line {lineno}"
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object")
    return build_task(
        name,
        where,
        row.get("id", lineno),
        row.get("question", row.get("problem")),
        row.get("answer"),
        row.get("solution"),
        family="gsm8k" if "question" in row else "math",
        difficulty=row.get("level", row.get("difficulty", 0)),
    )


def _resolve(path: str) -> tuple[str, bytes]:
    if path in BUNDLED:
        return path, (files("forkgym.envs") / "data" / BUNDLED[path]).read_bytes()
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"dataset {path!r} is neither a file nor one of {sorted(BUNDLED)}")
    return file.stem, file.read_bytes()


def load_rows(path: str) -> tuple[str, str, dict[str, Task]]:
    """(dataset name, sha256, tasks by id) for a JSONL path or a bundled sample name."""
    name, blob = _resolve(path)
    tasks: dict[str, Task] = {}
    for lineno, line in enumerate(blob.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name} line {lineno}: not valid JSON ({exc.msg})") from None
        task = _row_to_task(name, lineno, row)
        if task.task_id in tasks:
            raise ValueError(f"{name} line {lineno}: duplicate id {task.task_id!r}")
        tasks[task.task_id] = task
    if not tasks:
        raise ValueError(f"dataset {path!r} has no rows")
    return name, hashlib.sha256(blob).hexdigest(), tasks


class MathDatasetEnv(MathEnv):
    """Problems drawn uniformly (per seed) from a JSONL file or a Hugging Face dataset.

    ``columns`` maps roles (``question``, ``answer``, ``solution``, ``id``, ``difficulty``) to
    a ``datasets`` source's column names; ``subset``, ``split`` and ``revision`` pick a hub
    dataset's subset, split and commit (``split`` also a folder's or ``DatasetDict``'s split).
    """

    def __init__(
        self,
        path: str = "gsm8k-sample",
        max_attempts: int = 1,
        *,
        columns: Mapping[str, str] | None = None,
        subset: str | None = None,
        split: str | None = None,
        revision: str | None = None,
        **common: Any,
    ) -> None:
        if columns is not None and not (
            isinstance(columns, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in columns.items())
        ):
            raise TypeError(f"columns must map role names to column names, got {columns!r}")
        # Only the kwargs given join the config, so a JSONL env's fingerprint is as before.
        options = {
            key: value
            for key, value in (
                ("columns", None if columns is None else dict(columns)),
                ("subset", subset),
                ("split", split),
                ("revision", revision),
            )
            if value is not None
        }
        self.tasks: dict[str, Task] | None = None  # every task, for a JSONL file only
        self._rows: DatasetRows | None = None  # the lazily read rows of a datasets source
        self._drawn: Task | None = None  # the task sample_task_id just read, for task_from_id
        if path not in BUNDLED and (options or is_datasets_source(path)):
            self._rows = open_rows(path, **options)
            self.dataset, sha256 = self._rows.name, self._rows.sha256
        else:
            self.dataset, sha256, self.tasks = load_rows(path)
            self._ids = list(self.tasks)  # file order: a seed picks the same row everywhere
        super().__init__(config={"path": path, **options}, max_attempts=max_attempts, **common)
        self.identity["sha256"] = sha256

    @property
    def num_tasks(self) -> int:
        """How many rows (tasks) the dataset has."""
        return len(self._ids) if self._rows is None else len(self._rows)

    def sample_task_id(self, rng: np.random.Generator) -> str:
        index = int(rng.integers(self.num_tasks))
        if self._rows is None:
            return self._ids[index]
        self._drawn = self._rows.task_at(index)
        return self._drawn.task_id

    def task_from_id(self, task_id: str) -> Task:
        if self._rows is not None:
            drawn, self._drawn = self._drawn, None
            if drawn is not None and drawn.task_id == task_id:
                return drawn
            return self._rows.find(task_id)
        try:
            return self.tasks[task_id]  # type: ignore[index]
        except KeyError:
            raise ValueError(
                f"{task_id!r} is not in dataset {self.dataset!r} (ids look like {self._ids[0]!r})"
            ) from None
