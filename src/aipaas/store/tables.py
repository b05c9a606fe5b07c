"""The schema, in SQLAlchemy Core. Migrations (alembic, migrations/versions) must match it.

Kept portable: the same tables run on SQLite and PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

from aipaas.store.types import UtcDateTime

metadata = MetaData()

objects = Table(
    "objects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("tenant", String(63), nullable=False),
    Column("name", String(63), nullable=False),
    Column("uid", String(36), nullable=False, unique=True),
    Column("resource_version", BigInteger, nullable=False),
    Column("generation", BigInteger, nullable=False),
    # Denormalised from status for the controller's queries (jobs not yet finished).
    Column("phase", String(32), nullable=False, server_default=""),
    Column("body", Text, nullable=False),
    Column("status", Text, nullable=True),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    UniqueConstraint("kind", "tenant", "name", name="uq_objects_kind_tenant_name"),
    Index("ix_objects_kind_phase", "kind", "phase"),
    # Store.kind_marks reads these columns of every object of a kind, each controller cycle.
    Index("ix_objects_kind_marks", "kind", "resource_version", "created_at"),
    # The watch streams' change feed reads the objects of a kind updated since a moment.
    Index("ix_objects_kind_updated", "kind", "updated_at"),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("tenant", String(63), nullable=False),
    Column("name", String(63), nullable=False),
    Column("uid", String(36), nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Index("ix_events_object", "kind", "tenant", "name"),
)

# Bearer tokens, by the hash of their secret. A token belongs to a User's uid (``owner_uid``),
# never to its name; ``user`` and ``tenant`` are copies for listing (a user's tenant never
# changes). The role is the owner's current one, read at each authentication.
tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("public_id", String(32), nullable=False),
    Column("name", String(63), nullable=False, server_default=""),
    Column("owner_uid", String(36), nullable=False, server_default=""),
    Column("user", String(63), nullable=False),
    Column("tenant", String(63), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("expires_at", UtcDateTime(), nullable=True),
    Column("last_used_at", UtcDateTime(), nullable=True),
    Column("revoked_at", UtcDateTime(), nullable=True),
    Index("ix_tokens_public_id", "public_id", unique=True),
    Index("ix_tokens_owner_uid", "owner_uid"),
    Index("ix_tokens_tenant", "tenant"),
)

# The controller's record of each task replica: where it runs, which attempt, what happened.
tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_uid", String(36), nullable=False),
    Column("tenant", String(63), nullable=False),
    Column("job_name", String(63), nullable=False),
    Column("name", String(80), nullable=False),
    Column("group_name", String(63), nullable=False),
    Column("index", Integer, nullable=False),
    Column("rank", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("phase", String(32), nullable=False),
    Column("node", String(253), nullable=True),
    Column("node_index", Integer, nullable=True),
    Column("gpus", String(256), nullable=False, server_default=""),
    Column("gpu_milli", Integer, nullable=False, server_default="0"),
    Column("request_id", String(160), nullable=True),
    Column("exit_code", Integer, nullable=True),
    # When a task may restart, in UTC: a wall-clock time, valid on any host and after a reboot.
    Column("restart_after", UtcDateTime(), nullable=True),
    Column("log_path", Text, nullable=True),
    Column("message", Text, nullable=False, server_default=""),
    Column("started_at", UtcDateTime(), nullable=True),
    Column("finished_at", UtcDateTime(), nullable=True),
    # Asked to stop, not yet confirmed stopped by the backend: no replacement starts until then.
    Column("stopping", Boolean, nullable=False, server_default=false()),
    # Attempts ended by preemption or reclaim: they do not count against backoffLimit.
    Column("evictions", Integer, nullable=False, server_default="0"),
    UniqueConstraint("job_uid", "name", name="uq_tasks_job_name"),
    Index("ix_tasks_phase", "phase"),
)

# Who runs the controller: one holder at a time, renewed each cycle (seconds since the epoch).
leases = Table(
    "leases",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("expires_at", Float, nullable=False),
    # Raised on every takeover: a start or write carrying a lower one is refused (fencing).
    Column("token", BigInteger, nullable=False, server_default="0"),
)

# Usage, append-only: an entry per task attempt that ran (written by the controller in the
# transaction that records the attempt's end) and the platform admin's corrections (entries of
# their own that name the entry they correct). Nothing here is updated or deleted, and nothing
# refers to objects by row: usage outlives its job, queue and user.
usage_ledger = Table(
    "usage_ledger",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(16), nullable=False),  # "attempt" or "correction"
    # job uid / task / attempt: one entry per attempt however often it is seen.
    Column("attempt_key", String(200), nullable=True, unique=True),
    Column("tenant", String(63), nullable=False),
    Column("queue", String(63), nullable=False),
    Column("user", String(63), nullable=False),
    Column("job_name", String(63), nullable=False),
    Column("job_uid", String(36), nullable=False),
    Column("task", String(80), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("gpu_model", String(64), nullable=False),
    Column("gpu_milli", Integer, nullable=False),  # GPUs x their share, in thousandths
    Column("cpu_milli", Integer, nullable=False),
    Column("memory_mib", BigInteger, nullable=False),
    Column("started_at", UtcDateTime(), nullable=True),
    Column("ended_at", UtcDateTime(), nullable=True),
    Column("gpu_hours", Float, nullable=False),
    Column("cpu_hours", Float, nullable=False),
    Column("memory_gib_hours", Float, nullable=False),
    Column("corrects", Integer, nullable=True),  # the id of the entry a correction corrects
    Column("reason", Text, nullable=False, server_default=""),
    Column("recorded_by", String(63), nullable=False),
    Column("recorded_at", UtcDateTime(), nullable=False),
    Index("ix_usage_ledger_tenant", "tenant", "id"),
)
