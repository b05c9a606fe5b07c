"""Many rows in one statement: the controller's and the group commit's inserts and updates.

On PostgreSQL a list of rows goes as one array per column, unnested by the server: one
statement, parsed and planned once. The driver's executemany sends a statement per row, and
each costs both sides more than the row itself (measured on 20,000 event rows: 26-43 us of
client CPU and 19-34 us of server CPU per row, against 13 and 9 unnested). SQLite's
executemany runs in C inside the process and stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Dialect, Table, TextClause, bindparam, insert, text, update


def insert_rows(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys) into ``table``."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        conn.execute(insert(table), list(rows))
        return
    columns = tuple(rows[0])
    conn.execute(_unnest_insert(conn.dialect, table, columns), _by_column(rows, columns))


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
            _unnest_update(conn.dialect, table, columns, match, increment),
            _by_column(rows, columns),
        )
        return int(result.rowcount)
    statement = (
        update(table)
        .where(*(table.c[name] == bindparam(f"m_{name}") for name in match))
        .values(
            {name: bindparam(f"v_{name}") for name in columns if name not in match}
            | {name: table.c[name] + 1 for name in increment}
        )
    )
    parameters = [
        {f"m_{name}" if name in match else f"v_{name}": value for name, value in row.items()}
        for row in rows
    ]
    updated = conn.execute(statement, parameters).rowcount
    return int(updated) if conn.dialect.supports_sane_multi_rowcount else -1


def _by_column(rows: Sequence[dict[str, Any]], columns: tuple[str, ...]) -> dict[str, list[Any]]:
    return {f"c{index}": [row[name] for row in rows] for index, name in enumerate(columns)}


def _arrays(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> str:
    types = (table.c[name].type.compile(dialect) for name in columns)
    return ", ".join(f"CAST(:c{index} AS {kind}[])" for index, kind in enumerate(types))


@lru_cache(maxsize=64)
def _unnest_insert(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> TextClause:
    quote = dialect.identifier_preparer.quote
    names = ", ".join(quote(name) for name in columns)
    return text(
        f"INSERT INTO {quote(table.name)} ({names}) "
        f"SELECT * FROM unnest({_arrays(dialect, table, columns)})"
    )


@lru_cache(maxsize=64)
def _unnest_update(
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
    aliases = ", ".join(quote(name) for name in columns)
    return text(
        f"UPDATE {target} SET {', '.join(values)} "
        f"FROM unnest({_arrays(dialect, table, columns)}) AS v({aliases}) WHERE {matched}"
    )
