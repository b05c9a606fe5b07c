"""The append-only usage ledger (issue 10): an entry per task attempt that ran, and the
platform admin's corrections as entries of their own. Attempts that ended before the upgrade
are not entered (the usage report counts from the upgrade on).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_ledger",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("attempt_key", sa.String(200), nullable=True, unique=True),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("user", sa.String(63), nullable=False),
        sa.Column("job_name", sa.String(63), nullable=False),
        sa.Column("job_uid", sa.String(36), nullable=False),
        sa.Column("task", sa.String(80), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("gpu_model", sa.String(64), nullable=False),
        sa.Column("gpu_milli", sa.Integer, nullable=False),
        sa.Column("cpu_milli", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.BigInteger, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_hours", sa.Float, nullable=False),
        sa.Column("cpu_hours", sa.Float, nullable=False),
        sa.Column("memory_gib_hours", sa.Float, nullable=False),
        sa.Column("corrects", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("recorded_by", sa.String(63), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_usage_ledger_tenant", "usage_ledger", ["tenant", "id"])


def downgrade() -> None:
    op.drop_index("ix_usage_ledger_tenant", table_name="usage_ledger")
    op.drop_table("usage_ledger")
