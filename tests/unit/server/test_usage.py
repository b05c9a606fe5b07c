"""Usage through the API: the ledger and the running attempts, by tenant, queue, user and GPU
model; it survives the deletion of the job, the queue and the user; only a platform admin
corrects it, with entries of its own."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aipaas.api.job import Job, JobPhase, JobStatus
from aipaas.api.meta import ObjectMeta
from aipaas.api.node import Node, NodeGpus, NodeSpec
from aipaas.clock import VirtualClock
from aipaas.metering.usage import record_attempts
from aipaas.store import Store, TaskRecord, TaskRepository, ledger
from tests.unit.server.api_world import Api

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: train}
spec:
  queue: research
  tasks: [{name: w, replicas: 2, command: [x], resources: {cpu: 2, memory: 8Gi, gpu: 4}}]
"""
START = datetime(2026, 1, 1, tzinfo=UTC)
ROW = {
    "tenant": "acme",
    "queue": "research",
    "user": "alice",
    "gpuModel": "H100",
    "gpuHours": 16.0,
    "cpuHours": 8.0,
    "memoryGiBHours": 32.0,
    "tasks": 2,
}


def submitted(api: Api) -> Job:
    assert (
        api.client.post("/api/v1/apply", content=JOB, headers=api.as_("alice")).status_code == 200
    )
    job = api.store.get("Job", "acme", "train")
    assert isinstance(job, Job)
    api.store.create(
        Node(
            metadata=ObjectMeta(name="dgx"),
            spec=NodeSpec(
                backend="sim", cpu="64", memory="1Ti", gpus=NodeGpus(count=8, model="H100")
            ),
        )
    )
    return job


def records(job: Job, phase: str, hours: float | None) -> list[TaskRecord]:
    return [
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
            phase=phase,
            started_at=START,
            finished_at=None if hours is None else START + timedelta(hours=hours),
        )
        for i in range(2)
    ]


def ran_two_hours(api: Api) -> Job:
    """Two replicas ran two hours each, as the controller records them."""
    job = submitted(api)
    done = records(job, "Succeeded", 2)
    TaskRepository(api.store).insert_many(done)
    with api.store.transaction() as tx:
        record_attempts(api.store, tx, done, [job])
    finished = api.store.get("Job", "acme", "train")
    api.store.update_status(finished, JobStatus(phase=JobPhase.SUCCEEDED))
    return job


def report(api: Api, user: str = "alice", query: str = "") -> Any:
    answer = api.client.get(f"/api/v1/usage{query}", headers=api.as_(user))
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


def test_usage_by_user_and_model(api: Api) -> None:
    ran_two_hours(api)
    assert report(api) == [ROW]
    assert report(api, "admin") == [ROW]
    assert report(api, "bob") == []
    assert api.client.get("/api/v1/usage?tenant=acme", headers=api.as_("bob")).status_code == 404


def test_a_running_task_counts_until_now(api: Api) -> None:
    job = submitted(api)
    api.store.clock = VirtualClock(START + timedelta(hours=3))
    TaskRepository(api.store).insert_many(records(job, "Running", None))
    (row,) = report(api)
    assert (row["gpuHours"], row["cpuHours"], row["memoryGiBHours"], row["tasks"]) == (
        24.0,
        12.0,
        48.0,
        2,
    )


DELETIONS = {
    "job": [("alice", "/api/v1/jobs/train")],
    "queue": [("alice", "/api/v1/jobs/train"), ("tad", "/api/v1/queues/research")],
    "user": [("tad", "/api/v1/users/alice")],
}


@pytest.mark.parametrize("what", DELETIONS)
def test_deleting_leaves_usage_unchanged(api: Api, what: str) -> None:
    ran_two_hours(api)
    for who, path in DELETIONS[what]:
        answer = api.client.delete(path, headers=api.as_(who))
        assert answer.status_code == 200, answer.text
    if what != "user":  # the job went, and its task records with it
        assert TaskRepository(api.store).started("acme") == []
    assert report(api, "admin") == [ROW]


def test_entries_are_listed_per_tenant(api: Api) -> None:
    ran_two_hours(api)
    items = api.client.get("/api/v1/usage/entries", headers=api.as_("vera")).json()["items"]
    assert [(e["kind"], e["task"], e["user"], e["gpus"], e["gpuHours"]) for e in items] == [
        ("attempt", "w-0", "alice", 4.0, 8.0),
        ("attempt", "w-1", "alice", 4.0, 8.0),
    ]
    assert items[0]["startedAt"] == "2026-01-01T00:00:00+00:00"
    assert api.client.get("/api/v1/usage/entries", headers=api.as_("bob")).json()["items"] == []


def correction(entry: int, gpu_hours: float = -8.0) -> dict[str, Any]:
    return {"corrects": entry, "reason": "node fault", "gpuHours": gpu_hours}


@pytest.mark.parametrize("user", ["alice", "tad", "vera", "bob"])
def test_only_a_platform_admin_corrects(api: Api, user: str) -> None:
    ran_two_hours(api)
    answer = api.client.post("/api/v1/usage/corrections", json=correction(1), headers=api.as_(user))
    assert answer.status_code == 403
    assert report(api) == [ROW]


def test_a_correction_is_an_entry_of_its_own(api: Api) -> None:
    ran_two_hours(api)
    answer = api.client.post(
        "/api/v1/usage/corrections", json=correction(1), headers=api.as_("admin")
    )
    assert answer.status_code == 201, answer.text
    made = answer.json()
    assert (made["kind"], made["corrects"], made["reason"], made["recordedBy"]) == (
        "correction",
        1,
        "node fault",
        "admin",
    )
    assert (made["tenant"], made["user"], made["task"]) == ("acme", "alice", "w-0")
    items = api.client.get("/api/v1/usage/entries", headers=api.as_("alice")).json()["items"]
    assert [e["kind"] for e in items] == ["attempt", "attempt", "correction"]
    assert items[0]["gpuHours"] == 8.0  # the corrected entry is unchanged
    (row,) = report(api)
    assert (row["gpuHours"], row["tasks"]) == (8.0, 2)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(correction(99), None, id="no such entry"),
        pytest.param({"corrects": 1, "gpuHours": 1}, "reason", id="no reason"),
        pytest.param({**correction(1), "reason": " "}, "reason", id="blank reason"),
        pytest.param({**correction(1), "gpuHours": 1e12}, "gpuHours", id="huge"),
        pytest.param({**correction(1), "corrects": "1"}, "corrects", id="a string id"),
        pytest.param({**correction(1), "extra": 1}, "extra", id="unknown field"),
    ],
)
def test_bad_corrections_are_refused(api: Api, body: dict[str, Any], field: str | None) -> None:
    ran_two_hours(api)
    answer = api.client.post("/api/v1/usage/corrections", json=body, headers=api.as_("admin"))
    if field is None:
        assert answer.status_code == 404
    else:
        assert answer.status_code == 422, answer.text
        assert [f["path"] for f in answer.json()["fields"]] == [field]
    items = api.client.get("/api/v1/usage/entries", headers=api.as_("admin")).json()["items"]
    assert len(items) == 2


def test_the_report_sums_in_the_database(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report reads sums, not entries nor the tenant's jobs: whatever turns a ledger row
    into an entry, or lists objects, fails here; the answer is that of the entries summed."""
    job = ran_two_hours(api)
    api.client.post("/api/v1/usage/corrections", json=correction(1), headers=api.as_("admin"))
    api.store.clock = VirtualClock(START + timedelta(hours=3))
    running = [replace(r, name=f"r-{r.index}", phase="Running") for r in records(job, "", None)]
    TaskRepository(api.store).insert_many(running)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the usage report read the ledger's entries or listed objects")

    monkeypatch.setattr(ledger, "_entry", refused)
    monkeypatch.setattr(Store, "list_objects", refused)
    (row,) = report(api, "admin")
    # 16 GPU-hours entered, 8 taken away, 2 x 4 GPUs x 3 hours running.
    assert (row["gpuHours"], row["cpuHours"], row["memoryGiBHours"], row["tasks"]) == (
        32.0,
        20.0,
        80.0,
        4,
    )


def entries(api: Api, query: str = "", user: str = "admin") -> Any:
    return api.client.get(f"/api/v1/usage/entries{query}", headers=api.as_(user))


def test_entries_come_in_pages(api: Api) -> None:
    ran_two_hours(api)
    for _ in range(3):
        api.client.post("/api/v1/usage/corrections", json=correction(1), headers=api.as_("admin"))
    first = entries(api, "?limit=2").json()
    assert [e["id"] for e in first["items"]] == [1, 2]
    assert first["metadata"]["remainingItemCount"] == 3
    second = entries(api, f"?limit=2&continue={first['metadata']['continue']}").json()
    assert [e["id"] for e in second["items"]] == [3, 4]
    assert second["metadata"]["remainingItemCount"] == 1
    last = entries(api, f"?limit=2&continue={second['metadata']['continue']}").json()
    assert ([e["id"] for e in last["items"]], last["metadata"]) == ([5], {})
    assert [e["id"] for e in entries(api, "?after=3").json()["items"]] == [4, 5]
    assert entries(api, "?tenant=globex").json() == {"metadata": {}, "items": []}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?continue=not-a-token", "continue"),
        ("?limit=0", "limit"),
        ("?continue=eyJ2IjoxLCJhZnRlciI6Mn0&after=1", "after"),
    ],
)
def test_bad_pages_are_refused(api: Api, query: str, field: str) -> None:
    ran_two_hours(api)
    answer = entries(api, query)
    assert answer.status_code == 422, answer.text
    assert field in [f["path"].rsplit(".", 1)[-1] for f in answer.json()["fields"]]
