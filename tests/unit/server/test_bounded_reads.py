"""Bounded reads through the API: paginated lists and events with continue tokens, logs by
range, a bounded number of followers; and the CLI following the continue tokens."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from aipaas.api.job import Job, JobPhase, JobStatus
from aipaas.cli import app as cli_main
from aipaas.cli.control_objects import duration_seconds
from aipaas.client import Client
from aipaas.server import reads
from aipaas.store import TaskRecord, TaskRepository
from tests.unit.server.api_world import Api

QUEUE = "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: {name}, tenant: acme}}\n"
JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: mine}
spec:
  queue: research
  tasks: [{name: w, replicas: 2, command: ["true"]}]
"""


def app_of(api: Api) -> FastAPI:
    app = api.client.app
    assert isinstance(app, FastAPI)
    return app


def add_queues(api: Api, names: list[str]) -> None:
    body = "---\n".join(QUEUE.format(name=n) for n in names)
    answer = api.client.post("/api/v1/apply", content=body, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text


def walk(api: Api, path: str, limit: int, between: Any = None) -> tuple[list[Any], list[Any]]:
    """Every page of a list: its items and the metadata of each page."""
    items: list[Any] = []
    metas: list[Any] = []
    token: str | None = None
    while True:
        base, _, query = path.partition("?")
        params: dict[str, Any] = dict(p.split("=") for p in query.split("&") if p)
        params["limit"] = limit
        if token:
            params["continue"] = token
        answer = api.client.get(base, params=params, headers=api.as_("admin"))
        assert answer.status_code == 200, answer.text
        items.extend(answer.json()["items"])
        metas.append(answer.json()["metadata"])
        if between is not None:
            between()
        token = answer.json()["metadata"].get("continue")
        if not token:
            return items, metas


class TestListPages:
    def test_every_object_exactly_once_with_inserts_between_pages(self, api: Api) -> None:
        add_queues(api, [f"q{i:02d}" for i in range(11)])
        made = iter(range(100))

        def insert() -> None:
            add_queues(api, [f"late{next(made):02d}"])

        items, metas = walk(api, "/api/v1/queues?tenant=acme", 4, between=insert)
        names = [q["metadata"]["name"] for q in items]
        assert len(names) == len(set(names))
        assert {"research", *(f"q{i:02d}" for i in range(11))} <= set(names)
        assert all(len(m) == 0 or m["remainingItemCount"] > 0 for m in metas)
        assert metas[-1] == {}

    def test_page_metadata(self, api: Api) -> None:
        add_queues(api, [f"q{i}" for i in range(5)])
        answer = api.client.get(
            "/api/v1/queues", params={"tenant": "acme", "limit": 2}, headers=api.as_("admin")
        ).json()
        assert answer["kind"] == "QueueList"
        assert [q["metadata"]["name"] for q in answer["items"]] == ["research", "q0"]
        assert answer["metadata"]["remainingItemCount"] == 4
        everything = api.client.get("/api/v1/queues?tenant=acme", headers=api.as_("admin"))
        assert everything.json()["metadata"] == {}
        assert len(everything.json()["items"]) == 6

    def test_a_member_pages_only_its_tenant(self, api: Api) -> None:
        add_queues(api, [f"q{i}" for i in range(3)])
        items, _ = walk(api, "/api/v1/queues", 1)
        assert {q["metadata"]["tenant"] for q in items} == {"acme", "globex"}  # admin: all
        answer = api.client.get("/api/v1/queues?limit=1", headers=api.as_("bob")).json()
        assert [q["metadata"]["tenant"] for q in answer["items"]] == ["globex"]
        assert answer["metadata"] == {}

    def test_tenant_pages_count_only_tenants_the_caller_sees(self, api: Api) -> None:
        for name in ("initech", "umbrella"):
            body = f"apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {{name: {name}}}\n"
            answer = api.client.post("/api/v1/apply", content=body, headers=api.as_("admin"))
            assert answer.status_code == 200, answer.text
        admin = api.client.get("/api/v1/tenants?limit=1", headers=api.as_("admin")).json()
        assert admin["metadata"]["remainingItemCount"] == 3  # all four tenants: the admin's
        seen: list[str] = []
        token: str | None = None
        while True:  # alice (acme, the first tenant) pages the tenants one at a time
            params: dict[str, Any] = {"limit": 1} | ({"continue": token} if token else {})
            answer = api.client.get("/api/v1/tenants", params=params, headers=api.as_("alice"))
            assert answer.status_code == 200, answer.text
            assert "remainingItemCount" not in answer.json()["metadata"], answer.json()
            seen += [t["metadata"]["name"] for t in answer.json()["items"]]
            token = answer.json()["metadata"].get("continue")
            if not token:
                break
        assert seen == ["acme"]

    @pytest.mark.parametrize(
        "token",
        [
            pytest.param("garbage!", id="not base64"),
            pytest.param(base64.urlsafe_b64encode(b"not json").decode(), id="not json"),
            pytest.param(base64.urlsafe_b64encode(b"[1]").decode(), id="not an object"),
            pytest.param(base64.urlsafe_b64encode(b'{"v":1,"after":-3}').decode(), id="negative"),
            pytest.param(base64.urlsafe_b64encode(b'{"v":1,"after":"7"}').decode(), id="string"),
            pytest.param(base64.urlsafe_b64encode(b'{"v":9,"after":7}').decode(), id="version"),
            pytest.param("A" * 1001, id="too long"),
            pytest.param("A" * 999, id="long garbage"),
            pytest.param(base64.urlsafe_b64encode(b'{"v":1,"key":["n"]}').decode(), id="a key"),
        ],
    )
    @pytest.mark.parametrize("path", ["/api/v1/queues", "/api/v1/events"])
    def test_a_bad_continue_token_is_422_naming_it(self, api: Api, path: str, token: str) -> None:
        answer = api.client.get(path, params={"continue": token}, headers=api.as_("admin"))
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert body["code"] == "Invalid"
        assert [f["path"] for f in body["fields"]] == ["continue"]

    @pytest.mark.parametrize("limit", ["0", "-1", "5001", "many"])
    def test_a_bad_limit_is_422_naming_it(self, api: Api, limit: str) -> None:
        answer = api.client.get(f"/api/v1/jobs?limit={limit}", headers=api.as_("admin"))
        assert answer.status_code == 422
        assert [f["path"] for f in answer.json()["fields"]] == ["limit"]


class TestEventPages:
    def test_events_page_oldest_first(self, api: Api) -> None:
        queue = api.store.get("Queue", "acme", "research")
        before = len(api.store.list_events(tenant="acme"))
        for i in range(7):
            api.store.record_event(queue, "Said", f"m{i}")
        items, metas = walk(api, "/api/v1/events?tenant=acme", 3)
        assert [e["message"] for e in items if e["reason"] == "Said"] == [f"m{i}" for i in range(7)]
        assert len(items) == before + 7
        assert metas[0]["remainingItemCount"] == before + 7 - 3


SLICE = """apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}-gpu}}
spec:
  driver: gpu.nvidia.com
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices: [{devices}]
"""


class TestDevicePages:
    def test_every_device_once_in_pages(self, api: Api, cli: list[str]) -> None:
        for node in ("node-b", "node-a"):
            devices = ", ".join(f"{{name: gpu-{i}}}" for i in range(3))
            body = SLICE.format(node=node, devices=devices)
            answer = api.client.post("/api/v1/apply", content=body, headers=api.as_("admin"))
            assert answer.status_code == 200, answer.text
        items, metas = walk(api, "/api/v1/devices", 4)
        assert [(d["node"], d["device"]) for d in items] == [
            (node, f"gpu-{i}") for node in ("node-a", "node-b") for i in range(3)
        ]
        assert metas[0]["remainingItemCount"] == 2 and metas[-1] == {}
        out = run_cli("get", "devices", "--chunk-size", "5", "-o", "json")
        assert len(json.loads(out)) == 6
        assert len(cli) == 2
        bad = api.client.get(
            "/api/v1/devices?continue=eyJ2IjoxLCJhZnRlciI6Mn0", headers=api.as_("admin")
        )
        assert bad.status_code == 422  # a token of another kind of list
        assert [f["path"] for f in bad.json()["fields"]] == ["continue"]


@pytest.fixture
def mine(api: Api, tmp_path: Path) -> tuple[Job, list[Path]]:
    """alice's job with two tasks whose logs are files."""
    answer = api.client.post("/api/v1/apply", content=JOB, headers=api.as_("alice"))
    assert answer.status_code == 200, answer.text
    job = api.store.get("Job", "acme", "mine")
    assert isinstance(job, Job)
    paths = [tmp_path / f"w-{i}.log" for i in range(2)]
    paths[0].write_bytes(b"".join(b"zero %d\n" % i for i in range(100)))
    paths[1].write_bytes(b"one 0\none 1\n")
    TaskRepository(api.store).insert_many(
        [
            TaskRecord(job.metadata.uid or "", "acme", "mine", f"w-{i}", "w", i, i, log_path=str(p))
            for i, p in enumerate(paths)
        ]
    )
    return job, paths


class TestLogRanges:
    def test_tail_of_each_task(self, api: Api, mine: Any) -> None:
        answer = api.client.get("/api/v1/jobs/mine/logs?tail=2", headers=api.as_("alice"))
        assert answer.text == "w-0 | zero 98\nw-0 | zero 99\nw-1 | one 0\nw-1 | one 1\n"

    def test_limit_bytes_and_the_servers_cap(self, api: Api, mine: Any) -> None:
        answer = api.client.get("/api/v1/jobs/mine/logs?limitBytes=30", headers=api.as_("alice"))
        assert answer.text == "w-0 | zero 0\nw-0 | zero 1\nw-0 "  # cut short at 30 bytes
        reads.configure(app_of(api), reads.ReadLimits(log_max_bytes=15))
        capped = api.client.get("/api/v1/jobs/mine/logs?limitBytes=999", headers=api.as_("alice"))
        assert capped.text == "w-0 | zero 0\nw-"

    def test_since_leaves_out_tasks_not_written_since(self, api: Api, mine: Any) -> None:
        _, paths = mine
        old = time.time() - 7200
        os.utime(paths[0], (old, old))
        answer = api.client.get("/api/v1/jobs/mine/logs?sinceSeconds=600", headers=api.as_("alice"))
        assert answer.text == "w-1 | one 0\nw-1 | one 1\n"

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("tail=-1", "tail"),
            ("tail=x", "tail"),
            ("sinceSeconds=0", "sinceSeconds"),
            ("limitBytes=0", "limitBytes"),
        ],
    )
    def test_bad_ranges_are_422(self, api: Api, mine: Any, query: str, field: str) -> None:
        answer = api.client.get(f"/api/v1/jobs/mine/logs?{query}", headers=api.as_("alice"))
        assert answer.status_code == 422
        assert [f["path"] for f in answer.json()["fields"]] == [field]

    def test_another_tenant_cannot_read_them(self, api: Api, mine: Any) -> None:
        answer = api.client.get("/api/v1/jobs/mine/logs?tail=1", headers=api.as_("bob"))
        assert answer.status_code == 404


class TestFollowers:
    def test_followers_are_bounded_and_end_with_the_job(self, api: Api, mine: Any) -> None:
        job, paths = mine
        reads.configure(app_of(api), reads.ReadLimits(log_max_followers=2))
        outputs: list[str] = []

        def follow() -> None:
            answer = api.client.get(
                "/api/v1/jobs/mine/logs?follow=true&tail=1", headers=api.as_("alice")
            )
            outputs.append(answer.text)

        threads = [threading.Thread(target=follow) for _ in range(2)]
        for thread in threads:
            thread.start()
        watch = _wait_for(lambda: getattr(app_of(api).state, "log_watch", None))
        _wait_for(lambda: watch.followers == 2)
        refused = api.client.get("/api/v1/jobs/mine/logs?follow=true", headers=api.as_("alice"))
        assert refused.status_code == 429
        assert refused.json()["code"] == "TooManyRequests"
        assert "2 log followers" in refused.json()["message"]
        with paths[1].open("ab") as handle:
            handle.write(b"one 2\n")
        api.store.update_status(job, JobStatus(phase=JobPhase.SUCCEEDED))
        for thread in threads:
            thread.join(60)
        assert outputs == ["w-0 | zero 99\nw-1 | one 1\nw-1 | one 2\n"] * 2
        assert watch.followers == 0


def _wait_for(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("timed out")


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The CLI talking to the in-process API as the admin; yields the paths it asked for."""
    asked: list[str] = []

    def from_env(_environ: Any = None) -> Client:
        client = Client.__new__(Client)
        client.url = "http://testserver"
        http = TestClient(
            api.client.app, base_url="http://testserver/api/v1", headers=api.as_("admin")
        )
        http.event_hooks["request"].append(lambda request: asked.append(str(request.url)))
        # starlette's TestClient is an httpx2.Client: the same API as httpx.Client, another class
        client.http = http  # type: ignore[assignment]
        return client

    monkeypatch.setattr(Client, "from_env", staticmethod(from_env))
    yield asked


def run_cli(*args: str) -> str:
    result = CliRunner().invoke(cli_main.app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


class TestCliFollowsContinueTokens:
    def test_get_lists_every_page(self, api: Api, cli: list[str]) -> None:
        add_queues(api, [f"q{i}" for i in range(6)])
        out = run_cli("get", "queues", "-t", "acme", "--chunk-size", "2", "-o", "json")
        names = [q["metadata"]["name"] for q in json.loads(out)]
        assert names == ["research", *(f"q{i}" for i in range(6))]
        assert len(cli) == 4  # 7 queues in pages of 2
        assert all("limit=2" in url for url in cli)
        assert sum("continue=" in url for url in cli) == 3

    def test_events_lists_every_page(self, api: Api, cli: list[str]) -> None:
        queue = api.store.get("Queue", "acme", "research")
        for i in range(5):
            api.store.record_event(queue, "Said", f"m{i}")
        out = run_cli("events", "-t", "acme", "--chunk-size", "2", "-o", "json")
        said = [e["message"] for e in json.loads(out) if e["reason"] == "Said"]
        assert said == [f"m{i}" for i in range(5)]
        assert len(cli) >= 3

    def test_logs_tail_and_since(self, api: Api, cli: list[str], mine: Any) -> None:
        out = run_cli("logs", "job/mine", "-t", "acme", "--tail", "1", "--since", "1h")
        assert out == "w-0 | zero 99\nw-1 | one 1\n"
        assert "tail=1" in cli[-1] and "sinceSeconds=3600" in cli[-1]

    @pytest.mark.parametrize("since", ["ten minutes", "0s", "5x", "-3"])
    def test_a_bad_since_is_refused(self, since: str, cli: list[str]) -> None:
        result = CliRunner().invoke(cli_main.app, ["logs", "job/mine", "--since", since])
        assert result.exit_code == 2
        assert "--since" in result.output
        assert cli == []  # refused before asking the server


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10", 10), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400)],
)
def test_durations(text: str, seconds: int) -> None:
    assert duration_seconds(text) == seconds
