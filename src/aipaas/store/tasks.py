"""Task records: the controller's durable memory of each replica it placed and started.

Written only by the controller. The server reads them for logs and status. A record is written
(and committed) *before* the backend is asked to start the task, so a crash between the two is
recovered by asking again with the same idempotent request id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, select

from aipaas.store import tables
from aipaas.store.bulk import insert_rows, update_rows
from aipaas.store.store import Store

ACTIVE_PHASES = ("Starting", "Running")


@dataclass(frozen=True)
class TaskRecord:
    job_uid: str
    tenant: str
    job_name: str
    name: str  # worker-0
    group_name: str  # worker
    index: int
    rank: int
    attempt: int = 0
    phase: str = "Pending"
    node: str | None = None
    node_index: int | None = None
    gpus: tuple[int, ...] = field(default_factory=tuple)
    gpu_milli: int = 0
    request_id: str | None = None
    exit_code: int | None = None
    restart_after: datetime | None = None  # UTC: a wall-clock time (any host, any boot)
    log_path: str | None = None
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: asked to stop; the backend has not yet confirmed that this attempt no longer runs
    stopping: bool = False
    #: attempts that preemption or reclaim ended (a new attempt follows each, but
    #: ``attempt - evictions`` is what counts against backoffLimit)
    evictions: int = 0

    def with_(self, **changes: Any) -> TaskRecord:
        """A copy with ``changes``; the controller makes several per task and cycle, and
        ``dataclasses.replace`` (which runs ``__init__`` again) took 4% of its time."""
        unknown = changes.keys() - _FIELDS
        if unknown:
            raise TypeError(f"TaskRecord has no field {sorted(unknown)[0]}")
        copied = object.__new__(TaskRecord)
        copied.__dict__.update(self.__dict__, **changes)
        return copied


_FIELDS = frozenset(f.name for f in fields(TaskRecord))


class TaskRepository:
    def __init__(self, store: Store) -> None:
        self.store = store

    def insert_many(self, records: Sequence[TaskRecord], *, conn: Connection | None = None) -> None:
        if not records:
            return
        rows = [_row(record) for record in records]
        if conn is None:
            with self.store.transaction() as tx:
                insert_rows(tx, tables.tasks, rows)
        else:
            insert_rows(conn, tables.tasks, rows)

    def save(self, record: TaskRecord, *, conn: Connection | None = None) -> None:
        if conn is None:
            with self.store.transaction() as tx:
                self.save_many([record], conn=tx)
        else:
            self.save_many([record], conn=conn)

    def save_many(self, records: Sequence[TaskRecord], *, conn: Connection) -> None:
        """``save`` for many records in one statement."""
        update_rows(conn, tables.tasks, [_row(r) for r in records], match=("job_uid", "name"))

    def for_job(self, job_uid: str) -> list[TaskRecord]:
        with self.store.transaction(write=False) as tx:
            rows = (
                tx.execute(
                    select(tables.tasks)
                    .where(tables.tasks.c.job_uid == job_uid)
                    .order_by(tables.tasks.c.rank)
                )
                .mappings()
                .all()
            )
        return [_record(row) for row in rows]

    def for_jobs(self, job_uids: Sequence[str], *, conn: Connection) -> dict[str, list[TaskRecord]]:
        """The records of several jobs, by job uid, in rank order (the log followers' read)."""
        query = (
            select(tables.tasks)
            .where(tables.tasks.c.job_uid.in_(list(job_uids)))
            .order_by(tables.tasks.c.job_uid, tables.tasks.c.rank)
        )
        result: dict[str, list[TaskRecord]] = {}
        for row in conn.execute(query).mappings():
            result.setdefault(row["job_uid"], []).append(_record(row))
        return result

    def of_jobs_not_in(self, phases: Sequence[str]) -> dict[str, list[TaskRecord]]:
        """The records of every job whose phase is none of ``phases``, by job uid, in rank order.

        One statement of fixed text however many jobs there are: the driver converts and
        caches its text once (an IN list of the jobs' uids was converted anew on every call,
        a fifth of the controller's time with two thousand jobs in flight)."""
        result: dict[str, list[TaskRecord]] = {}
        with self.store.transaction(write=False) as tx:
            rows = tx.execute(_OF_JOBS_NOT_IN, {"phases": list(phases)}).all()
        for row in rows:
            record = _record_of_fields(row)
            result.setdefault(record.job_uid, []).append(record)
        return result

    def started(self, tenant: str | None = None) -> list[TaskRecord]:
        """Every record that ever started (for metering), of one tenant or all."""
        query = select(tables.tasks).where(tables.tasks.c.started_at.is_not(None))
        if tenant is not None:
            query = query.where(tables.tasks.c.tenant == tenant)
        with self.store.transaction(write=False) as tx:
            rows = tx.execute(query).mappings().all()
        return [_record(row) for row in rows]

    def active(self) -> list[TaskRecord]:
        """Tasks that hold resources: placed and not yet finished (Pending-with-node included)."""
        with self.store.transaction(write=False) as tx:
            rows = (
                tx.execute(
                    select(tables.tasks)
                    .where(tables.tasks.c.node.is_not(None))
                    .where(tables.tasks.c.phase.in_(("Pending", "Starting", "Running")))
                )
                .mappings()
                .all()
            )
        return [_record(row) for row in rows]

    def delete_job(self, job_uid: str, *, conn: Connection | None = None) -> None:
        statement = delete(tables.tasks).where(tables.tasks.c.job_uid == job_uid)
        if conn is None:
            with self.store.transaction() as tx:
                tx.execute(statement)
        else:
            conn.execute(statement)


#: the task columns in the order of TaskRecord's fields (``_record_of_fields``)
_RECORD_COLUMNS = [tables.tasks.c[f.name] for f in fields(TaskRecord)]

# A join, not ``job_uid IN (subquery)``: the databases walk the unfinished jobs (the kind and
# phase index) and look up each one's records by job uid, instead of listing every unfinished
# job's uid into a temporary set to probe (the join took half the time with 11,000 jobs).
# ``uid`` is unique in ``objects``: each record comes once.
_OF_JOBS_NOT_IN = (
    select(*_RECORD_COLUMNS)
    .join(tables.objects, tables.objects.c.uid == tables.tasks.c.job_uid)
    .where(
        tables.objects.c.kind == "Job",
        tables.objects.c.phase.not_in(bindparam("phases", expanding=True)),
    )
    .order_by(tables.tasks.c.job_uid, tables.tasks.c.rank)
)


def _row(record: TaskRecord) -> dict[str, Any]:
    return {
        "job_uid": record.job_uid,
        "tenant": record.tenant,
        "job_name": record.job_name,
        "name": record.name,
        "group_name": record.group_name,
        "index": record.index,
        "rank": record.rank,
        "attempt": record.attempt,
        "phase": record.phase,
        "node": record.node,
        "node_index": record.node_index,
        "gpus": ",".join(map(str, record.gpus)),
        "gpu_milli": record.gpu_milli,
        "request_id": record.request_id,
        "exit_code": record.exit_code,
        "restart_after": record.restart_after,
        "log_path": record.log_path,
        "message": record.message,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "stopping": record.stopping,
        "evictions": record.evictions,
    }


def _record(row: Any) -> TaskRecord:
    return TaskRecord(
        job_uid=row["job_uid"],
        tenant=row["tenant"],
        job_name=row["job_name"],
        name=row["name"],
        group_name=row["group_name"],
        index=row["index"],
        rank=row["rank"],
        attempt=row["attempt"],
        phase=row["phase"],
        node=row["node"],
        node_index=row["node_index"],
        gpus=tuple(int(g) for g in row["gpus"].split(",") if g),
        gpu_milli=row["gpu_milli"],
        request_id=row["request_id"],
        exit_code=row["exit_code"],
        restart_after=row["restart_after"],
        log_path=row["log_path"],
        message=row["message"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        stopping=bool(row["stopping"]),
        evictions=row["evictions"],
    )


def _record_of_fields(row: Sequence[Any]) -> TaskRecord:
    """``_record`` of a row of ``_RECORD_COLUMNS``, by position and without ``__init__`` (as
    ``TaskRecord.with_``): the controller reads every unfinished job's records each cycle."""
    values = dict(zip(_FIELD_ORDER, row, strict=True))
    values["gpus"] = tuple(int(g) for g in values["gpus"].split(",") if g)
    values["stopping"] = bool(values["stopping"])
    record = object.__new__(TaskRecord)
    record.__dict__.update(values)
    return record


_FIELD_ORDER = tuple(f.name for f in fields(TaskRecord))
