"""Where a run's per-step metrics go: a JSONL file, the SQL store, optionally TensorBoard.

``RUN_DIR/metrics.jsonl`` gets one JSON object per step. The store (SQLite by default, any
SQLAlchemy URL) gets the run in ``runs`` (with its resolved config) and each step in
``metrics``. After a resume from step s, lines and rows past s are replaced, so the record of
a resumed run is that of one uninterrupted run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sqlalchemy.dialects import sqlite

from forkgym.store import make_engine, upgrade
from forkgym.store.models import MetricRow, RunRow, utcnow

__all__ = ["RunLog", "read_metrics"]


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None (JSON has no spelling for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunLog:
    def __init__(
        self,
        run_dir: str | Path,
        run_id: str,
        config: dict[str, Any],
        *,
        store_url: str | None = None,
        tensorboard: bool = False,
        resume_step: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.path = self.run_dir / "metrics.jsonl"
        kept = [
            m
            for m in read_metrics(self.run_dir)
            if resume_step is not None and m["step"] <= resume_step
        ]
        self.path.write_text("".join(json.dumps(m) + "\n" for m in kept))
        self._file = self.path.open("a", encoding="utf-8")
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
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        self._engine.dispose()
