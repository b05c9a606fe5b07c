"""Tokens with ids, names, owners by uid, expiry, last use and revocation (issue 10).

Revision ID: 0003
Revises: 0002

Existing tokens: one whose user (tenant and name) still exists is given that user's uid; the
bootstrap platform-admin token (tenant "", no User object yet) keeps an empty owner until the
server's bootstrap adopts it for the admin User it creates; any other is revoked (its user is
gone: under the old schema a new user of the same name would have inherited it).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("public_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("name", sa.String(63), nullable=False, server_default=""))
        batch.add_column(sa.Column("owner_uid", sa.String(36), nullable=False, server_default=""))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    _adopt_existing(op.get_bind())
    with op.batch_alter_table("tokens") as batch:
        batch.alter_column("public_id", existing_type=sa.String(32), nullable=False)
        batch.drop_column("role")
    op.create_index("ix_tokens_public_id", "tokens", ["public_id"], unique=True)
    op.create_index("ix_tokens_owner_uid", "tokens", ["owner_uid"])
    op.create_index("ix_tokens_tenant", "tokens", ["tenant"])


def _adopt_existing(conn: sa.Connection) -> None:
    tokens = sa.table(
        "tokens",
        sa.column("id", sa.Integer),
        sa.column("user", sa.String),
        sa.column("tenant", sa.String),
        sa.column("role", sa.String),
        sa.column("public_id", sa.String),
        sa.column("owner_uid", sa.String),
        sa.column("revoked_at", sa.DateTime(timezone=True)),
    )
    objects = sa.table(
        "objects",
        sa.column("kind", sa.String),
        sa.column("tenant", sa.String),
        sa.column("name", sa.String),
        sa.column("uid", sa.String),
    )
    users = {
        (row.tenant, row.name): row.uid
        for row in conn.execute(
            sa.select(objects.c.tenant, objects.c.name, objects.c.uid).where(
                objects.c.kind == "User"
            )
        )
    }
    now = datetime.now(UTC)
    rows = conn.execute(sa.select(tokens.c.id, tokens.c.user, tokens.c.tenant, tokens.c.role))
    for row in rows.all():
        uid = users.get((row.tenant, row.user), "")
        bootstrap = not uid and row.tenant == "" and row.role == "platform-admin"
        conn.execute(
            tokens.update()
            .where(tokens.c.id == row.id)
            .values(
                public_id="tok_" + secrets.token_hex(8),
                owner_uid=uid,
                revoked_at=None if uid or bootstrap else now,
            )
        )


def downgrade() -> None:
    op.drop_index("ix_tokens_tenant", "tokens")
    op.drop_index("ix_tokens_owner_uid", "tokens")
    op.drop_index("ix_tokens_public_id", "tokens")
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("role", sa.String(32), nullable=False, server_default=""))
        for column in ("revoked_at", "last_used_at", "expires_at", "owner_uid", "name"):
            batch.drop_column(column)
        batch.drop_column("public_id")
