"""Initial schema: runs and verification outcomes.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_STATUSES = "'correct', 'incorrect', 'invalid', 'truncated', 'timeout', 'error'"
_INFRA = "'error', 'timeout'"


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("config", sa.JSON(), nullable=True),
    )
    op.create_table(
        "verification_outcomes",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(128), nullable=False, unique=True),
        sa.Column("idempotency_key", sa.String(128), nullable=True, unique=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(128), sa.ForeignKey("runs.id"), nullable=True),
        sa.Column("task_id", sa.String(256), nullable=True),
        sa.Column("reference", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("response_sha256", sa.String(64), nullable=False),
        sa.Column("response_chars", sa.Integer(), nullable=False),
        sa.Column("extracted", sa.Text(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("verifier", sa.String(64), nullable=False),
        sa.Column("verifier_version", sa.String(256), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"status IN ({_STATUSES})", name="ck_outcome_status"),
        sa.CheckConstraint(
            f"(status IN ({_INFRA}) AND reward IS NULL) OR (status NOT IN ({_INFRA}) AND reward IS NOT NULL)",
            name="ck_outcome_reward_matches_status",
        ),
    )
    for column in ("request_id", "run_id", "task_id", "response_sha256", "status", "created_at"):
        op.create_index(f"ix_verification_outcomes_{column}", "verification_outcomes", [column])


def downgrade() -> None:
    op.drop_table("verification_outcomes")
    op.drop_table("runs")
