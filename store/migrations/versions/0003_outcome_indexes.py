"""Outcome indexes for the queries that exist, and no more.

0001 indexed six single columns. Each index is one more B-tree insert per recorded outcome:
on the 2-core CI machine an outcome cost 68 us to insert under 0001's six indexes and 32 us
under the two kept here (``python benchmarks/store_indexes.py``: bare sqlite3, 64-row
transactions, WAL, 600-character responses, median of 3).
The queries filter by run and by status and page by ``seq`` (the rowid, which ends every
SQLite index), so ``run_id`` and ``status`` stay indexed; request, task, hash and time
lookups are rare audits that may scan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_DROPPED = ("request_id", "task_id", "response_sha256", "created_at")


def upgrade() -> None:
    for column in _DROPPED:
        op.drop_index(
            f"ix_verification_outcomes_{column}",
            table_name="verification_outcomes",
            if_exists=True,
        )


def downgrade() -> None:
    for column in _DROPPED:
        op.create_index(f"ix_verification_outcomes_{column}", "verification_outcomes", [column])
