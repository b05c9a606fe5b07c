"""`aipaas get queues` and `aipaas describe queue`: the queue tree's numbers as tables.

The numbers come from each Queue's status, which the controller writes every cycle that changes
them (controller/queue_status.py): guaranteed, quota, fair share, allocated, pending and
borrowed per resource. Guaranteed and quota fall back to the queue's spec while no status has
been written yet (a queue the controller has not seen); the rest show "-" then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

#: (status field, column header) of the numbers, in the order of the table
FIELDS = (
    ("guaranteed", "GUARANTEED"),
    ("fairShare", "FAIR SHARE"),
    ("allocated", "ALLOCATED"),
    ("pending", "PENDING"),
    ("borrowed", "BORROWED"),
    ("quota", "QUOTA"),
)
RESOURCES = (("gpu", "GPU"), ("cpu", "CPU"), ("memory", "MEMORY"), ("gpuMemory", "GPU MEMORY"))


def amounts(queue: dict[str, Any], field: str) -> dict[str, Any] | None:
    """The amounts of ``field`` for the queue: its status's, else (guaranteed and quota) its
    spec's; None when unknown."""
    status = queue.get("status") or {}
    if field in status:
        value: dict[str, Any] = status[field] or {}
        return value
    if field in ("guaranteed", "quota"):
        spec_value: dict[str, Any] = (queue.get("spec") or {}).get(field) or {}
        return spec_value
    return None


def cell(values: dict[str, Any] | None, resource: str, field: str) -> str:
    """One amount as shown: "-" when unknown; for a quota, "-" is no bound; else 0 when absent
    (a status leaves nothing out but GPU memory)."""
    if values is None:
        return "-"
    value = values.get(resource)
    if value is None:
        return "-" if field == "quota" or resource == "gpuMemory" else "0"
    return number(value)


def number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def tree_order(queues: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Queues by tenant, each sub-queue right after its parent: (queue, depth)."""
    children: dict[tuple[str, str | None], list[dict[str, Any]]] = defaultdict(list)
    names = {(_tenant(q), q["metadata"]["name"]) for q in queues}
    for queue in queues:
        parent = (queue.get("spec") or {}).get("parent")
        # A parent that is not in the list (not visible, or gone) leaves the queue at the top.
        key = parent if (_tenant(queue), parent) in names else None
        children[(_tenant(queue), key)].append(queue)
    out: list[tuple[dict[str, Any], int]] = []

    def walk(tenant: str, parent: str | None, depth: int) -> None:
        below = children.get((tenant, parent), [])
        for queue in sorted(below, key=lambda q: str(q["metadata"]["name"])):
            out.append((queue, depth))
            walk(tenant, queue["metadata"]["name"], depth + 1)

    for tenant in sorted({_tenant(q) for q in queues}):
        walk(tenant, None, 0)
    return out


def _tenant(queue: dict[str, Any]) -> str:
    return str(queue["metadata"].get("tenant") or "")


def queue_table(queues: list[dict[str, Any]], *, wide: bool, headers: bool = True) -> Table:
    """One row per queue; GPU numbers, or with ``wide`` "gpu / cpu / memory" in each cell."""
    table = Table(box=None, show_header=headers)
    for header in ("TENANT", "QUEUE", "PARENT", "WEIGHT"):
        table.add_column(header)
    for _, header in FIELDS:
        table.add_column(f"{header} (GPU/CPU/MEM)" if wide else header)
    table.add_column("JOBS (RUN/PEND)")
    for queue, depth in tree_order(queues):
        spec = queue.get("spec") or {}
        status = queue.get("status") or {}
        row = [
            _tenant(queue),
            "  " * depth + queue["metadata"]["name"],
            spec.get("parent") or "-",
            number(spec.get("weight", 1)),
        ]
        for field, _ in FIELDS:
            values = amounts(queue, field)
            resources = ("gpu", "cpu", "memory") if wide else ("gpu",)
            row.append(" / ".join(cell(values, r, field) for r in resources))
        jobs = "-"
        if status:
            jobs = f"{status.get('runningJobs', 0)}/{status.get('pendingJobs', 0)}"
        row.append(jobs)
        table.add_row(*row)
    return table


def print_queues(queues: list[dict[str, Any]], *, wide: bool = False, headers: bool = True) -> None:
    Console(width=240 if wide else 200).print(queue_table(queues, wide=wide, headers=headers))


def descendants(queue: dict[str, Any], queues: Iterable[dict[str, Any]]) -> set[str]:
    """The queue's name and the names of every sub-queue below it (same tenant)."""
    tenant = _tenant(queue)
    kids: dict[str, list[str]] = defaultdict(list)
    for other in queues:
        parent = (other.get("spec") or {}).get("parent")
        if _tenant(other) == tenant and parent:
            kids[parent].append(other["metadata"]["name"])
    found: set[str] = set()
    todo = [queue["metadata"]["name"]]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(kids.get(name, []))
    return found


def describe_lines(
    queue: dict[str, Any], queues: list[dict[str, Any]], jobs: list[dict[str, Any]]
) -> list[str]:
    """The queue's settings, its numbers per resource, then its pending jobs and why each
    waits (jobs of its sub-queues included)."""
    spec = queue.get("spec") or {}
    status = queue.get("status")
    meta = queue["metadata"]
    lines = [
        f"Queue:     {meta.get('tenant')}/{meta['name']}",
        f"Parent:    {spec.get('parent') or '-'}",
        f"Weight:    {number(spec.get('weight', 1))}",
        f"Priority:  {spec.get('priority', 0)}",
    ]
    if spec.get("minRuntime"):
        lines.append(f"MinRuntime: {spec['minRuntime']}")
    if status is None:
        lines.append("Status:    not yet seen by the controller")
    else:
        lines.append(
            f"Jobs:      {status.get('runningJobs', 0)} running, "
            f"{status.get('pendingJobs', 0)} pending"
        )
    lines.append("")
    headers = ["RESOURCE", *(header for _, header in FIELDS)]
    rows = []
    for resource, label in RESOURCES:
        cells = [cell(amounts(queue, field), resource, field) for field, _ in FIELDS]
        if resource == "gpuMemory" and all(c in ("-", "0") for c in cells):
            continue  # only clusters that share GPUs by fractions count GPU memory
        rows.append([label, *cells])
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        lines.append("  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)))
    names = descendants(queue, queues)
    waiting = [
        job
        for job in jobs
        if (job.get("spec") or {}).get("queue") in names
        and (job.get("status") or {}).get("phase", "Pending") == "Pending"
    ]
    lines.append("")
    lines.append(f"Pending jobs: {len(waiting)}")
    for job in waiting:
        status_of_job = job.get("status") or {}
        reason = status_of_job.get("reason") or "Pending"
        message = status_of_job.get("message")
        why = f"{reason}: {message}" if message else reason
        lines.append(f"  {job['metadata']['name']}  ({job['spec']['queue']})  {why}")
    return lines
