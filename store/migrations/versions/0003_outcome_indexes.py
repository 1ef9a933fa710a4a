"""Outcome indexes for the queries that exist, and no more.

0001 indexed six single columns. Each index is one more B-tree insert per recorded outcome:
on the 2-core CI machine (raw sqlite3, 64-row transactions, WAL, 600-character responses,
median of 3) an outcome cost 104 us to insert under 0001's indexes and 51 us under these.
The service filters by run and status and pages by ``seq`` (the rowid, which every SQLite
index carries), so ``(run_id, status)`` and ``(status)`` serve every query; request, task,
hash and time lookups are rare audits that may scan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_DROPPED = ("request_id", "run_id", "task_id", "response_sha256", "status", "created_at")


def upgrade() -> None:
    for column in _DROPPED:
        op.drop_index(f"ix_verification_outcomes_{column}", table_name="verification_outcomes")
    op.create_index("ix_outcomes_run_status", "verification_outcomes", ["run_id", "status"])
    op.create_index("ix_outcomes_status", "verification_outcomes", ["status"])


def downgrade() -> None:
    op.drop_index("ix_outcomes_status", table_name="verification_outcomes")
    op.drop_index("ix_outcomes_run_status", table_name="verification_outcomes")
    for column in _DROPPED:
        op.create_index(f"ix_verification_outcomes_{column}", "verification_outcomes", [column])
