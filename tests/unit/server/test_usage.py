"""Usage through the API: GPU-hours by tenant, queue, user and model; filtered by tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api_world import Api

from aipaas.api.job import Job
from aipaas.api.meta import ObjectMeta
from aipaas.api.node import Node, NodeGpus, NodeSpec
from aipaas.metering.usage import usage
from aipaas.store import TaskRecord, TaskRepository

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: train}
spec:
  queue: research
  tasks: [{name: w, replicas: 2, command: [x], resources: {cpu: 2, gpu: 4}}]
"""


def test_usage_by_user_and_model(api: Api) -> None:
    api.client.post("/api/v1/apply", content=JOB, headers=api.as_("alice"))
    job = api.store.get("Job", "acme", "train")
    assert isinstance(job, Job)
    assert job.metadata.annotations["aipaas.dev/submitted-by"] == "alice"
    api.store.create(
        Node(
            metadata=ObjectMeta(name="dgx"),
            spec=NodeSpec(
                backend="sim", cpu="64", memory="1Ti", gpus=NodeGpus(count=8, model="H100")
            ),
        )
    )
    start = datetime(2026, 1, 1, tzinfo=UTC)
    records = [
        TaskRecord(
            job_uid=job.metadata.uid or "",
            tenant="acme",
            job_name="train",
            name=f"w-{i}",
            group_name="w",
            index=i,
            rank=i,
            node="dgx",
            gpus=(4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3),
            gpu_milli=1000,
            phase="Succeeded",
            started_at=start,
            finished_at=start + timedelta(hours=2),
        )
        for i in range(2)
    ]
    TaskRepository(api.store).insert_many(records)
    answer = api.client.get("/api/v1/usage", headers=api.as_("alice")).json()["items"]
    assert answer == [
        {
            "tenant": "acme",
            "queue": "research",
            "user": "alice",
            "gpuModel": "H100",
            "gpuHours": 16.0,
            "cpuHours": 8.0,
            "tasks": 2,
        }
    ]
    assert api.client.get("/api/v1/usage", headers=api.as_("bob")).json()["items"] == []
    assert api.client.get("/api/v1/usage?tenant=acme", headers=api.as_("bob")).status_code == 404


def test_a_running_task_counts_until_now() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    record = TaskRecord(
        job_uid="gone",
        tenant="t",
        job_name="j",
        name="w-0",
        group_name="w",
        index=0,
        rank=0,
        node="n",
        gpus=(0,),
        gpu_milli=500,
        phase="Running",
        started_at=start,
    )
    (row,) = usage([record], {}, {"n": "A100"}, start + timedelta(hours=3))
    assert (row.queue, row.user, row.gpu_model, row.gpu_hours) == (
        "unknown",
        "unknown",
        "A100",
        1.5,
    )
