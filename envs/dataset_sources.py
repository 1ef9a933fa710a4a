"""Hugging Face ``datasets`` sources for ``forkgym/MathDataset-v0`` (the ``datasets`` extra).

A source is a parquet, CSV or Arrow file, a glob or folder of data files, a folder written by
``save_to_disk``, or a hub name. Its rows stay in the memory-mapped Arrow table: a
:class:`~forkgym.envs.task.Task` is built from one row when it is drawn, so a million-row set
costs no more to construct than its files take to hash. The column mapping is checked at
construction; a bad row is an error (naming its row) only when it is drawn.

``datasets`` is imported lazily, so JSONL datasets work without it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forkgym.verifiers.extract import boxed_spans, last_boxed

from .math_env import ANSWER_INSTRUCTION
from .task import Task

__all__ = ["AUTO_COLUMNS", "DatasetRows", "build_task", "is_datasets_source", "open_rows"]

_CALC_ANNOTATION = re.compile(r"<<[^<>]*>>")  # GSM8K's inline calculator notes
# A comma between two numbers that is neither a thousands separator (1,234) nor after a 0
# (0,5): in a math dataset's answer it separates solutions (MATH's "-2,1"), while the verifier
# reads such plain text as a decimal comma, as math-verify does. Such answers are stored in
# math delimiters, where it is a list.
_SOLUTION_LIST = re.compile(r"[+-]?[1-9]\d*,\d+", re.ASCII)
_THOUSANDS = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+", re.ASCII)


def _as_math(answer: str) -> str:
    """``-2,1`` -> ``$-2,1$`` (a list of solutions, see above); any other answer unchanged."""
    if _SOLUTION_LIST.fullmatch(answer) and not _THOUSANDS.fullmatch(answer):
        return f"${answer}$"
    return answer


def build_task(
    name: str,
    where: str,
    row_id: Any,
    text: Any,
    answer_value: Any,
    worked: Any,
    *,
    family: str,
    difficulty: Any,
    labels: tuple[str, str, str] = ("'question' or 'problem'", "'answer'", "'solution'"),
) -> Task:
    """A validated task from one row's question, answer and solution (``labels`` name them in
    errors).

    Shared by JSONL and ``datasets`` rows so one row means the same task in any format: a
    solution's last ``\\boxed{}`` wins, then a GSM8K ``####`` answer, then a bare answer.
    """
    text_name, answer_name, solution_name = labels
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: needs a non-empty {text_name}")
    gold = None
    if isinstance(worked, str):
        gold = worked
        boxes = [worked[a:b].strip() for a, b in boxed_spans(worked)]
        # several boxes are one list answer, graded together (MathVerifier multi_box)
        final = (
            last_boxed(worked) if len(boxes) < 2 else ", ".join(f"\\boxed{{{b}}}" for b in boxes)
        )
        if not final:
            raise ValueError(f"{where}: {solution_name} has no \\boxed{{}} final answer")
    elif isinstance(answer_value, str) and "####" in answer_value:
        reasoning, _, final = answer_value.rpartition("####")
        final = final.strip()
        reasoning = _CALC_ANNOTATION.sub("", reasoning).strip()
        gold = f"{reasoning}\nThe answer is $\\boxed{{{final}}}$."
    elif isinstance(answer_value, (str, int, float)) and str(answer_value).strip():
        final = str(answer_value).strip()
    else:
        raise ValueError(f"{where}: needs an {answer_name} or a {solution_name}")
    return Task(
        task_id=f"{name}:{row_id}",
        prompt=f"{text.strip()}\n\n{ANSWER_INSTRUCTION}",
        answer=_as_math(final),
        family=family,
        difficulty=difficulty,
        solution=gold,
    )


# Roles a column can play, with the names auto-detection tries in order.
AUTO_COLUMNS: dict[str, tuple[str, ...]] = {
    "question": ("question", "problem", "prompt", "query"),
    "answer": ("answer", "final_answer", "expected_answer"),
    "solution": ("solution",),
    "id": ("id", "unique_id", "problem_id"),
    "difficulty": ("level", "difficulty"),
}
_LOADERS = {".parquet": "parquet", ".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json"}
_DATASETS_ONLY = {".parquet", ".csv", ".tsv", ".arrow"}  # other files are read as JSONL
_HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")
_GLOB = re.compile(r"[*?\[]")
_CACHE_SIZE = 8  # opened sources kept per process (each is a memory map, not a copy)
_OPENED: OrderedDict[tuple[Any, ...], tuple[Any, DatasetRows]] = OrderedDict()
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def _require_datasets(path: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"dataset {path!r} needs the optional 'datasets' package: "
            "pip install 'forkgym[datasets]'"
        ) from None
    return datasets


def is_datasets_source(path: str) -> bool:
    """Whether ``path`` is read through ``datasets`` (JSONL files and samples are not)."""
    file = Path(path)
    if _GLOB.search(path) or file.is_dir():
        return True
    if file.is_file():
        return file.suffix.lower() in _DATASETS_ONLY
    return bool(_HUB_NAME.fullmatch(path)) and file.suffix.lower() not in {*_LOADERS, ".arrow"}


def _file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes, memoised per process by (path, size, mtime, inode)."""
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _content_sha256(files: list[str]) -> str:
    """One file: its SHA-256 (as for JSONL). Several: the hash of their hashes, in row order."""
    digests = [_file_sha256(f) for f in files]
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _local_files(path: str) -> list[str]:
    """Every file a local source may read: what its freshness stamp covers."""
    if _GLOB.search(path):
        return sorted(f for f in glob.glob(path, recursive=True) if os.path.isfile(f))
    if os.path.isdir(path):
        return sorted(str(p) for p in Path(path).rglob("*") if p.is_file())
    return [path]


def _stamp(files: list[str]) -> tuple[tuple[str, int, int, int], ...]:
    stats = [(f, os.stat(f)) for f in files]
    return tuple((f, s.st_size, s.st_mtime_ns, s.st_ino) for f, s in stats)


def _source_name(path: str) -> str:
    """The ``<name>`` of task ids: file stem, folder name, glob's folder, or hub repo name."""
    if _GLOB.search(path):
        fixed = [part for part in Path(path).parts if not _GLOB.search(part)]
        return Path(*fixed).name if fixed else "data"
    file = Path(path)
    if file.is_dir():
        return file.resolve().name
    if file.exists():
        return file.stem
    return path.rsplit("/", 1)[-1]  # hub name


def _pick_split(path: str, split: str | None, splits: list[str]) -> str:
    if split is None and len(splits) == 1:
        return splits[0]
    if split is None or split not in splits:
        asked = "pass split=" if split is None else f"split {split!r} is not one of them; pass"
        raise ValueError(f"dataset {path!r} has splits {sorted(splits)}: {asked} one of them")
    return split


def _load(datasets: Any, path: str, subset: str | None, split: str | None, revision: str | None):
    """(memory-mapped Dataset, content sha256) of a source.

    The identity hash is ours, not ``Dataset._fingerprint``: that is random for in-memory
    datasets, copied from ``state.json`` by ``load_from_disk`` and derived from file paths and
    mtimes by the builders, so it is not a content hash. Data files are hashed byte for byte.
    """
    local = Path(path)
    if not _GLOB.search(path) and not local.exists():  # a hub name
        builder = datasets.load_dataset_builder(path, subset, revision=revision)
        splits = list(builder.info.splits or builder.config.data_files or [])
        name = _pick_split(path, split, splits) if splits else split or "train"
        builder.download_and_prepare()
        dataset = builder.as_dataset(split=name)
        # The split's prepared Arrow files are the bytes served; name/config/split/revision
        # say where they came from.
        files = [c["filename"] for c in dataset.cache_files]
        meta = {"hub": path, "subset": subset, "split": name, "revision": revision}
        blob = json.dumps({**meta, "files": [_file_sha256(f) for f in files]}, sort_keys=True)
        return dataset, hashlib.sha256(blob.encode()).hexdigest()
    if subset is not None or revision is not None:
        raise ValueError(f"subset= and revision= apply to hub datasets, not to {path!r}")
    if local.is_file() and local.suffix.lower() == ".arrow":
        if split is not None:
            raise ValueError(f"dataset {path!r} is a single Arrow file: it has no splits")
        return datasets.Dataset.from_file(path), _file_sha256(path)
    if local.is_dir() and (
        (local / "state.json").is_file() or (local / "dataset_dict.json").is_file()
    ):
        dataset = datasets.load_from_disk(path)  # memory-mapped, never read whole
        if isinstance(dataset, datasets.DatasetDict):
            dataset = dataset[_pick_split(path, split, list(dataset))]
        elif split is not None:
            raise ValueError(f"dataset {path!r} was saved as one Dataset: it has no splits")
        return dataset, _content_sha256([c["filename"] for c in dataset.cache_files])
    if local.is_dir():
        builder = datasets.load_dataset_builder(path)
    else:
        suffix = Path(path).suffix.lower()
        if suffix not in _LOADERS:
            raise ValueError(
                f"dataset {path!r}: no loader for {suffix!r} files ({sorted(_LOADERS)})"
            )
        extra = {"delimiter": "\t"} if suffix == ".tsv" else {}
        builder = datasets.load_dataset_builder(_LOADERS[suffix], data_files=path, **extra)
    name = _pick_split(path, split, list(builder.config.data_files))
    sha256 = _content_sha256([str(f) for f in builder.config.data_files[name]])
    builder.download_and_prepare()  # to Arrow in the datasets cache, once per file version
    return builder.as_dataset(split=name), sha256


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _is_integer(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind)


def _is_number(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


_TYPES = {  # role -> (check, what it must hold)
    "question": (_is_text, "text"),
    "answer": (lambda k: _is_text(k) or _is_number(k), "text or numbers"),
    "solution": (_is_text, "text"),
    "id": (lambda k: _is_text(k) or _is_integer(k), "text or integers"),
    "difficulty": (lambda k: _is_text(k) or _is_number(k), "text or numbers"),
}


def map_columns(source: str, schema: Any, columns: Mapping[str, str] | None) -> dict[str, str]:
    """Role -> column: the explicit mapping, completed by auto-detection, checked eagerly."""
    present = list(schema.names)
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(AUTO_COLUMNS))
    if unknown:
        raise ValueError(f"columns= roles {unknown} are not among {list(AUTO_COLUMNS)}")
    fields: dict[str, str] = {}
    for role, (fits, what) in _TYPES.items():
        if role in columns:
            column = columns[role]
            if column not in present:
                raise ValueError(
                    f"dataset {source!r} has no column {column!r} (mapped to {role!r}); "
                    f"its columns are {present}"
                )
            if not fits(schema.field(column).type):
                raise ValueError(
                    f"dataset {source!r}: column {column!r} (mapped to {role!r}) must hold "
                    f"{what}, not {schema.field(column).type}"
                )
            fields[role] = column
            continue
        for column in AUTO_COLUMNS[role]:
            if column in present and fits(schema.field(column).type):
                fields[role] = column
                break
    missing = [] if "question" in fields else ["question"]
    if "answer" not in fields and "solution" not in fields:
        missing.append("answer or solution")
    if missing:
        known = "; ".join(f"{role}: {'/'.join(names)}" for role, names in AUTO_COLUMNS.items())
        raise ValueError(
            f"dataset {source!r} has no {' and no '.join(missing)} column; its columns are "
            f"{present}. Map them with columns={{'question': ..., 'answer': ...}} (names "
            f"recognised without a mapping: {known})"
        )
    return fields


class DatasetRows:
    """The rows of one source, read one at a time from the memory-mapped Arrow table.

    Task ids are ``<name>:<id>`` with the ``id`` column's value, or the 1-based row number
    (what a JSONL file's line number would be). Ids are checked unique at construction (a
    vectorised pass over one column); finding a row by id scans that column, after a small
    memo of recently drawn ids, which is what forks and restored states ask for.
    """

    def __init__(self, name: str, sha256: str, dataset: Any, fields: dict[str, str]) -> None:
        if dataset.num_rows == 0:
            raise ValueError(f"dataset {name!r} has no rows")
        self.name = name
        self.sha256 = sha256
        self.fields = fields
        self.family = "gsm8k" if fields["question"] == "question" else "math"  # as for JSONL
        self.dataset = dataset.select_columns(sorted(set(fields.values())))
        question, answer, solution = (
            f"{r!r} (column {fields[r]!r})" if r in fields else repr(r)
            for r in ("question", "answer", "solution")
        )
        self._labels = (question, answer, solution)
        self._recent: OrderedDict[str, int] = OrderedDict()
        if "id" in fields:
            self._check_unique_ids()

    def __len__(self) -> int:
        return self.dataset.num_rows

    def _ids(self) -> Any:
        return self.dataset.data.column(self.fields["id"])

    def _check_unique_ids(self) -> None:
        import pyarrow.compute as pc

        ids = self._ids()
        if pc.count_distinct(ids).as_py() < len(ids) - ids.null_count:
            counts = pc.value_counts(ids)
            repeated = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"]
            raise ValueError(
                f"dataset {self.name!r}: column {self.fields['id']!r} has duplicate ids "
                f"(e.g. {repeated.as_py()!r})"
            )

    def task_at(self, index: int) -> Task:
        """The task of row ``index`` (0-based), validated now."""
        row = self.dataset[index]
        where = f"{self.name} row {index + 1} (index {index})"
        fields = self.fields
        row_id: Any = index + 1
        if "id" in fields:
            row_id = row[fields["id"]]
            if row_id is None or not str(row_id).strip():
                raise ValueError(f"{where}: column {fields['id']!r} (the id) is empty")
        difficulty = row[fields["difficulty"]] if "difficulty" in fields else None
        task = build_task(
            self.name,
            where,
            row_id,
            row[fields["question"]],
            row[fields["answer"]] if "answer" in fields else None,
            row[fields["solution"]] if "solution" in fields else None,
            family=self.family,
            difficulty=0 if difficulty is None else difficulty,
            labels=self._labels,
        )
        self._remember(task.task_id, index)
        return task

    def _remember(self, task_id: str, index: int) -> None:
        self._recent[task_id] = index
        self._recent.move_to_end(task_id)
        if len(self._recent) > 1024:
            self._recent.popitem(last=False)

    def first_id(self) -> str:
        first = self._ids()[0].as_py() if "id" in self.fields else 1
        return f"{self.name}:{first}"

    def find(self, task_id: str) -> Task:
        """The task with this id; ``ValueError`` if no row has it."""
        index = self._recent.get(task_id) if isinstance(task_id, str) else None
        if index is None and isinstance(task_id, str) and task_id.startswith(f"{self.name}:"):
            index = self._index_of(task_id[len(self.name) + 1 :])
        if index is None:
            raise ValueError(
                f"{task_id!r} is not in dataset {self.name!r} (ids look like {self.first_id()!r})"
            )
        return self.task_at(index)

    def _index_of(self, key: str) -> int | None:
        import pyarrow as pa
        import pyarrow.compute as pc

        if "id" not in self.fields:
            number = int(key) if key.isdigit() and str(int(key)) == key else 0
            return number - 1 if 1 <= number <= len(self) else None
        ids = self._ids()
        value: Any = key
        if pa.types.is_integer(ids.type):
            try:
                value = pa.scalar(int(key), type=ids.type)
            except (ValueError, OverflowError, pa.ArrowInvalid):
                return None
            if str(value.as_py()) != key:  # "007" names no row of 7
                return None
        index = pc.index(ids, value).as_py()
        return None if index < 0 else index


def open_rows(
    path: str,
    *,
    columns: Mapping[str, str] | None = None,
    subset: str | None = None,
    split: str | None = None,
    revision: str | None = None,
) -> DatasetRows:
    """The rows of a ``datasets`` source, cached per process while its files are unchanged.

    A fork rebuilds its env from the same kwargs: the cache hands it the open source after a
    ``stat`` of the files instead of re-hashing and re-opening them.
    """
    datasets = _require_datasets(path)
    local = bool(_GLOB.search(path)) or Path(path).exists()
    if _GLOB.search(path) and not _local_files(path):
        raise FileNotFoundError(f"no files match {path!r}")
    key = (path, json.dumps(dict(columns or {}), sort_keys=True), subset, split, revision)
    stamp = _stamp(_local_files(path)) if local else None
    cached = _OPENED.get(key)
    if cached is not None and cached[0] == stamp:
        _OPENED.move_to_end(key)
        return cached[1]
    dataset, sha256 = _load(datasets, path, subset, split, revision)
    fields = map_columns(path, dataset.data.schema, columns)
    rows = DatasetRows(_source_name(path), sha256, dataset, fields)
    _OPENED[key] = (stamp, rows)
    if len(_OPENED) > _CACHE_SIZE:
        _OPENED.popitem(last=False)
    return rows
