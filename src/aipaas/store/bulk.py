"""Many rows in one statement: the controller's and the group commit's inserts and updates.

On PostgreSQL the rows go as one JSON document that the server turns back into rows of the
table's type (json_populate_recordset): one statement, parsed and planned once, and one call
to the C JSON encoder on this side. The driver's executemany sends a statement per row, and
each costs both sides more than the row itself; arrays per column (unnest) cost the server
as little, but the driver quotes every text element of an array in Python, which for a
kilobyte of job body cost more than executemany. Measured on 10,000 object rows with a job's
body, in transactions of 100 (four runs of each): executemany 37-48 us of client and 27-40 us
of server CPU per row, JSON 13-25 and 22-33; arrays (two runs) 109-154 and 31-34. SQLite's
executemany runs in C inside the process and stays as it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Connection,
    Dialect,
    RowMapping,
    Select,
    Table,
    TextClause,
    TextualSelect,
    Update,
    bindparam,
    insert,
    select,
    text,
    tuple_,
    update,
)


def insert_rows(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys) into ``table``."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        conn.execute(insert(table), list(rows))
        return
    columns = tuple(rows[0])
    conn.execute(_json_insert(conn.dialect, table, columns), {"rows": _as_json(rows)})


def update_rows(
    conn: Connection,
    table: Table,
    rows: Sequence[dict[str, Any]],
    *,
    match: tuple[str, ...],
    increment: tuple[str, ...] = (),
) -> int:
    """Update the row of ``table`` whose ``match`` columns equal each row's: its other keys are
    set, and each column of ``increment`` goes up by one (a column among ``match`` or not a
    key of the rows).
    Returns how many rows were updated (-1 where the driver cannot tell)."""
    if not rows:
        return 0
    columns = tuple(rows[0])
    if conn.dialect.name == "postgresql":
        result = conn.execute(
            _json_update(conn.dialect, table, columns, match, increment),
            {"rows": _as_json(rows)},
        )
        return int(result.rowcount)
    statement = _update_each(table, columns, match, increment)
    parameters = [
        {f"m_{name}" if name in match else f"v_{name}": value for name, value in row.items()}
        for row in rows
    ]
    updated = conn.execute(statement, parameters).rowcount
    return int(updated) if conn.dialect.supports_sane_multi_rowcount else -1


def rows_with_keys(
    conn: Connection, table: Table, columns: tuple[str, ...], keys: Sequence[tuple[Any, ...]]
) -> Sequence[RowMapping]:
    """The rows of ``table`` whose ``columns`` equal one of ``keys``, in one statement: on
    PostgreSQL of fixed text (an IN list was rendered, and converted by the driver, anew for
    every number of keys), elsewhere an IN list."""
    if not keys:
        return []
    if conn.dialect.name != "postgresql":
        return conn.execute(_select_in(table, columns), {"keys": list(keys)}).mappings().all()
    rows = [dict(zip(columns, key, strict=True)) for key in keys]
    return (
        conn.execute(_json_select(conn.dialect, table, columns), {"rows": _as_json(rows)})
        .mappings()
        .all()
    )


@lru_cache(maxsize=64)
def _select_in(table: Table, columns: tuple[str, ...]) -> Select[Any]:
    keyed = tuple_(*(table.c[name] for name in columns))
    return select(table).where(keyed.in_(bindparam("keys", expanding=True)))


@lru_cache(maxsize=64)
def _update_each(
    table: Table, columns: tuple[str, ...], match: tuple[str, ...], increment: tuple[str, ...]
) -> Update:
    return (
        update(table)
        .where(*(table.c[name] == bindparam(f"m_{name}") for name in match))
        .values(
            {name: bindparam(f"v_{name}") for name in columns if name not in match}
            | {name: table.c[name] + 1 for name in increment}
        )
    )


def _as_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(rows, separators=(",", ":"), default=_iso_time)


def _iso_time(value: object) -> str:
    """The JSON of what the encoder does not know: a time, as ISO 8601."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot store a {type(value).__name__} in a bulk row")


def _recordset(dialect: Dialect, table: Table) -> str:
    return f"json_populate_recordset(NULL::{dialect.identifier_preparer.quote(table.name)}, :rows)"


@lru_cache(maxsize=64)
def _json_select(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> TextualSelect:
    quote = dialect.identifier_preparer.quote
    target = quote(table.name)
    matched = " AND ".join(f"{target}.{quote(n)} = k.{quote(n)}" for n in columns)
    # A lateral subquery that cannot be flattened (OFFSET 0): one index lookup per key. As a
    # plain join the planner, which guesses a hundred keys, scanned the whole table instead.
    return text(
        f"SELECT found.* FROM {_recordset(dialect, table)} AS k CROSS JOIN LATERAL "
        f"(SELECT * FROM {target} WHERE {matched} OFFSET 0) AS found"
    ).columns(*table.c)


@lru_cache(maxsize=64)
def _json_insert(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> TextClause:
    quote = dialect.identifier_preparer.quote
    names = ", ".join(quote(name) for name in columns)
    return text(
        f"INSERT INTO {quote(table.name)} ({names}) "
        f"SELECT {names} FROM {_recordset(dialect, table)}"
    )


@lru_cache(maxsize=64)
def _json_update(
    dialect: Dialect,
    table: Table,
    columns: tuple[str, ...],
    match: tuple[str, ...],
    increment: tuple[str, ...],
) -> TextClause:
    quote = dialect.identifier_preparer.quote
    target = quote(table.name)
    values = [f"{quote(n)} = v.{quote(n)}" for n in columns if n not in match]
    values += [f"{quote(n)} = {target}.{quote(n)} + 1" for n in increment]
    matched = " AND ".join(f"{target}.{quote(n)} = v.{quote(n)}" for n in match)
    return text(
        f"UPDATE {target} SET {', '.join(values)} "
        f"FROM {_recordset(dialect, table)} AS v WHERE {matched}"
    )
