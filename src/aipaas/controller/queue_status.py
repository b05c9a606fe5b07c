"""Queue and tenant status from a batch session's decisions: what ``aipaas get queues`` and
``aipaas describe queue`` show.

Each cycle the session reports, per queue node, guaranteed, quota, fair share, allocated,
pending and borrowed (``model.QueueReport``, in model units: milli-GPU, millicores, MiB). This
module turns them into status in API units (GPUs as a number, cpu and memory as quantities such
as "500m" and "64Gi") and writes a Queue's or Tenant's status only when it changed, inside the
write-back's fenced transaction: a cluster whose queues hold steady writes nothing.

Who calls it: the controller's write-back (``write_queue_statuses`` with the cycle's
transaction). Pure except for the one store call in ``write_queue_statuses``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from aipaas.api.meta import LenientModel, Object
from aipaas.api.quantity import format_quantity
from aipaas.api.queue import QueueStatus, StatusAmounts
from aipaas.scheduler.batch.model import (
    UNBOUNDED,
    Decisions,
    QueueNode,
    QueueReport,
    Resources,
    Snapshot,
)
from aipaas.store import Connection, Store

MIB = 1024 * 1024


def amounts(resources: Resources, *, limit: bool = False) -> StatusAmounts:
    """``resources`` in API units. With ``limit`` (a quota), an unbounded resource is left out;
    GPU memory is left out when zero (only clusters that share GPUs by fractions count it)."""

    def kept(value: int) -> bool:
        return not (limit and value >= UNBOUNDED)

    return StatusAmounts(
        gpu=gpus(resources.gpu_milli) if kept(resources.gpu_milli) else None,
        cpu=cores(resources.cpu_milli) if kept(resources.cpu_milli) else None,
        memory=memory(resources.memory_mib) if kept(resources.memory_mib) else None,
        gpu_memory=(
            memory(resources.gpu_memory_mib)
            if resources.gpu_memory_mib and kept(resources.gpu_memory_mib)
            else None
        ),
    )


def gpus(milli: int) -> int | float:
    """Whole GPUs as an int (2), fractions as a float (0.5)."""
    return milli // 1000 if milli % 1000 == 0 else milli / 1000


def cores(milli: int) -> str:
    """CPU as a quantity: "8" for whole cores, "1500m" otherwise."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory(mib: int) -> str:
    """Memory as a binary quantity ("64Gi", "1536Mi")."""
    return format_quantity(mib * MIB, binary=True)


def job_counts(snapshot: Snapshot, decisions: Decisions) -> dict[str, tuple[int, int]]:
    """Per queue node (leaf and every ancestor): (running jobs, pending jobs) once the cycle's
    starts and evictions are carried out. A job with a task running counts as running."""
    started: dict[str, int] = defaultdict(int)
    for start in decisions.started:
        started[start.job] += 1
    evicted: dict[str, int] = defaultdict(int)
    for eviction in decisions.evicted:
        evicted[eviction.job] += 1
    # Per leaf first, then up the tree once per leaf (not once per job: ten thousand jobs).
    leaves: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for job in snapshot.jobs:
        key = job.key
        running = (
            sum(1 for t in job.tasks if t.placement is not None)
            - evicted.get(key, 0)
            + started.get(key, 0)
        )
        leaves[job.queue][0 if running > 0 else 1] += 1
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for leaf, (running_jobs, pending_jobs) in leaves.items():
        for key in _lineage(snapshot.queues, leaf):
            counts[key][0] += running_jobs
            counts[key][1] += pending_jobs
    return {key: (r, p) for key, (r, p) in counts.items()}


def _lineage(queues: dict[str, QueueNode], leaf: str) -> Iterable[str]:
    current: str | None = leaf
    while current is not None:
        yield current
        node = queues.get(current)
        current = node.parent if node is not None else None


def status_of(report: QueueReport, running: int = 0, pending: int = 0) -> QueueStatus:
    return QueueStatus(
        guaranteed=amounts(report.guaranteed),
        quota=amounts(report.quota, limit=True),
        fair_share=amounts(report.fair_share),
        allocated=amounts(report.allocated),
        pending=amounts(report.pending),
        borrowed=amounts(report.borrowed),
        running_jobs=running,
        pending_jobs=pending,
    )


def node_key(obj: Object) -> str | None:
    """The queue-tree key of a Queue ("tenant/queue") or Tenant ("tenant"); None otherwise."""
    if obj.kind == "Queue":
        return f"{obj.tenant}/{obj.name}"
    if obj.kind == "Tenant":
        return obj.name
    return None


def queue_status_changes(
    objects: Iterable[Object], snapshot: Snapshot, decisions: Decisions
) -> list[tuple[Object, LenientModel]]:
    """(object, new status) for each Queue and Tenant whose status differs from what it has.

    An object the session did not report on (none of its jobs or children seen) keeps its
    status: the next cycle that sees it writes it.
    """
    counts = job_counts(snapshot, decisions)
    changes: list[tuple[Object, LenientModel]] = []
    for obj in objects:
        key = node_key(obj)
        report = decisions.queues.get(key) if key is not None else None
        if key is None or report is None:
            continue
        status = status_of(report, *counts.get(key, (0, 0)))
        if _wire(getattr(obj, "status", None)) != _wire(status):
            changes.append((obj, status if obj.kind == "Queue" else _lenient(status)))
    return changes


def _lenient(status: QueueStatus) -> LenientModel:
    # A Tenant's status is lenient: the object the store remembers as written must hold the
    # type its field declares, or it would serialise as an empty block.
    return LenientModel.model_validate(_wire(status))


def _wire(status: Any) -> Any:
    # Both sides as stored (wire names, JSON values): a Tenant's lenient status read back
    # compares equal to the typed status it was written from.
    # (entries left out, not null: a lenient block keeps a nested null as it is)
    return (
        None if status is None else status.model_dump(mode="json", by_alias=True, exclude_none=True)
    )


def write_queue_statuses(
    store: Store,
    objects: Sequence[Object],
    snapshot: Snapshot,
    decisions: Decisions,
    *,
    conn: Connection,
) -> int:
    """Write the status of every Queue and Tenant of ``objects`` (as read this cycle) that
    changed, in the caller's transaction ``conn`` (the write-back's fenced one); returns how
    many were written."""
    changes = queue_status_changes(objects, snapshot, decisions)
    store.write_statuses(changes, conn=conn)
    return len(changes)
