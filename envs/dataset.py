"""``forkgym/MathDataset-v0``: problems from a JSONL file, GSM8K-style or MATH-style.

Rows are read once at construction and validated (a bad row is an error naming its line):

* GSM8K style: ``{"question", "answer"}`` where the answer ends with ``#### <final>``;
* MATH style: ``{"problem", "solution"}`` where the solution's last ``\\boxed{}`` is final;
* plain: ``{"question" | "problem", "answer"}`` with the bare final answer.

An optional ``id`` names the row in task ids (``<file stem>:<id>``, else the line number).
The file's SHA-256 is part of the environment's identity, so a state saved against one version
of a file refuses to load into an environment reading another.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from forkgym.verifiers.extract import last_boxed

from .math_env import ANSWER_INSTRUCTION, MathEnv
from .task import Task

__all__ = ["BUNDLED", "MathDatasetEnv", "load_rows"]

BUNDLED = {"gsm8k-sample": "gsm8k_sample.jsonl", "math-sample": "math_sample.jsonl"}
_CALC_ANNOTATION = re.compile(r"<<[^<>]*>>")  # GSM8K's inline calculator notes


def _resolve(path: str) -> tuple[str, bytes]:
    if path in BUNDLED:
        return path, (files("forkgym.envs") / "data" / BUNDLED[path]).read_bytes()
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"dataset {path!r} is neither a file nor one of {sorted(BUNDLED)}")
    return file.stem, file.read_bytes()


def _row_to_task(name: str, lineno: int, row: Any) -> Task:
    where = f"{name} line {lineno}"
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object")
    question = row.get("question", row.get("problem"))
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: needs a non-empty 'question' or 'problem'")
    solution = None
    if isinstance(row.get("solution"), str):
        solution = row["solution"]
        answer = last_boxed(solution)
        if not answer:
            raise ValueError(f"{where}: 'solution' has no \\boxed{{}} final answer")
    elif isinstance(row.get("answer"), str) and "####" in row["answer"]:
        reasoning, _, answer = row["answer"].rpartition("####")
        answer = answer.strip()
        reasoning = _CALC_ANNOTATION.sub("", reasoning).strip()
        solution = f"{reasoning}\nThe answer is $\\boxed{{{answer}}}$."
    elif isinstance(row.get("answer"), (str, int, float)) and str(row["answer"]).strip():
        answer = str(row["answer"]).strip()
    else:
        raise ValueError(f"{where}: needs an 'answer' or a 'solution'")
    row_id = row.get("id", lineno)
    return Task(
        task_id=f"{name}:{row_id}",
        prompt=f"{question.strip()}\n\n{ANSWER_INSTRUCTION}",
        answer=answer,
        family="gsm8k" if "question" in row else "math",
        difficulty=row.get("level", row.get("difficulty", 0)),
        solution=solution,
    )


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
    """Problems drawn uniformly (per seed) from a JSONL dataset."""

    def __init__(self, path: str = "gsm8k-sample", max_attempts: int = 1, **common: Any) -> None:
        self.dataset, sha256, self.tasks = load_rows(path)
        self._ids = list(self.tasks)  # file order: a seed picks the same row everywhere
        super().__init__(config={"path": path}, max_attempts=max_attempts, **common)
        self.identity["sha256"] = sha256

    def sample_task_id(self, rng: np.random.Generator) -> str:
        return self._ids[int(rng.integers(len(self._ids)))]

    def task_from_id(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise ValueError(
                f"{task_id!r} is not in dataset {self.dataset!r} (ids look like {self._ids[0]!r})"
            ) from None
