"""Where a run's per-step metrics go: a JSONL file, the SQL store, optionally TensorBoard and
Weights & Biases.

``RUN_DIR/metrics.jsonl`` gets one JSON object per step. The store (SQLite by default, any
SQLAlchemy URL) gets the run in ``runs`` (with its resolved config) and each step in
``metrics``. After a resume from step s, lines and rows past s are replaced, so the record of
a resumed run is that of one uninterrupted run. TensorBoard and W&B get the numeric values of
the same records (W&B also the config); a resumed run continues the same W&B run (its id is
kept in ``RUN_DIR/wandb_run_id``).
"""

from __future__ import annotations

import json
import math
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sqlalchemy.dialects import sqlite

from forkgym.store import make_engine, upgrade
from forkgym.store.models import MetricRow, RunRow, utcnow

if TYPE_CHECKING:
    from .config import TrainConfig

__all__ = ["WANDB_INSTALL_HINT", "RunLog", "SilentLog", "open_run_log", "read_metrics"]

WANDB_INSTALL_HINT = "wandb=true needs the wandb package: pip install 'forkgym[wandb]'"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None (JSON has no spelling for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numeric values of a record (what TensorBoard and W&B plot), ``step`` left out."""
    return {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file (none if it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def open_for_steps(path: Path, resume_step: int | None) -> TextIO:
    """A JSON-lines file of per-step records, opened to append: a fresh run starts it empty,
    a run resumed from step s keeps the records up to s (the steps after it are redone)."""
    kept = [r for r in read_jsonl(path) if resume_step is not None and r["step"] <= resume_step]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return path.open("a", encoding="utf-8")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def _import_wandb() -> Any:
    """The optional ``wandb`` package, imported only when asked for."""
    try:
        import wandb
    except ImportError as exc:
        raise RuntimeError(WANDB_INSTALL_HINT) from exc
    return wandb


class RunLog:
    def __init__(
        self,
        run_dir: str | Path,
        run_id: str,
        config: dict[str, Any],
        *,
        store_url: str | None = None,
        tensorboard: bool = False,
        wandb: bool = False,
        wandb_project: str | None = None,
        wandb_run_name: str | None = None,
        resume_step: int | None = None,
    ) -> None:
        """``wandb``: also log to Weights & Biases (the package is an optional extra, imported
        only then); ``WANDB_MODE``, ``WANDB_DIR`` and the other ``WANDB_*`` variables apply."""
        wandb_module = _import_wandb() if wandb else None  # before any file is written
        self._closed = False
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.path = self.run_dir / "metrics.jsonl"
        self._file = open_for_steps(self.path, resume_step)
        self.store_url = store_url or f"sqlite:///{self.run_dir / 'metrics.db'}"
        upgrade(self.store_url)
        self._engine = make_engine(self.store_url, writer=True)
        with self._engine.begin() as conn:
            if self._engine.dialect.name == "sqlite":
                insert = sqlite.insert(RunRow).on_conflict_do_update(
                    index_elements=["id"], set_={"config": config, "name": run_id}
                )
            else:  # pragma: no cover - other backends
                from sqlalchemy.dialects import postgresql

                insert = postgresql.insert(RunRow).on_conflict_do_update(
                    index_elements=["id"], set_={"config": config, "name": run_id}
                )
            conn.execute(
                insert, [{"id": run_id, "name": run_id, "config": config, "created_at": utcnow()}]
            )
            if resume_step is not None:
                conn.execute(
                    MetricRow.__table__.delete()
                    .where(MetricRow.run_id == run_id)
                    .where(MetricRow.step > resume_step)
                )
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:  # pragma: no cover - optional extra
                raise RuntimeError("tensorboard=True needs the tensorboard package") from exc
            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        self._wandb: Any = None
        if wandb_module is not None:
            self._wandb = self._start_wandb(
                wandb_module, config, wandb_project, wandb_run_name, resume=resume_step is not None
            )

    def _start_wandb(
        self,
        wandb: Any,
        config: dict[str, Any],
        project: str | None,
        name: str | None,
        *,
        resume: bool,
    ) -> Any:
        """A W&B run with the config recorded; a resumed run continues its own W&B run."""
        id_file = self.run_dir / "wandb_run_id"
        wandb_id = id_file.read_text().strip() if resume and id_file.exists() else ""
        if not wandb_id:
            wandb_id = uuid.uuid4().hex[:12]
            id_file.write_text(wandb_id + "\n")
        return wandb.init(
            project=project or os.environ.get("WANDB_PROJECT") or "forkgym",
            name=name or self.run_id,
            id=wandb_id,
            resume="allow",
            config=config,
            # beside the run's other files unless WANDB_DIR says otherwise
            dir=None if os.environ.get("WANDB_DIR") else str(self.run_dir),
        )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        table = MetricRow.__table__
        with self._engine.begin() as conn:
            conn.execute(
                table.delete().where(table.c.run_id == self.run_id).where(table.c.step == step)
            )
            conn.execute(
                table.insert(),
                [{"run_id": self.run_id, "step": step, "values": record, "created_at": utcnow()}],
            )
        if self._tb is not None:
            for key, value in _scalars(record).items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(_scalars(record), step=step)

    def close(self, exit_code: int = 0) -> None:
        """Flush and close every sink once; ``exit_code`` != 0 marks the W&B run failed."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish(exit_code=exit_code)
        self._engine.dispose()


class SilentLog:
    """The run log of data-parallel ranks other than 0: rank 0 writes the run folder."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def close(self, exit_code: int = 0) -> None:
        pass


def open_run_log(config: TrainConfig, *, main: bool, resume_step: int | None) -> RunLog | SilentLog:
    """Rank 0 (``main``) saves the resolved config as ``RUN_DIR/config.yaml`` and opens the
    run's log; the other ranks get a :class:`SilentLog`."""
    if not main:
        return SilentLog()
    run_dir = Path(config.out)
    config.save(run_dir / "config.yaml")
    return RunLog(
        run_dir,
        run_dir.name,
        config.to_dict(),
        store_url=config.store_url,
        tensorboard=config.tensorboard,
        wandb=config.wandb,
        wandb_project=config.wandb_project,
        wandb_run_name=config.wandb_run_name,
        resume_step=resume_step,
    )
