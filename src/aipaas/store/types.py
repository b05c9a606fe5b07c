"""The store's column types: one place for what SQLite and PostgreSQL disagree on.

Used by store/tables.py (every datetime column), and ``as_utc`` by metering and the server.
SQLite keeps no time zone: a datetime written as UTC comes back naive. ``UtcDateTime`` writes
every datetime as UTC and gives every one back aware, in UTC, on both databases, so no reader
of the store mends naive datetimes itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp column that reads and writes aware UTC datetimes (naive ones written are
    taken as UTC, as the store's clock gives UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive one is taken as UTC (the store's clock gives UTC). The one
    place that mends naive datetimes: metering's ``utc`` and ``aware`` are this function."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
