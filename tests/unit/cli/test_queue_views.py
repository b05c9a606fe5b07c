"""`aipaas get queues` and `aipaas describe queue` against an in-process server, with the
queue status the controller writes (controller/queue_status.py) from a session's report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from aipaas.api.job import Job as ApiJob
from aipaas.api.job import JobStatus
from aipaas.api.meta import Object
from aipaas.cli.app import app
from aipaas.client import Client
from aipaas.controller.queue_status import write_queue_statuses
from aipaas.scheduler.batch.from_api import queue_tree
from aipaas.scheduler.batch.model import (
    NO_LIMIT,
    Decisions,
    Job,
    QueueReport,
    Resources,
    Snapshot,
)
from aipaas.server.app import create_app
from aipaas.server.bootstrap import ensure_admin_token
from aipaas.store import Store

ADMIN = "admin-secret-token"
SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {gpu: 16, cpu: 128, memory: 1Ti}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
spec: {weight: 2, guaranteed: {gpu: 2, cpu: 16}, quota: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: nlp, tenant: acme}
spec: {parent: research, guaranteed: {gpu: 1}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: adhoc, tenant: acme}
spec: {guaranteed: {gpu: 1}}
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: big, tenant: acme}
spec:
  queue: nlp
  tasks: [{name: w, replicas: 2, command: ["true"], resources: {gpu: 1}}]
---
apiVersion: aipaas/v1
kind: Job
metadata: {name: small, tenant: acme}
spec:
  queue: nlp
  tasks: [{name: w, command: ["true"], resources: {gpu: 1}}]
"""
GIB = 1024
runner = CliRunner()


class _Client(Client):
    """The SDK over the test server's transport; closing it leaves the test server open."""

    def __init__(self, http: TestClient) -> None:
        self.url = "http://testserver"
        # Any: starlette's TestClient is an httpx.Client, or httpx2's where that is installed
        self.http = cast(Any, http)

    def close(self) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    ensure_admin_token(store, tmp_path / "admin-token", ADMIN)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with TestClient(
        create_app(store), base_url="http://testserver/api/v1", headers=headers
    ) as http:
        answer = http.post("/apply", content=SETUP)
        assert answer.status_code == 200, answer.text
        monkeypatch.setattr(Client, "from_env", staticmethod(lambda: _Client(http)))
        yield store
    store.close()


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stdout


def report(
    fair: int, allocated: int, pending: int, *, guaranteed: int = 0, quota: Resources = NO_LIMIT
) -> QueueReport:
    """GPUs given whole; CPU 4 cores and 32 GiB of memory per GPU."""

    def amounts(gpus: int) -> Resources:
        return Resources(gpus * 1000, gpus * 4000, gpus * 32 * GIB)

    return QueueReport(
        guaranteed=amounts(guaranteed),
        quota=quota,
        fair_share=amounts(fair),
        allocated=amounts(allocated),
        pending=amounts(pending),
        borrowed=amounts(max(allocated - fair, 0)),
    )


def cycle_objects(store: Store) -> tuple[list[Object], Snapshot]:
    tenants = store.list_objects("Tenant", "")
    queues = store.list_objects("Queue", None)
    tree = queue_tree(tenants, queues)  # type: ignore[arg-type]
    jobs = [
        Job(key="acme/big", tenant="acme", queue="acme/nlp", tasks=[]),
        Job(key="acme/small", tenant="acme", queue="acme/nlp", tasks=[]),
    ]
    return [*tenants, *queues], Snapshot(now=0, nodes=[], queues=tree, jobs=jobs)


def write(store: Store, decisions: Decisions) -> int:
    objects, snapshot = cycle_objects(store)
    with store.transaction() as tx:
        return write_queue_statuses(store, objects, snapshot, decisions, conn=tx)


def decisions() -> Decisions:
    return Decisions(
        queues={
            "acme": report(8, 7, 3),
            "acme/research": report(
                6, 7, 3, guaranteed=2, quota=Resources(8000, *NO_LIMIT.as_tuple()[1:])
            ),
            "acme/nlp": report(5, 7, 3, guaranteed=1),
            "acme/adhoc": report(2, 0, 0, guaranteed=1),
        }
    )


def rows(out: str) -> dict[str, list[str]]:
    """Table rows by queue name (columns split on runs of two or more spaces)."""
    found = {}
    for line in out.splitlines()[1:]:
        cells = [c for c in line.strip().split("  ") if c.strip()]
        cells = [c.strip() for c in cells]
        found[cells[1]] = cells
    return found


class TestQueueStatusWrite:
    def test_written_in_api_units_and_only_when_changed(self, server: Store) -> None:
        assert write(server, decisions()) == 4  # the tenant and its three queues
        stored = server.get("Queue", "acme", "research").to_wire()["status"]
        assert stored["fairShare"] == {"gpu": 6, "cpu": "24", "memory": "192Gi"}
        assert stored["borrowed"] == {"gpu": 1, "cpu": "4", "memory": "32Gi"}
        assert stored["quota"] == {"gpu": 8}  # unbounded resources are left out
        assert stored["pendingJobs"] == 2 and stored["runningJobs"] == 0
        tenant = server.get("Tenant", "", "acme").to_wire()["status"]
        assert tenant["allocated"]["gpu"] == 7
        version = server.get("Queue", "acme", "research").metadata.resource_version
        # The same report again writes nothing (the cycle with nothing new stays cheap).
        assert write(server, decisions()) == 0
        assert server.get("Queue", "acme", "research").metadata.resource_version == version
        changed = decisions()
        changed.queues["acme/adhoc"] = report(2, 1, 0, guaranteed=1)
        assert write(server, changed) == 1
        assert server.get("Queue", "acme", "adhoc").to_wire()["status"]["allocated"]["gpu"] == 1

    def test_fractions_and_odd_amounts(self, server: Store) -> None:
        odd = decisions()
        odd.queues["acme/adhoc"] = QueueReport(
            guaranteed=Resources(),
            quota=NO_LIMIT,
            fair_share=Resources(2500, 1500, 1536, 40 * GIB),
            allocated=Resources(),
            pending=Resources(),
            borrowed=Resources(),
        )
        write(server, odd)
        status = server.get("Queue", "acme", "adhoc").to_wire()["status"]
        assert status["fairShare"] == {
            "gpu": 2.5,
            "cpu": "1500m",
            "memory": "1536Mi",
            "gpuMemory": "40Gi",
        }


class TestGetQueues:
    def test_table_in_tree_order_with_gpu_numbers(self, server: Store) -> None:
        write(server, decisions())
        out = cli("get", "queues")
        header = out.splitlines()[0].split()
        assert header[:4] == ["TENANT", "QUEUE", "PARENT", "WEIGHT"]
        assert "FAIR" in header and "BORROWED" in header and "QUOTA" in header
        names = [line.split()[1] for line in out.splitlines()[1:]]
        assert names == ["adhoc", "research", "nlp"]  # nlp under its parent
        table = rows(out)
        # weight, guaranteed, fair share, allocated, pending, borrowed, quota, jobs
        assert table["research"][2:] == ["-", "2", "2", "6", "7", "3", "1", "8", "0/2"]
        assert table["nlp"][2:] == ["research", "1", "1", "5", "7", "3", "2", "-", "0/2"]
        assert table["adhoc"][2:] == ["-", "1", "1", "2", "0", "0", "0", "-", "0/0"]

    def test_wide_shows_cpu_and_memory(self, server: Store) -> None:
        write(server, decisions())
        out = cli("get", "queues", "-o", "wide")
        assert "GUARANTEED (GPU/CPU/MEM)" in out
        research = next(line for line in out.splitlines() if " research " in line)
        assert "6 / 24 / 192Gi" in research  # fair share
        assert "8 / - / -" in research  # quota: GPUs bounded only

    def test_before_the_controller_wrote_status(self, server: Store) -> None:
        table = rows(cli("get", "queues"))
        # guaranteed and quota from the spec; the rest unknown
        assert table["research"][2:] == ["-", "2", "2", "-", "-", "-", "-", "8", "-"]

    def test_one_queue_and_json(self, server: Store) -> None:
        write(server, decisions())
        assert list(rows(cli("get", "queue", "nlp"))) == ["nlp"]
        item = json.loads(cli("get", "queue", "research", "-o", "json"))
        assert item["status"]["fairShare"]["gpu"] == 6
        listed = yaml.safe_load(cli("get", "queues", "-o", "yaml"))
        assert {q["metadata"]["name"] for q in listed} == {"research", "nlp", "adhoc"}

    def test_wide_is_a_table_for_other_kinds(self, server: Store) -> None:
        assert "small" in cli("get", "jobs", "-o", "wide")


class TestDescribeQueue:
    def test_numbers_per_resource_and_pending_jobs_with_reasons(self, server: Store) -> None:
        write(server, decisions())
        job = server.get("Job", "acme", "big")
        assert isinstance(job, ApiJob)
        message = "queue research is at its quota of 8 GPUs"
        server.update_status(job, JobStatus(reason="QuotaExceeded", message=message))
        out = cli("describe", "queue", "research")
        lines = out.splitlines()
        assert "Queue:     acme/research" in lines
        assert "Jobs:      0 running, 2 pending" in lines
        table = {
            line.split()[0]: line.split()[1:]
            for line in lines
            if line.startswith(("GPU ", "CPU ", "MEMORY "))
        }
        assert table["GPU"] == ["2", "6", "7", "3", "1", "8"]
        # guaranteed as the session reported it (8), not the spec's 16: the status wins
        assert table["CPU"] == ["8", "24", "28", "12", "4", "-"]
        assert table["MEMORY"] == ["64Gi", "192Gi", "224Gi", "96Gi", "32Gi", "-"]
        # jobs of its sub-queue nlp, with why they wait
        assert f"  big  (nlp)  QuotaExceeded: {message}" in lines
        assert any(line.startswith("  small  (nlp)  Submitted") for line in lines), out
        assert "Pending jobs: 2" in lines

    def test_a_queue_not_yet_seen(self, server: Store) -> None:
        out = cli("describe", "queue", "adhoc")
        assert "Status:    not yet seen by the controller" in out
        assert "Pending jobs: 0" in out
