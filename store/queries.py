"""Read helpers over the outcome store: one outcome, pages, status counts, latency percentiles."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from sqlalchemy import Connection, bindparam, func, or_, select

from .models import OutcomeRow

__all__ = [
    "find_outcomes",
    "get_outcome",
    "iter_outcomes",
    "latency_percentiles",
    "page_outcomes",
    "slowest",
    "status_counts",
    "write_jsonl",
]

_TABLE = OutcomeRow.__table__
# Built once: a statement made per call costs ~1 ms of SQLAlchemy work on this machine (cache
# key generation for a fresh IN clause) against ~0.1 ms for a prepared one with bind params.
_BY_ID = select(_TABLE).where(OutcomeRow.id == bindparam("id"))
_BY_ID_OR_KEY = select(_TABLE).where(
    or_(OutcomeRow.id == bindparam("id"), OutcomeRow.idempotency_key == bindparam("key"))
)
_BY_IDS_OR_KEYS = select(_TABLE).where(
    or_(
        OutcomeRow.id.in_(bindparam("ids", expanding=True)),
        OutcomeRow.idempotency_key.in_(bindparam("keys", expanding=True)),
    )
)


def _where(query: Any, run_id: str | None = None, status: str | None = None) -> Any:
    if run_id is not None:
        query = query.where(OutcomeRow.run_id == run_id)
    if status is not None:
        query = query.where(OutcomeRow.status == status)
    return query


def get_outcome(conn: Connection, outcome_id: str) -> dict[str, Any] | None:
    row = conn.execute(_BY_ID, {"id": outcome_id}).mappings().first()
    return None if row is None else dict(row)


def find_outcomes(conn: Connection, ids: list[str], keys: list[str]) -> list[dict[str, Any]]:
    """Rows whose id is in ``ids`` or whose idempotency key is in ``keys``."""
    if not ids and not keys:
        return []
    if len(ids) <= 1 and len(keys) <= 1:  # the common single request: no expanding IN to render
        params = {"id": ids[0] if ids else None, "key": keys[0] if keys else None}
        rows = conn.execute(_BY_ID_OR_KEY, params).mappings()
    else:
        rows = conn.execute(_BY_IDS_OR_KEYS, {"ids": ids, "keys": keys}).mappings()
    return [dict(r) for r in rows]


def page_outcomes(
    conn: Connection,
    *,
    run_id: str | None = None,
    status: str | None = None,
    after: int = 0,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], int | None]:
    """Outcomes in insertion order after cursor ``after``; returns (rows, next cursor or None)."""
    query = _where(select(_TABLE), run_id, status).where(OutcomeRow.seq > after)
    rows = [
        dict(r) for r in conn.execute(query.order_by(OutcomeRow.seq).limit(limit + 1)).mappings()
    ]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1]["seq"] if more and rows else None)


def iter_outcomes(
    conn: Connection, *, run_id: str | None = None, status: str | None = None, chunk: int = 1000
) -> Iterator[dict[str, Any]]:
    after = 0
    while True:
        rows, after_next = page_outcomes(
            conn, run_id=run_id, status=status, after=after, limit=chunk
        )
        yield from rows
        if after_next is None:
            return
        after = after_next


def status_counts(conn: Connection, *, run_id: str | None = None) -> dict[str, int]:
    query = _where(select(OutcomeRow.status, func.count()), run_id).group_by(OutcomeRow.status)
    return {status: int(n) for status, n in conn.execute(query)}


def latency_percentiles(
    conn: Connection, *, run_id: str | None = None, percentiles: tuple[int, ...] = (50, 95, 99)
) -> dict[str, float | None]:
    """Nearest-rank latency percentiles (ms), computed in the database."""
    total = conn.execute(_where(select(func.count()).select_from(_TABLE), run_id)).scalar_one()
    out: dict[str, float | None] = {}
    for p in percentiles:
        if total == 0:
            out[f"p{p}"] = None
            continue
        rank = max(1, -(-p * total // 100))  # ceil(p/100 * n)
        query = _where(select(OutcomeRow.latency_ms), run_id).order_by(OutcomeRow.latency_ms)
        out[f"p{p}"] = float(conn.execute(query.offset(rank - 1).limit(1)).scalar_one())
    return out


def slowest(conn: Connection, n: int = 10, *, run_id: str | None = None) -> list[dict[str, Any]]:
    query = _where(select(_TABLE), run_id).order_by(OutcomeRow.latency_ms.desc()).limit(n)
    return [dict(r) for r in conn.execute(query).mappings()]


def write_jsonl(
    conn: Connection, out: TextIO, *, run_id: str | None = None, status: str | None = None
) -> int:
    """Export outcomes as JSON lines; returns the number written."""
    count = 0
    for row in iter_outcomes(conn, run_id=run_id, status=status):
        row["created_at"] = row["created_at"].isoformat() if row["created_at"] else None
        out.write(json.dumps(row) + "\n")
        count += 1
    return count
