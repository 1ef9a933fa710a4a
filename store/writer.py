"""The one writer path: a thread that drains a queue and commits outcomes in batches.

Request handlers never write. They hand rows to :meth:`OutcomeWriter.submit` and wait on the
returned future, which resolves only after the transaction holding those rows has committed,
so an outcome is acknowledged only once it is durable. One writer means SQLite never sees two
writers; batching 100-500 rows per transaction turns a commit per request into a commit per
burst. Inserts are ``ON CONFLICT DO NOTHING`` on the outcome id and idempotency key, and the
future returns what the table holds afterwards: a retried item gets the row recorded the
first time, never a second row.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sqlalchemy import Engine, bindparam, insert, or_, select
from sqlalchemy.exc import OperationalError

from .models import OutcomeRow, RunRow, utcnow

__all__ = ["OutcomeWriter", "StoreClosed"]

_STOP = object()
_FIND = select(OutcomeRow.__table__).where(
    or_(
        OutcomeRow.id.in_(bindparam("ids", expanding=True)),
        OutcomeRow.idempotency_key.in_(bindparam("keys", expanding=True)),
    )
)


class StoreClosed(RuntimeError):
    """The writer was closed; nothing more can be recorded."""


def _dialect_insert(engine: Engine, table: Any) -> Any:
    name = engine.dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:  # pragma: no cover - other backends: plain inserts, duplicates raise
        return insert(table)
    return dialect_insert(table).on_conflict_do_nothing()


class OutcomeWriter:
    """Batched, acknowledged writes of outcome rows (dicts with the OutcomeRow columns)."""

    def __init__(self, engine: Engine, *, max_batch: int = 500, max_pending: int = 100_000) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._closed = False
        self.commits = 0
        self.rows_written = 0  # rows inserted (conflicting retries excluded)
        self._insert_runs = _dialect_insert(engine, RunRow)
        self._insert_outcomes = _dialect_insert(engine, OutcomeRow).returning(OutcomeRow.id)
        self._thread = threading.Thread(
            target=self._run, name="forkgym-outcome-writer", daemon=True
        )
        self._thread.start()

    def submit(self, rows: Sequence[dict[str, Any]]) -> Future[list[dict[str, Any]]]:
        """Queue rows; the future gives the recorded rows, in order, once committed."""
        future: Future[list[dict[str, Any]]] = Future()
        if self._closed:
            future.set_exception(StoreClosed("the outcome writer is closed"))
            return future
        self._queue.put((list(rows), future))
        return future

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the thread."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join(timeout)

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            jobs = [self._queue.get()]
            n = 0 if jobs[0] is _STOP else len(jobs[0][0])
            while n < self.max_batch:  # gather what else is waiting: one transaction for all
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                jobs.append(job)
                n += 0 if job is _STOP else len(job[0])
            if any(job is _STOP for job in jobs):
                stopping = True
            jobs = [job for job in jobs if job is not _STOP]
            if jobs:
                self._commit(jobs)

    def _commit(self, jobs: list[tuple[list[dict[str, Any]], Future]]) -> None:
        rows = [row for job_rows, _ in jobs for row in job_rows]
        for attempt in range(5):
            try:
                stored = self._write(rows)
                break
            except OperationalError as exc:  # locked by another process beyond busy_timeout
                if attempt == 4:
                    for _, future in jobs:
                        future.set_exception(exc)
                    return
                time.sleep(0.05 * 2**attempt)
            except Exception as exc:
                for _, future in jobs:
                    future.set_exception(exc)
                return
        for job_rows, future in jobs:
            future.set_result([_match(row, stored) for row in job_rows])

    def _write(self, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        runs = sorted({row["run_id"] for row in rows if row.get("run_id")})
        with self.engine.begin() as conn:
            if runs:
                conn.execute(
                    self._insert_runs, [{"id": run, "created_at": utcnow()} for run in runs]
                )
            # One multi-row INSERT ... ON CONFLICT DO NOTHING RETURNING id: the ids it returns
            # were written now; only the others (retries, races) are read back.
            inserted = {r[0] for r in conn.execute(self._insert_outcomes, rows)}
            others = [row for row in rows if row["id"] not in inserted]
            found: list[dict[str, Any]] = []
            if others:
                ids = [row["id"] for row in others]
                keys = [row["idempotency_key"] for row in others if row.get("idempotency_key")]
                found = [
                    dict(r) for r in conn.execute(_FIND, {"ids": ids, "keys": keys}).mappings()
                ]
        self.commits += 1
        self.rows_written += len(inserted)
        stored: dict[str, dict[str, Any]] = {}
        for record in [row for row in rows if row["id"] in inserted] + found:
            stored[f"id:{record['id']}"] = record
            if record.get("idempotency_key"):
                stored[f"key:{record['idempotency_key']}"] = record
        return stored


def _match(row: dict[str, Any], stored: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The recorded row for a submitted one: by idempotency key first, else by id."""
    if row.get("idempotency_key") and f"key:{row['idempotency_key']}" in stored:
        return stored[f"key:{row['idempotency_key']}"]
    return stored[f"id:{row['id']}"]
