"""The Job aipaas stores for a gang of others' pods (pure): one task group per pod, one
replica each, all started together (``minAvailable`` = the gang's size), in the queue the pods
name; the job's system annotation names the pods its tasks bind (backends/foreign_pods.py)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from aipaas.api.job import Job, JobSpec, JobStatus, TaskSpec
from aipaas.api.meta import ObjectMeta
from aipaas.api.priority import DEFAULT_CLASS, PriorityClass, resolve_priority
from aipaas.api.resources import TaskClaim, TaskResources
from aipaas.backends.foreign_pods import IMPORTED_ANNOTATION, ForeignPod
from aipaas.metering.usage import SUBMITTER_ANNOTATION

_NOT_NAME = re.compile(r"[^a-z0-9-]+")
SOURCE_LABEL = "aipaas.dev/source"


def gang_name(group: str, pods: Sequence[ForeignPod]) -> str:
    """Stable for the same pods: an import that is redone finds the job it stored."""
    digest = hashlib.sha256(",".join(sorted(p.uid for p in pods)).encode()).hexdigest()[:8]
    base = _NOT_NAME.sub("-", group.lower()).strip("-")[:50].rstrip("-") or "pods"
    return f"{base}-{digest}"


def _task(index: int, pod: ForeignPod) -> TaskSpec:
    # a pod that requests nothing (BestEffort) is counted at the least a task may ask
    resources: dict[str, Any] = {
        "cpu": f"{max(pod.cpu_milli, 1)}m",
        "memory": f"{max(pod.memory_mib, 1)}Mi",
        "claims": [TaskClaim(name=c.name, resource_claim_name=c.claim) for c in pod.claims],
    }
    if pod.gpus:
        resources["gpu"] = {"count": pod.gpus}
    return TaskSpec(
        name=f"p{index}",
        command=list(pod.command),
        resources=TaskResources.model_validate(resources),
    )


def gang_job(
    tenant: str,
    name: str,
    queue: str,
    pods: Sequence[ForeignPod],
    classes: Mapping[str, PriorityClass],
    default_class: str = DEFAULT_CLASS,
) -> Job:
    tasks = [_task(i, pod) for i, pod in enumerate(pods)]
    spec = JobSpec(queue=queue, min_available=len(pods), tasks=tasks)
    priority, preemptible = resolve_priority(spec, classes, default_class)
    spec = spec.model_copy(update={"priority": priority, "preemptible": preemptible})
    named = {f"p{i}": {"name": p.name, "uid": p.uid} for i, p in enumerate(pods)}
    meta = ObjectMeta(
        name=name,
        tenant=tenant,
        labels={SOURCE_LABEL: "kubernetes"},
        annotations={
            IMPORTED_ANNOTATION: json.dumps(named, sort_keys=True),
            SUBMITTER_ANNOTATION: f"kubernetes/{pods[0].namespace}"[:63],
        },
    )
    return Job(metadata=meta, spec=spec, status=JobStatus(reason="Submitted"))
