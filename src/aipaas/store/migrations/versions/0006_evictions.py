"""Evicted attempts (issue 11).

- ``tasks.evictions``: how many of a task's attempts were ended by preemption or reclaim; the
  controller counts ``attempt - evictions`` against the task's backoffLimit.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("evictions", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("evictions")
