"""The first schema: objects, events, tokens, tasks.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "objects",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("uid", sa.String(36), nullable=False, unique=True),
        sa.Column("resource_version", sa.BigInteger, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("phase", sa.String(32), nullable=False, server_default=""),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kind", "tenant", "name", name="uq_objects_kind_tenant_name"),
    )
    op.create_index("ix_objects_kind_phase", "objects", ["kind", "phase"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("uid", sa.String(36), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_events_object", "events", ["kind", "tenant", "name"])
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("user", sa.String(63), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_uid", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("job_name", sa.String(63), nullable=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("group_name", sa.String(63), nullable=False),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("node_index", sa.Integer, nullable=True),
        sa.Column("gpus", sa.String(256), nullable=False, server_default=""),
        sa.Column("gpu_milli", sa.Integer, nullable=False, server_default="0"),
        sa.Column("request_id", sa.String(160), nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("restart_at", sa.Float, nullable=True),
        sa.Column("log_path", sa.Text, nullable=True),
        sa.Column("message", sa.Text, nullable=False, server_default=""),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("job_uid", "name", name="uq_tasks_job_name"),
    )
    op.create_index("ix_tasks_phase", "tasks", ["phase"])


def downgrade() -> None:
    op.drop_table("tasks")
    op.drop_table("tokens")
    op.drop_table("events")
    op.drop_table("objects")
