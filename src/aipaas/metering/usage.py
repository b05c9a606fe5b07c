"""Usage records computed from what the controller recorded of each task.

A task counts from its start to its end (or now, while it runs): its GPUs times their share,
its CPU cores. Attribution: the job's tenant and queue, the user who submitted it (annotation
``aipaas.dev/submitted-by``), the GPU model of its node. Who calls it: the server's usage route.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from aipaas.api.job import Job
from aipaas.api.resources import cpu_milli
from aipaas.store import TaskRecord

SUBMITTER_ANNOTATION = "aipaas.dev/submitted-by"


@dataclass(frozen=True)
class UsageRow:
    tenant: str
    queue: str
    user: str
    gpu_model: str
    gpu_hours: float
    cpu_hours: float
    tasks: int


def usage(
    records: Iterable[TaskRecord],
    jobs: Mapping[str, Job],
    node_models: Mapping[str, str],
    now: datetime,
) -> list[UsageRow]:
    """Sum per (tenant, queue, user, GPU model); jobs are keyed by uid (deleted ones count
    under queue and user "unknown")."""
    gpu: dict[tuple[str, str, str, str], float] = defaultdict(float)
    cpu: dict[tuple[str, str, str, str], float] = defaultdict(float)
    count: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for record in records:
        if record.started_at is None:
            continue
        end = record.finished_at or now
        hours = max((_aware(end) - _aware(record.started_at)).total_seconds(), 0.0) / 3600
        job = jobs.get(record.job_uid)
        queue = job.spec.queue if job else "unknown"
        user = job.metadata.annotations.get(SUBMITTER_ANNOTATION, "unknown") if job else "unknown"
        model = node_models.get(record.node or "", "") if record.gpus else ""
        key = (record.tenant, queue, user, model)
        gpu[key] += hours * len(record.gpus) * record.gpu_milli / 1000
        if job is not None:
            spec = next((t for t in job.spec.tasks if t.name == record.group_name), None)
            if spec is not None:
                cpu[key] += hours * cpu_milli(spec.resources.cpu) / 1000
        count[key] += 1
    return [
        UsageRow(*key, gpu_hours=round(gpu[key], 6), cpu_hours=round(cpu[key], 6), tasks=count[key])
        for key in sorted(count)
    ]


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
