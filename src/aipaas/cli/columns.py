"""The table columns of `aipaas get KIND`, per kind: a registry every domain's cli module adds
its kinds to, so that `get` (plain, `-o wide`, `-w`) shows them without knowing them.

    from aipaas.cli.columns import Column, register, meta, status

    register("Dataset", [
        Column("NAME", meta("name")),
        Column("PHASE", status("phase")),
        Column("SOURCE", lambda o: o["spec"]["source"], wide_only=True),
    ])

Kinds are the canonical names (``Job``, as ``kind:`` in a manifest). A getter takes the object
as the API answers it (a dict) and returns what the cell shows (``str()`` of it; None is "-").
A kind with no registered columns gets NAME, TENANT, AGE (and SPEC in wide).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from aipaas.cli import humanize

Getter = Callable[[dict[str, Any]], object]


class Column(NamedTuple):
    header: str
    getter: Getter
    wide_only: bool = False


_REGISTRY: dict[str, list[Column]] = {}


ColumnLike = Column | tuple[str, Getter] | tuple[str, Getter, bool]


def register(kind: str, columns: Iterable[ColumnLike]) -> None:
    """Set ``kind``'s columns (replacing any registered before), in table order."""
    _REGISTRY[kind] = [
        column if isinstance(column, Column) else Column(*column) for column in columns
    ]


def columns_for(kind: str, *, wide: bool = False) -> list[Column]:
    """The columns shown for ``kind``: those that are not wide-only, or all with ``wide``."""
    columns = _REGISTRY.get(kind) or DEFAULT
    return [column for column in columns if wide or not column.wide_only]


def row(columns: list[Column], item: dict[str, Any]) -> list[str]:
    """The cells of one object; a getter that fails on an odd object shows "?", not a crash."""
    cells = []
    for column in columns:
        try:
            value = column.getter(item)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            value = "?"
        cells.append("-" if value is None or value == "" else str(value))
    return cells


# getters ------------------------------------------------------------------------------------


def meta(key: str) -> Getter:
    return lambda o: (o.get("metadata") or {}).get(key)


def spec(key: str) -> Getter:
    return lambda o: (o.get("spec") or {}).get(key)


def status(key: str, default: object = None) -> Getter:
    return lambda o: (o.get("status") or {}).get(key, default)


def _status_of(item: dict[str, Any], key: str) -> Any:
    return (item.get("status") or {}).get(key)


def age(item: dict[str, Any]) -> str:
    return humanize.age((item.get("metadata") or {}).get("creationTimestamp"))


def job_gpus(job: dict[str, Any]) -> str:
    """GPUs of the whole job: replicas x GPUs each (a fraction counts as that much of one)."""
    total = 0.0
    for task in (job.get("spec") or {}).get("tasks") or []:
        gpu = (task.get("resources") or {}).get("gpu")
        if gpu is None:
            continue
        if isinstance(gpu, dict):
            each = gpu.get("count", 1) * (gpu.get("fraction") or 1)
        else:
            each = float(gpu)
        total += each * task.get("replicas", 1)
    return humanize.count(total)


def job_duration(job: dict[str, Any]) -> str:
    state = job.get("status") or {}
    return humanize.duration(state.get("startTime"), state.get("completionTime"))


def job_nodes(job: dict[str, Any]) -> str:
    nodes = sorted(
        {t["node"] for t in (job.get("status") or {}).get("tasks") or [] if t.get("node")}
    )
    return ",".join(nodes)


def job_priority(job: dict[str, Any]) -> str:
    """The class name when it has one (``high``), else the number."""
    job_spec = job.get("spec") or {}
    return str(job_spec.get("priorityClassName") or job_spec.get("priority", ""))


def _spec_json(item: dict[str, Any]) -> str:
    return json.dumps(item.get("spec", {}))


DEFAULT = [
    Column("NAME", meta("name")),
    Column("TENANT", meta("tenant")),
    Column("AGE", age),
    Column("SPEC", _spec_json, wide_only=True),
]

register(
    "Job",
    [
        Column("NAME", meta("name")),
        Column("TENANT", meta("tenant")),
        Column("QUEUE", spec("queue")),
        Column("PHASE", status("phase", "Pending")),
        Column("PRIORITY", job_priority),
        Column("GPUS", job_gpus),
        Column("AGE", age),
        Column("DURATION", job_duration),
        Column("REASON", status("reason")),
        Column("MESSAGE", status("message"), wide_only=True),
        Column("NODES", job_nodes, wide_only=True),
        Column("PRIORITY VALUE", spec("priority"), wide_only=True),
    ],
)
register(
    "Node",
    [
        Column("NAME", meta("name")),
        Column("BACKEND", spec("backend")),
        Column("READY", status("ready")),
        Column("GPUS", lambda o: (o["spec"].get("gpus") or {}).get("count", 0)),
        Column("GPUS USED", lambda o: humanize.count(float(_status_of(o, "allocatedGpus") or 0))),
        Column("MODEL", lambda o: (o["spec"].get("gpus") or {}).get("model")),
        Column("CPU", lambda o: humanize.cores(o["spec"]["cpu"])),
        Column("CPU USED", lambda o: humanize.cores(_status_of(o, "allocatedCpu") or "0")),
        Column("MEMORY", lambda o: humanize.quantity_bytes(o["spec"]["memory"])),
        Column("AGE", age),
        Column(
            "LABELS",
            lambda o: ",".join(f"{k}={v}" for k, v in o["metadata"].get("labels", {}).items()),
            wide_only=True,
        ),
    ],
)


def _gpus_of(field: str) -> Getter:
    return lambda o: ((o.get("status") or {}).get(field) or {}).get("gpu")


register(
    "Queue",  # `get queues` prints queue_views' tree; these are for -w and other kinds' reuse
    [
        Column("NAME", meta("name")),
        Column("TENANT", meta("tenant")),
        Column("PARENT", spec("parent")),
        Column("WEIGHT", spec("weight")),
        Column("ALLOCATED GPUS", _gpus_of("allocated")),
        Column("FAIR SHARE GPUS", _gpus_of("fairShare")),
        Column("RUNNING", status("runningJobs")),
        Column("PENDING", status("pendingJobs")),
        Column("AGE", age),
    ],
)
for _kind in ("User", "Tenant"):
    register(
        _kind,
        [
            Column("NAME", meta("name")),
            Column("TENANT", meta("tenant")),
            Column("AGE", age),
            Column("SPEC", _spec_json),
        ],
    )
