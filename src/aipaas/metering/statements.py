"""Windows, dimensions and a tenant's monthly statement (JSON and CSV)."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from aipaas.api.duration import seconds
from aipaas.api.finops import parse_moment
from aipaas.errors import FieldError, InvalidObject
from aipaas.metering.cost import DIMENSIONS, totals
from aipaas.metering.cost_ledger import cost
from aipaas.store import Store
from aipaas.store.types import as_utc

#: what a statement's lines are summed by
STATEMENT_BY: Final = ("queue", "user", "model", "pool", "tier")
_MONTH = re.compile(r"(19[7-9]\d|2\d{3})-(0[1-9]|1[0-2])")  # 1970-01 to 2999-12
_COLUMNS: Final = (
    *STATEMENT_BY,
    "currency",
    "gpuHours",
    "cpuHours",
    "memoryGiBHours",
    "cost",
    "tasks",
)


def month_start(moment: datetime) -> datetime:
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    return (start + timedelta(days=32)).replace(day=1)


def when(text: str, now: datetime, field: str) -> datetime:
    """An RFC 3339 time, a date, or a duration back from ``now`` (``24h``, ``7d``)."""
    text = text.strip()
    if text and text[0].isdigit() and text[-1] in "smhd" and "-" not in text:
        try:
            return now - timedelta(seconds=seconds(text))
        except ValueError as err:
            raise InvalidObject([FieldError(field, str(err))]) from err
    try:
        return as_utc(parse_moment(text))
    except ValueError as err:
        raise InvalidObject([FieldError(field, str(err))]) from err


def window(now: datetime, since: str | None, until: str | None) -> tuple[datetime, datetime]:
    """[since, until): from the start of this month to now unless given."""
    now = as_utc(now)
    start = when(since, now, "since") if since else month_start(now)
    end = when(until, now, "until") if until else now
    if end <= start:
        raise InvalidObject([FieldError("until", "must be after since")])
    return start, end


def dimensions(by: str) -> tuple[str, ...]:
    """``tenant,queue`` -> the dimensions, each known and named once."""
    names = tuple(part.strip() for part in by.split(",") if part.strip())
    if not names:
        raise InvalidObject([FieldError("by", f"name one or more of {', '.join(DIMENSIONS)}")])
    for name in names:
        if name not in DIMENSIONS:
            raise InvalidObject(
                [FieldError("by", f"unknown dimension {name!r}: use {', '.join(DIMENSIONS)}")]
            )
    if len(set(names)) != len(names):
        raise InvalidObject([FieldError("by", "a dimension is named twice")])
    return names


def month_window(month: str | None, now: datetime) -> tuple[str, datetime, datetime]:
    if month is None:
        start = month_start(as_utc(now))
    else:
        found = _MONTH.fullmatch(month)
        if found is None:
            raise InvalidObject(
                [FieldError("month", f"{month!r} is not a month: use YYYY-MM (1970 to 2999)")]
            )
        start = datetime(int(found[1]), int(found[2]), 1, tzinfo=UTC)
    return start.strftime("%Y-%m"), start, next_month(start)


def monthly(store: Store, tenant: str, month: str | None) -> dict[str, Any]:
    """The statement of ``tenant`` for ``month`` (YYYY-MM; this month if None): lines by
    queue, user, GPU model, pool and tier; a month not over yet counts to now."""
    name, start, end = month_window(month, store.clock.now())
    end = min(end, max(as_utc(store.clock.now()), start + timedelta(microseconds=1)))
    rows = cost(store, tenant, start, end, STATEMENT_BY)
    return {
        "tenant": tenant,
        "month": name,
        "since": start.isoformat(),
        "until": end.isoformat(),
        "lines": [row.wire() for row in rows],
        "total": totals(rows),
    }


def as_csv(statement: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["tenant", "month", *_COLUMNS])
    for line in statement["lines"]:
        writer.writerow([statement["tenant"], statement["month"], *(line[c] for c in _COLUMNS)])
    for currency, amount in statement["total"].items():
        blank = [""] * (len(STATEMENT_BY) - 1)
        writer.writerow(
            [
                statement["tenant"],
                statement["month"],
                "TOTAL",
                *blank,
                currency,
                "",
                "",
                "",
                amount,
                "",
            ]
        )
    return out.getvalue()
