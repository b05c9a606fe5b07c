"""Lease fencing tokens and wall-clock restart times (issue 10).

- ``leases.token``: a counter raised on every takeover; starts and write-backs carry it, so a
  controller that lost its lease is refused (store/lease.py).
- ``tasks.restart_after``: when a task may restart, as a UTC time. It replaces ``restart_at``,
  which held a monotonic clock reading (meaningless after a reboot or on another host); a
  restart pending at the upgrade may happen at once.
- ``tasks.stopping``: the controller asked this attempt to stop and the backend has not yet
  confirmed it no longer runs; no replacement starts and its resources stay held until then.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("leases", sa.Column("token", sa.BigInteger, nullable=False, server_default="0"))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("restart_after", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("stopping", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.execute("UPDATE tasks SET restart_after = CURRENT_TIMESTAMP WHERE restart_at IS NOT NULL")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("restart_at")


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("restart_at", sa.Float, nullable=True))
        batch.drop_column("stopping")
        batch.drop_column("restart_after")
    op.drop_column("leases", "token")
