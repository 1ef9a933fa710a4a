"""A finished run, kept small: what the report and the sweeps read back from it, compressed.

A run writes one JSON line of some 140 figures per step (``metrics.jsonl``, about 1.7 MB for
300 steps) and one file of per-task outcomes per evaluation. Once it ends,
:func:`compact_run` writes beside them

    steps.jsonl.gz     each step's figures that the report reads (:data:`STEP_FIELDS`,
                       :data:`STEP_PREFIXES`): about 0.1 MB for the same run
    outcomes.json.gz   the last evaluation's per-task outcomes (the paired tests' input)

and the readers below prefer them, so a benchmark's folder committed without its per-step
logs, checkpoints or earlier evaluations (``.gitignore`` keeps those out under ``docs/``)
reports exactly as the folder that ran.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from forkgym.agents.generation.episode_log import read_outcomes
from forkgym.agents.run.runlog import read_metrics

__all__ = [
    "STEP_FIELDS",
    "STEP_PREFIXES",
    "compact_finished",
    "compact_run",
    "read_last_outcomes",
    "read_steps",
]

STEPS_FILE = "steps.jsonl.gz"
OUTCOMES_FILE = "outcomes.json.gz"

# the per-step figures a report is made of (bench/report.py summarise) and a sweep's score
STEP_FIELDS = frozenset(
    {
        "eval_accuracy",
        "eval_infra_failures",
        "infra_failures",
        "tokens_generated",
        "tokens_generated_total",
        "tokens_generated_greedy",
        "tokens_generated_values",
        "tokens_trained",
        "gen/tokens_sampled",
        "gen/tokens_accepted",
        "diag/response_length_mean",
    }
)
# whole families: timings, the critic's and Vine's fits, GiGPO's anchors, group outcomes
STEP_PREFIXES = ("time/", "critic/", "vine/", "gigpo/")
_STRATA = ("diag/adv/by_", "diag/loss/by_")  # only their ``/abs_mean`` is read


def _kept(key: str) -> bool:
    if key in STEP_FIELDS or key.startswith(STEP_PREFIXES):
        return True
    if key.startswith(_STRATA):
        return key.endswith("/abs_mean")
    return key.startswith("diag/") and key.endswith("_of_groups")


def _write_gz(path: Path, text: str) -> None:
    """``text`` gzipped to ``path``, whole or not at all; mtime 0, so the same run gives the
    same bytes."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    partial.replace(path)


def compact_run(folder: str | Path) -> None:
    """Write ``folder``'s :data:`STEPS_FILE` and (if it evaluated on per-task outcomes)
    :data:`OUTCOMES_FILE` from its full logs; nothing is deleted."""
    folder = Path(folder)
    rows = [{k: v for k, v in row.items() if _kept(k)} for row in read_metrics(folder)]
    _write_gz(folder / STEPS_FILE, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    outcomes = read_outcomes(folder)
    if outcomes is not None:
        _write_gz(folder / OUTCOMES_FILE, json.dumps(outcomes))


def compact_finished(out: str | Path) -> int:
    """Compact every finished run (a ``done.json``) under ``out`` that has no
    :data:`STEPS_FILE` yet, e.g. one that ended before runs were compacted; how many."""
    count = 0
    for done in sorted(Path(out).glob("**/done.json")):
        if not (done.parent / STEPS_FILE).exists() and (done.parent / "metrics.jsonl").exists():
            compact_run(done.parent)
            count += 1
    return count


def read_steps(folder: str | Path) -> list[dict[str, Any]]:
    """A run's per-step figures: its compact :data:`STEPS_FILE`, else its ``metrics.jsonl``."""
    path = Path(folder) / STEPS_FILE
    if not path.exists():
        return read_metrics(folder)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_last_outcomes(folder: str | Path) -> dict[str, Any] | None:
    """A run's last per-task outcomes: its :data:`OUTCOMES_FILE`, else its last ``eval/``
    file (None: it recorded none)."""
    path = Path(folder) / OUTCOMES_FILE
    if not path.exists():
        return read_outcomes(Path(folder))
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)
