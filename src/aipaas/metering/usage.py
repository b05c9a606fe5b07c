"""Usage: GPU-, CPU- and memory-hours by tenant, queue, submitting user and GPU model.

What is billed is the ledger (store/ledger.py): an entry per task attempt that ran, entered by
the controller when the attempt ends (``record_attempts``, called in its write-back
transaction), plus the platform admin's corrections; the attempts running now are counted live
from their task records. A task counts from its start to its end: its GPUs times their share,
its CPU cores, its memory. Attribution: the job's tenant and queue, the user who submitted it
(annotation ``aipaas.dev/submitted-by``, which only the server writes), the GPU model of its
node. The entries keep all of it: deleting the job, the queue or the user changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from aipaas.api.job import Job
from aipaas.api.node import Node
from aipaas.api.resources import cpu_milli, memory_mib
from aipaas.metering.attribution import POOL_LABEL, attribution
from aipaas.store import Connection, Store, TaskRecord, TaskRepository
from aipaas.store.ledger import ATTEMPT, CORRECTION, LedgerEntry, Total, insert_entries, totals
from aipaas.store.types import as_utc

SUBMITTER_ANNOTATION = "aipaas.dev/submitted-by"
CONTROLLER = "controller"  # who records attempts
_ACTIVE = ("Starting", "Running")


# A row of the report: the sums of one tenant, queue, user and GPU model.
UsageRow = Total


def ended(record: TaskRecord) -> bool:
    """Whether the record holds an attempt that ran and ended: a start and a later end, and not
    running now. (A record waiting to restart still holds the attempt that failed; it enters
    the ledger once, by its key. A restarted attempt starts without times of its own.)"""
    return (
        record.phase not in _ACTIVE
        and record.started_at is not None
        and record.finished_at is not None
        and record.finished_at >= record.started_at
    )


def record_attempts(
    store: Store, conn: Connection, changed: Sequence[TaskRecord], jobs: Iterable[Job]
) -> None:
    """The controller's hook: enter the attempts among ``changed`` that ended, in ``conn`` (the
    transaction that saves them). ``jobs``: the cycle's jobs (read only when one ended)."""
    done = [record for record in changed if ended(record)]
    if not done:
        return
    wanted = {record.job_uid for record in done}
    by_uid = {job.metadata.uid: job for job in jobs if job.metadata.uid in wanted}
    models = node_models(store, conn, {r.node for r in done if r.node and r.gpus})
    pools = node_pools(store, conn, {r.node for r in done if r.node})
    now = store.clock.now()
    entries = [
        attempt_entry(
            by_uid.get(r.job_uid),
            r,
            models.get(r.node or "", ""),
            r.finished_at or now,
            now,
            pool=pools.get(r.node or "", ""),
        )
        for r in done
    ]
    insert_entries(conn, entries)


def node_models(store: Store, conn: Connection | None, names: Iterable[str]) -> dict[str, str]:
    """The GPU model of each named node that exists."""
    return {node.name: node.spec.gpus.model for node in _nodes(store, conn, names)}


def node_pools(store: Store, conn: Connection | None, names: Iterable[str]) -> dict[str, str]:
    """The pool (label aipaas.dev/pool) of each named node that exists and has one."""
    return {
        node.name: node.metadata.labels[POOL_LABEL]
        for node in _nodes(store, conn, names)
        if POOL_LABEL in node.metadata.labels
    }


def _nodes(store: Store, conn: Connection | None, names: Iterable[str]) -> list[Node]:
    keys = [("Node", "", name) for name in sorted(names)]
    if not keys:
        return []
    if conn is None:
        with store.transaction(write=False) as tx:
            found = store.find_each(keys, conn=tx)
    else:
        found = store.find_each(keys, conn=conn)
    return [node for node in found.values() if isinstance(node, Node)]


def attempt_entry(
    job: Job | None,
    record: TaskRecord,
    gpu_model: str,
    end: datetime,
    recorded_at: datetime,
    *,
    pool: str = "",
) -> LedgerEntry:
    """The ledger entry of one attempt of ``record``'s task, from its start to ``end``. Its
    ``reason`` holds what prices it besides its resources: the node's pool and the job's
    priority class (metering/attribution.py)."""
    start = as_utc(record.started_at or end)
    hours = max((as_utc(end) - start).total_seconds(), 0.0) / 3600
    spec = next((t for t in job.spec.tasks if t.name == record.group_name), None) if job else None
    cpu = cpu_milli(spec.resources.cpu) if spec is not None else 0
    memory = memory_mib(spec.resources.memory) if spec is not None else 0
    gpu = len(record.gpus) * record.gpu_milli
    return LedgerEntry(
        kind=ATTEMPT,
        tenant=record.tenant,
        queue=job.spec.queue if job else "unknown",
        user=job.metadata.annotations.get(SUBMITTER_ANNOTATION, "unknown") if job else "unknown",
        job_name=record.job_name,
        job_uid=record.job_uid,
        task=record.name,
        attempt=record.attempt,
        gpu_model=gpu_model if record.gpus else "",
        gpu_milli=gpu,
        cpu_milli=cpu,
        memory_mib=memory,
        started_at=start,
        ended_at=as_utc(end),
        gpu_hours=hours * gpu / 1000,
        cpu_hours=hours * cpu / 1000,
        memory_gib_hours=hours * memory / 1024,
        recorded_by=CONTROLLER,
        recorded_at=recorded_at,
        reason=attribution(pool, (job.spec.priority_class_name or "") if job else ""),
        attempt_key=f"{record.job_uid}/{record.name}/{record.attempt}",
    )


def report(store: Store, tenant: str | None) -> list[UsageRow]:
    """Usage of ``tenant`` (None: all): the ledger summed by the database, plus the attempts
    running now. Reads one row per group of the ledger, not its entries, and only the jobs of
    the running attempts, so that its cost does not grow with the ledger's history."""
    return usage(running_entries(store, tenant), totals(store, tenant))


def running_entries(store: Store, tenant: str | None) -> list[LedgerEntry]:
    """What the attempts of ``tenant`` (None: all) running now have used so far."""
    running = [
        r
        for r in TaskRepository(store).active()
        if (tenant is None or r.tenant == tenant) and r.phase == "Running"
    ]
    return entries_of_running(store, running)


def entries_of_running(
    store: Store, running: Sequence[TaskRecord], known_jobs: Mapping[str, Job] | None = None
) -> list[LedgerEntry]:
    """What the running attempts ``running`` have used so far (``running_entries`` for
    records the caller holds: a controller cycle's)."""
    known = known_jobs or {}
    jobs = {r.job_uid: known[r.job_uid] for r in running if r.job_uid in known}
    jobs.update(running_jobs(store, [r for r in running if r.job_uid not in jobs]))
    models = node_models(store, None, {r.node for r in running if r.node and r.gpus})
    pools = node_pools(store, None, {r.node for r in running if r.node})
    return live_entries(running, jobs, models, store.clock.now(), pools)


def running_jobs(store: Store, records: Iterable[TaskRecord]) -> dict[str, Job]:
    """The jobs of ``records`` by uid, read by key (a job of the same name made anew after the
    record's is not its job)."""
    by_key = {("Job", r.tenant, r.job_name): r.job_uid for r in records}
    if not by_key:
        return {}
    with store.transaction(write=False) as tx:
        found = store.find_each(sorted(by_key), conn=tx)
    return {
        job.metadata.uid or "": job
        for key, job in found.items()
        if isinstance(job, Job) and job.metadata.uid == by_key[key]
    }


def live_entries(
    records: Iterable[TaskRecord],
    jobs: Mapping[str, Job],
    models: Mapping[str, str],
    now: datetime,
    pools: Mapping[str, str] | None = None,
) -> list[LedgerEntry]:
    """What the attempts running now have used so far (not stored: they enter the ledger when
    they end). ``jobs`` by uid; ``models`` and ``pools`` by node name."""
    pools = pools or {}
    return [
        attempt_entry(
            jobs.get(r.job_uid),
            r,
            models.get(r.node or "", ""),
            now,
            now,
            pool=pools.get(r.node or "", ""),
        )
        for r in records
        if r.phase == "Running" and r.started_at is not None
    ]


def usage(entries: Iterable[LedgerEntry], totals: Iterable[Total] = ()) -> list[UsageRow]:
    """Sum per (tenant, queue, user, GPU model): ``totals`` (the ledger summed by the database,
    store/ledger.py ``totals``) plus ``entries``. Corrections add to the row of what they
    correct and count no task."""
    gpu: dict[tuple[str, str, str, str], float] = defaultdict(float)
    cpu: dict[tuple[str, str, str, str], float] = defaultdict(float)
    memory: dict[tuple[str, str, str, str], float] = defaultdict(float)
    count: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for total in totals:
        key = (total.tenant, total.queue, total.user, total.gpu_model)
        gpu[key] += total.gpu_hours
        cpu[key] += total.cpu_hours
        memory[key] += total.memory_gib_hours
        count[key] += total.tasks
    for entry in entries:
        key = (entry.tenant, entry.queue, entry.user, entry.gpu_model)
        gpu[key] += entry.gpu_hours
        cpu[key] += entry.cpu_hours
        memory[key] += entry.memory_gib_hours
        count[key] += 0 if entry.kind == CORRECTION else 1
    return [
        UsageRow(
            *key,
            gpu_hours=round(gpu[key], 6),
            cpu_hours=round(cpu[key], 6),
            memory_gib_hours=round(memory[key], 6),
            tasks=count[key],
        )
        for key in sorted(count)
    ]


#: the controller's name for ``as_utc`` (controller/cycle.py, batch_cycle.py, batch_snapshot.py)
aware = as_utc
