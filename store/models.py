"""SQLAlchemy 2.x models: runs and verification outcomes.

The outcome table keeps ``timeout``/``error`` apart from wrong answers down to the schema: a
CHECK constraint makes the database itself refuse a reward on an infrastructure status and a
missing reward on a policy status, so no code path can store a failure as a 0.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from forkgym.verifiers import INFRASTRUCTURE_STATUSES, Status

__all__ = ["Base", "MetricRow", "OutcomeRow", "RunRow", "utcnow"]

_ALL = ", ".join(f"'{s.value}'" for s in Status)
_INFRA = ", ".join(sorted(f"'{s.value}'" for s in INFRASTRUCTURE_STATUSES))


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    """A training or evaluation run that outcomes can be grouped by."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class OutcomeRow(Base):
    """One graded answer, written once (``id`` and ``idempotency_key`` are unique)."""

    __tablename__ = "verification_outcomes"
    __table_args__ = (
        CheckConstraint(f"status IN ({_ALL})", name="ck_outcome_status"),
        CheckConstraint(
            f"(status IN ({_INFRA}) AND reward IS NULL) OR (status NOT IN ({_INFRA}) AND reward IS NOT NULL)",
            name="ck_outcome_reward_matches_status",
        ),
    )
    # Indexed: only what the queries filter on (run_id, status). Each index is one more B-tree
    # insert per outcome (see migration 0003); in SQLite every index ends in the rowid, so
    # (run_id) and (status) also serve paging by ``seq`` within a run or a status.

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(128), unique=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True)
    request_id: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), index=True)
    task_id: Mapped[str | None] = mapped_column(String(256))
    reference: Mapped[str] = mapped_column(Text)
    response: Mapped[str | None] = mapped_column(Text)
    response_sha256: Mapped[str] = mapped_column(String(64))
    response_chars: Mapped[int] = mapped_column(Integer)
    extracted: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)
    reward: Mapped[float | None] = mapped_column(Float)
    verifier: Mapped[str] = mapped_column(String(64))
    verifier_version: Mapped[str] = mapped_column(String(256))
    latency_ms: Mapped[float] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MetricRow(Base):
    """One training step's metrics (a flat JSON object), at most one row per (run, step)."""

    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_metrics_run_step"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
