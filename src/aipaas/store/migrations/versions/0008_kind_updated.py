"""An index for the watch streams' change feed (issue 24).

- ``ix_objects_kind_updated`` on (kind, updated_at): each API process reads, every half
  second while anyone watches a kind, the objects of that kind updated since its last read;
  the index makes that read as long as the changes, not as the table.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_objects_kind_updated", "objects", ["kind", "updated_at"])


def downgrade() -> None:
    op.drop_index("ix_objects_kind_updated", "objects")
