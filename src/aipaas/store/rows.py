"""Rows of the objects table as objects and back, and the cache of parsed objects.

Used by the repositories of store/ (objects.py, events.py, tokens.py, changes.py) and nothing
outside store/. An object is parsed once per (uid, resourceVersion): every write bumps the
version, so a cached object is never stale.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from sqlalchemy import Connection, Table, func, select

from aipaas.api.meta import Object
from aipaas.api.registry import KINDS

ObjectKey = tuple[str, str, str]


def count_after(conn: Connection, table: Table, where: list[Any], last: int) -> int:
    """Rows matching ``where`` (its ``id > b_after`` included) after row id ``last``."""
    query = select(func.count()).select_from(table).where(*where)
    return int(conn.execute(query, {"b_after": last}).scalar_one())


def describe(kind: str, tenant: str, name: str) -> str:
    return f"{kind.lower()} {name}"


def spec_of(obj: Object) -> Any:
    return obj.model_dump(mode="json", include={"spec"})


def phase_of(obj: Object) -> str:
    status = getattr(obj, "status", None)
    phase = getattr(status, "phase", None) if status is not None else None
    return str(phase) if phase is not None else ""


def body_of(obj: Object) -> str:
    wire = obj.to_wire()
    wire.pop("status", None)
    return json.dumps(wire, separators=(",", ":"))


def status_of(obj: Object) -> str | None:
    status = getattr(obj, "status", None)
    if status is None:
        return None
    return status_json(status)


def status_json(status: Any) -> str:
    """A status as stored: compact JSON by wire names, written by pydantic's own serialiser."""
    return str(status.model_dump_json(by_alias=True))


PARSED: dict[tuple[str, int], Object] = {}
PARSED_MAX = 20_000


#: bodies read per statement when a listing reads the objects it has not parsed yet
BODY_CHUNK = 500


def to_object(row: Any) -> Object:
    """The object of a row; parsed once per (uid, resourceVersion), since every write bumps it.

    The controller lists every unfinished job each cycle: most have not changed since the last.
    Callers never mutate what they get (they copy with ``model_copy``).
    """
    key = (row["uid"], int(row["resource_version"]))
    cached = PARSED.get(key)
    if cached is not None:
        return cached
    parsed = parse(row)
    _make_room()
    PARSED[key] = parsed
    return parsed


def remember(obj: Object) -> None:
    _make_room()
    PARSED[(obj.metadata.uid or "", int(obj.metadata.resource_version or 0))] = obj


def _make_room() -> None:
    """At ``PARSED_MAX``, the oldest tenth goes (a dict keeps insertion order): mostly
    versions written over since. Clearing it all made the next listing parse every job again
    (thousands of bodies in one cycle) each time a busy cluster filled it."""
    if len(PARSED) < PARSED_MAX:
        return
    try:
        oldest = list(itertools.islice(PARSED, PARSED_MAX // 10))
    except RuntimeError:  # another thread added one meanwhile: the old way, all at once
        PARSED.clear()
        return
    for key in oldest:
        PARSED.pop(key, None)


def remember_written(obj: Object, status: Any) -> None:
    version = int(obj.metadata.resource_version or 0) + 1
    meta = obj.metadata.model_copy(update={"resource_version": str(version)})
    remember(obj.model_copy(update={"metadata": meta, "status": status}))


def parse(row: Any) -> Object:
    data = json.loads(row["body"])
    data["metadata"]["resourceVersion"] = str(row["resource_version"])
    data["metadata"]["generation"] = row["generation"]
    if row["status"] is not None:
        data["status"] = json.loads(row["status"])
    return KINDS[row["kind"]].model_validate(data)
