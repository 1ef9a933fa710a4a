"""The one writer path: a thread that drains a queue and commits outcomes in batches.

Request handlers never write. They hand rows to :meth:`OutcomeWriter.submit` and wait on the
returned future, which resolves only after the transaction holding those rows has committed,
so an outcome is acknowledged only once it is durable. One writer means SQLite never sees two
writers; batching 100-500 rows per transaction turns a commit per request into a commit per
burst. Inserts are ``ON CONFLICT DO NOTHING`` on the outcome id and idempotency key, and the
future returns what the table holds afterwards: a retried item gets the row recorded the
first time, never a second row. An id or key reused for a different item fails its request
with :class:`Conflict` and records none of that request's rows.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, insert, or_, select
from sqlalchemy.exc import OperationalError

from .models import OutcomeRow, RunRow, utcnow

__all__ = [
    "Conflict",
    "OutcomeWriter",
    "StoreClosed",
    "check_same",
    "index_records",
    "recorded_for",
]

_STOP = object()
_FIND = select(OutcomeRow.__table__).where(
    or_(
        OutcomeRow.id.in_(bindparam("ids", expanding=True)),
        OutcomeRow.idempotency_key.in_(bindparam("keys", expanding=True)),
    )
)


class StoreClosed(RuntimeError):
    """The writer was closed; nothing more can be recorded."""


class Conflict(ValueError):
    """An id or idempotency key already names a different item; nothing was recorded."""


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
        self._conn: Connection | None = None  # the writer thread's only
        self.commits = 0
        self.rows_written = 0  # rows inserted (conflicting retries excluded)
        self._insert_runs = _dialect_insert(engine, RunRow)
        self._insert_outcomes = _dialect_insert(engine, OutcomeRow)
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
        try:
            self._drain()
        finally:
            self._disconnect()

    def _drain(self) -> None:
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
        # A future cancelled while queued (its request went away) is dropped unwritten: it
        # was never acknowledged, and resolving a cancelled future would raise here.
        jobs = [job for job in jobs if job[1].set_running_or_notify_cancel()]
        if not jobs:
            return
        rows = [row for job_rows, _ in jobs for row in job_rows]
        try:
            stored = self._retrying(rows)
        except Conflict:
            # Some job reuses an id or key for different content. Roll the batch back and
            # write each job in its own transaction: only the offending jobs fail, and none of
            # their rows is recorded (nothing is recorded that is not acknowledged).
            for job_rows, future in jobs:
                try:
                    future.set_result(_matched(job_rows, self._retrying(job_rows)))
                except Exception as exc:
                    future.set_exception(exc)
            return
        except Exception as exc:
            for _, future in jobs:
                future.set_exception(exc)
            return
        for job_rows, future in jobs:
            future.set_result(_matched(job_rows, stored))

    def _retrying(self, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for attempt in range(5):
            try:
                return self._write(rows)
            except OperationalError:  # locked beyond busy_timeout, or the connection broke
                self._disconnect()
                if attempt == 4:
                    raise
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _connection(self) -> Connection:
        """The writer's own connection, held open: a pool checkout and return per batch
        cost more than the commit itself (~0.2 ms of Python per transaction here)."""
        if self._conn is None:
            self._conn = self.engine.connect()
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may not close cleanly
                self._conn.close()
            self._conn = None

    def _write(self, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Insert ``rows`` in one transaction; the recorded row for each id and key.

        Raises :class:`Conflict` (and rolls back) if an id or key is already recorded, or
        repeated in ``rows``, for a different reference or response.
        """
        runs = sorted({row["run_id"] for row in rows if row.get("run_id")})
        conn = self._connection()
        with conn.begin():
            if runs:
                conn.execute(
                    self._insert_runs, [{"id": run, "created_at": utcnow()} for run in runs]
                )
            # A plain executemany of INSERT ... ON CONFLICT DO NOTHING. Its row count says how
            # many rows went in; when that is all of them (the usual case) nothing is read back.
            # Otherwise some were retries or raced twins: read the recorded rows back. (RETURNING
            # would name the rows that went in on every batch, at the price of a multi-row
            # VALUES statement rendered and bound per batch; the common case needs no names.)
            # (pysqlite and psycopg sum the rows each statement changed; a driver that reports
            # less, e.g. psycopg2's last page only, just takes the read-back path.)
            count = conn.execute(self._insert_outcomes, rows).rowcount
            if count == len(rows):
                stored, inserted = index_records(rows), len(rows)
            else:
                ids = [row["id"] for row in rows]
                keys = [row["idempotency_key"] for row in rows if row.get("idempotency_key")]
                recorded = [
                    dict(r) for r in conn.execute(_FIND, {"ids": ids, "keys": keys}).mappings()
                ]
                mine = {(row["id"], row["request_id"]) for row in rows}
                inserted = sum((r["id"], r["request_id"]) in mine for r in recorded)
                stored = index_records(recorded)
                for row in rows:
                    check_same(_match(row, stored), row)
        self.commits += 1
        self.rows_written += inserted
        return stored


def index_records(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Recorded rows by ``id:<id>`` and ``key:<idempotency key>``, for :func:`recorded_for`."""
    stored: dict[str, dict[str, Any]] = {}
    for record in records:
        stored[f"id:{record['id']}"] = record
        if record.get("idempotency_key"):
            stored[f"key:{record['idempotency_key']}"] = record
    return stored


def check_same(recorded: dict[str, Any], row: dict[str, Any]) -> None:
    """A recorded row answers a submitted one only if both grade the same item."""
    if (recorded["reference"], recorded["response_sha256"]) == (
        row["reference"],
        row["response_sha256"],
    ):
        return
    key = row.get("idempotency_key")
    if key and recorded.get("idempotency_key") == key:
        which, value = "idempotency key", key
    else:
        which, value = "id", row["id"]
    raise Conflict(
        f"{which} {value!r} already names a different item (recorded as {recorded['id']!r})"
    )


def _matched(rows: list[dict[str, Any]], stored: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [_match(row, stored) for row in rows]


def recorded_for(row: dict[str, Any], stored: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The recorded row for a submitted one: by idempotency key first, else by id."""
    key = row.get("idempotency_key")
    return (stored.get(f"key:{key}") if key else None) or stored.get(f"id:{row['id']}")


def _match(row: dict[str, Any], stored: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """:func:`recorded_for` of a row the transaction just wrote or found: always there."""
    found = recorded_for(row, stored)
    if found is None:
        raise KeyError(row["id"])
    return found
