"""Datasets end to end: a real server, a real S3 API (moto's server), real task processes.

A two-task job reads a dataset from S3 through the node's cache and checks its checksum; a
second job on the same node reads it without one request reaching S3; the Dataset's status,
events and the API's tenant isolation (datasets and their credentials) are checked on the way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aipaas.backends.local.isolation import default_task_root
from tests.integration.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.support.server_process import (
    ADMIN,
    TASK_PYTHON,
    ServerProcess,
    free_port,
    shared_dir,
)

BUCKET = "datasets"
OBJECTS = {f"train/part-{i}.bin": os.urandom((1 << 20) + i * 4099) for i in range(4)}
OBJECTS["train/nested/labels.txt"] = b"cat\ndog\n" * 1000

READER = """
import hashlib, os, pathlib
root = pathlib.Path(os.environ["AIPAAS_DATASET_TRAIN_PATH"])
digest = hashlib.sha256()
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    digest.update(path.read_bytes())
name = os.environ["AIPAAS_JOB"] + "-" + os.environ["RANK"]
pathlib.Path({out!r}, name).write_text(digest.hexdigest())
"""


def _manifests(endpoint: str, tenant: str = "acme") -> str:
    return f"""apiVersion: aipaas/v1
kind: Secret
metadata: {{name: s3-creds, tenant: {tenant}}}
spec:
  data: {{accessKeyId: {ACCESS_KEY}, secretAccessKey: {SECRET_KEY}}}
---
apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: train, tenant: {tenant}}}
spec:
  source: s3://{BUCKET}/train
  endpoint: {endpoint}
  secretRef: s3-creds
  cache: {{replicas: 1}}
"""


def _job(name: str, out: Path, tenant: str = "acme", dataset: str = "train") -> str:
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": name, "tenant": tenant},
        "spec": {
            "queue": "research",
            "datasets": [{"name": dataset, "mountPath": "/data/train"}],
            "tasks": [
                {
                    "name": "reader",
                    "replicas": 2,
                    "command": [TASK_PYTHON, "-c", READER.format(out=str(out))],
                    "resources": {"cpu": 1, "memory": "256Mi"},
                }
            ],
        },
    }
    return json.dumps(job)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(free_port(), tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


def _apply(server: ServerProcess, text: str, token: str = ADMIN) -> httpx.Response:
    with server.http(token) as client:
        return client.post("/apply", content=text, headers={"Content-Type": "application/yaml"})


def _dataset(server: ServerProcess, name: str = "train") -> dict[str, Any]:
    with server.http() as client:
        answer = client.get(f"/datasets/{name}", params={"tenant": "acme"})
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result


def _wait_status(server: ServerProcess, check: Any, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = _dataset(server).get("status") or {}
        if check(status):
            return status
        time.sleep(0.3)
    raise AssertionError(f"dataset status never matched: {status}")


def test_jobs_read_a_dataset_from_s3_through_the_cache(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    expected = s3.upload(BUCKET, OBJECTS)
    out = shared_dir()
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    s3.forget()

    assert _apply(tenant_server, _job("first", out)).status_code == 200
    first = tenant_server.wait_phase("first", "Succeeded", timeout=90)
    assert [t["exitCode"] for t in first["status"]["tasks"]] == [0, 0]
    assert (out / "first-0").read_text() == expected
    assert (out / "first-1").read_text() == expected
    gets = [path for method, path in s3.requests() if method == "GET" and "part-" in path]
    assert gets, "the first job's data came from S3"

    def reads(state: dict[str, Any]) -> int:
        return int(state.get("hits", 0)) + int(state.get("misses", 0))

    status = _wait_status(tenant_server, lambda s: s.get("phase") == "Cached" and reads(s) == 2)
    assert status["sizeBytes"] == sum(len(b) for b in OBJECTS.values())
    assert status["files"] == len(OBJECTS)
    assert status["nodes"][0]["complete"] is True
    # Two tasks, one copy: the second waited for the first (none, when prefetch came first).
    assert status["misses"] <= 1

    s3.forget()
    assert _apply(tenant_server, _job("second", out)).status_code == 200
    tenant_server.wait_phase("second", "Succeeded", timeout=90)
    assert (out / "second-0").read_text() == expected
    assert (out / "second-1").read_text() == expected
    assert s3.requests() == [], "the second job was served from the cache alone"
    status = _wait_status(tenant_server, lambda s: reads(s) == 4)
    size, hits = status["sizeBytes"], status["hits"]
    assert hits >= 3
    assert status["bytesFromCache"] == hits * size
    assert status["bytesFromSource"] == size  # copied from S3 once

    with tenant_server.http() as client:
        params = {"tenant": "acme", "kind": "Dataset", "name": "train"}
        events = client.get("/events", params=params).json()["items"]
    assert "DatasetLoaded" in {event["reason"] for event in events}
    headers = {"Authorization": f"Bearer {ADMIN}"}
    text = httpx.get(tenant_server.url + "/metrics", headers=headers, timeout=10).text
    metrics = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("tenant") == "acme" and sample.name.startswith("aipaas_dataset_")
    }
    assert metrics["aipaas_dataset_hits"] == hits
    assert metrics["aipaas_dataset_misses"] == status["misses"]
    assert metrics["aipaas_dataset_bytes_from_source"] == size
    assert metrics["aipaas_dataset_bytes_from_cache"] == hits * size


def test_a_tenant_cannot_name_or_read_another_tenants_data(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    other = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: rival}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: rival}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: mallory, tenant: rival}
spec: {role: tenant-admin}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: vic, tenant: acme}
spec: {role: member}
"""
    assert _apply(tenant_server, other).status_code == 200
    mallory = tenant_server.cli("tokens", "create", "mallory", "--tenant", "rival").stdout.strip()
    vic = tenant_server.cli("tokens", "create", "vic", "--tenant", "acme").stdout.strip()

    # Naming acme's dataset or secret from rival: as if they did not exist.
    job = _apply(tenant_server, _job("steal", shared_dir(), tenant="rival"), token=mallory)
    assert job.status_code == 422
    assert "spec.datasets[0].name" in job.text and "tenant rival" in job.text
    borrowed = _manifests(s3.url, tenant="rival").split("---\n")[1]
    refused = _apply(tenant_server, borrowed, token=mallory)
    assert refused.status_code == 422 and "spec.secretRef" in refused.text
    cross = _apply(tenant_server, _manifests(s3.url).split("---\n")[1], token=mallory)
    assert cross.status_code == 404  # writing into acme

    with tenant_server.http(mallory) as client:
        for path in ("/secrets/s3-creds", "/datasets/train", "/Secret/s3-creds"):
            assert client.get(path, params={"tenant": "acme"}).status_code == 404
        assert client.get("/secrets", params={"tenant": "acme"}).status_code == 404
        assert client.get("/secrets").json()["items"] == []
        warm = client.post("/datasets/train/warm", params={"tenant": "acme"}, json={})
        assert warm.status_code == 404

    # Inside acme, nobody reads the values back: not a member, not an admin, no spelling.
    for token in (vic, ADMIN):
        with tenant_server.http(token) as client:
            for path in ("/secrets/s3-creds", "/Secret/s3-creds", "/SECRETS/s3-creds"):
                shown = client.get(path, params={"tenant": "acme"})
                assert shown.status_code == 200
                assert shown.json()["spec"]["data"] == {
                    "accessKeyId": "***",
                    "secretAccessKey": "***",
                }
            listed = client.get("/secrets", params={"tenant": "acme"}).json()["items"]
            assert SECRET_KEY not in json.dumps(listed) and ACCESS_KEY not in json.dumps(listed)
            watched = client.get(
                "/watch/secrets", params={"tenant": "acme", "timeoutSeconds": 1}
            ).text
            assert SECRET_KEY not in watched and "s3-creds" in watched
    with tenant_server.http(vic) as client:  # a member reads datasets but writes no secrets
        assert client.get("/datasets/train", params={"tenant": "acme"}).status_code == 200
    assert _apply(tenant_server, _manifests(s3.url), token=vic).status_code == 403


def test_warm_on_demand_then_evicted_when_its_time_to_live_ends(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    s3.upload(BUCKET, {"val/a.bin": os.urandom(300_000), "val/b.txt": b"x" * 1000})
    dataset = f"""apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: val, tenant: acme}}
spec:
  source: s3://{BUCKET}/val
  endpoint: {s3.url}
  secretRef: s3-creds
  include: ["*.bin"]
  cache: {{ttl: 30s}}  # long enough for the checks below on a loaded machine
"""
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    assert _apply(tenant_server, dataset).status_code == 200
    with tenant_server.http() as client:
        node = client.get("/nodes").json()["items"][0]["metadata"]["name"]
    warmed = tenant_server.cli("dataset", "warm", "val", "--nodes", node, "--tenant", "acme").stdout
    assert warmed == f"dataset/val warming on {node}\n"

    deadline = time.monotonic() + 90
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = _dataset(tenant_server, "val").get("status") or {}
        if state.get("phase") == "Cached":
            break
        time.sleep(0.2)
    assert state.get("phase") == "Cached", state
    assert state["files"] == 1 and state["sizeBytes"] == 300_000  # include: *.bin only
    assert state["nodes"] == [
        {"node": node, "pool": "", "bytes": 300_000, "complete": True, "files": 1, "inUse": 0}
    ]
    table = tenant_server.cli("get", "datasets", "--tenant", "acme").stdout
    row = next(cells for cells in map(str.split, table.splitlines()) if cells[:1] == ["val"])
    assert row[:6] == ["val", "acme", "Cached", "293.0KiB", "-=293.0KiB", "-"], table

    deadline = time.monotonic() + 150  # the time to live, then the controller's next pass
    while (
        time.monotonic() < deadline
        and (_dataset(tenant_server, "val").get("status") or {})["nodes"]
    ):
        time.sleep(0.3)
    assert _dataset(tenant_server, "val")["status"]["nodes"] == [], _dataset(tenant_server, "val")
    with tenant_server.http() as client:
        params = {"tenant": "acme", "kind": "Dataset", "name": "val"}
        reasons = [e["reason"] for e in client.get("/events", params=params).json()["items"]]
    assert reasons.index("WarmRequested") < reasons.index("DatasetLoaded")
    assert reasons.index("DatasetLoaded") < reasons.index("DatasetEvicted")


WRITER = """
import os, pathlib
out = pathlib.Path(os.environ["AIPAAS_OUTPUT_PATH"])
assert out == pathlib.Path(os.environ["AIPAAS_OUTPUT_0_PATH"])
(out / "model").mkdir()
(out / "model" / "weights.bin").write_bytes(b"w" * 100_000)
(out / "metrics.json").write_text('{"loss": 0.1}')
(out / "stolen").symlink_to("/etc/passwd")  # never followed by the upload
(out / "model" / "up").symlink_to("../..")
"""


def test_outputs_are_uploaded_when_the_task_ends(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    s3.upload(BUCKET, {"results/.keep": b""})
    output = {
        "path": "/out",
        "destination": f"s3://{BUCKET}/results/trainer",
        "endpoint": s3.url,
        "secretRef": "s3-creds",
    }
    spec: dict[str, Any] = {
        "queue": "research",
        "outputs": [output],
        "tasks": [{"name": "main", "command": [TASK_PYTHON, "-c", WRITER]}],
    }
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "trainer", "tenant": "acme"},
        "spec": spec,
    }
    assert _apply(tenant_server, json.dumps(job)).status_code == 200
    done = tenant_server.wait_phase("trainer", "Succeeded", timeout=90)
    assert done["status"]["tasks"][0]["exitCode"] == 0
    client = s3.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="results/trainer/")
    keys = sorted(item["Key"] for item in listed.get("Contents", []))
    assert keys == ["results/trainer/metrics.json", "results/trainer/model/weights.bin"]
    body = client.get_object(Bucket=BUCKET, Key="results/trainer/model/weights.bin")["Body"]
    assert body.read() == b"w" * 100_000

    missing = {
        **job,
        "metadata": {"name": "nowhere", "tenant": "acme"},
        "spec": {**spec, "outputs": [{**output, "secretRef": "x"}]},
    }
    refused = _apply(tenant_server, json.dumps(missing))
    assert refused.status_code == 422 and "spec.outputs[0].secretRef" in refused.text


def test_prefetch_warms_the_data_of_a_job_that_waits(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    s3.upload(BUCKET, {"queued/a.bin": os.urandom(200_000)})
    dataset = f"""apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: queued, tenant: acme}}
spec: {{source: "s3://{BUCKET}/queued", endpoint: "{s3.url}", secretRef: s3-creds}}
"""
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    assert _apply(tenant_server, dataset).status_code == 200
    job = json.loads(_job("waiting", shared_dir(), dataset="queued"))
    job["spec"]["tasks"][0]["resources"] = {"cpu": 64}  # more than the node: it waits
    assert _apply(tenant_server, json.dumps(job)).status_code == 200
    deadline = time.monotonic() + 90
    state: dict[str, Any] = {}
    while time.monotonic() < deadline and state.get("phase") != "Cached":
        state = _dataset(tenant_server, "queued").get("status") or {}
        time.sleep(0.3)
    assert state.get("phase") == "Cached", state
    assert tenant_server.phase("waiting") == "Pending"
    with tenant_server.http() as client:
        params = {"tenant": "acme", "kind": "Dataset", "name": "queued"}
        messages = [e["message"] for e in client.get("/events", params=params).json()["items"]]
        client.post("/jobs/waiting/cancel", params={"tenant": "acme"})
    assert any("for job acme/waiting" in m for m in messages), messages


PEEKER = """
import os, pathlib
target = pathlib.Path({target!r})
try:
    found = sorted(os.listdir(target))
    result = "read " + ",".join(found)
except PermissionError as err:
    result = "denied"
pathlib.Path({out!r}, os.environ["AIPAAS_TENANT"]).write_text(result)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="tasks run as per-tenant users only as root")
def test_another_tenants_task_cannot_read_the_cache(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    s3.upload(BUCKET, OBJECTS)
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    rival = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: rival}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: rival}
"""
    assert _apply(tenant_server, rival).status_code == 200
    out = shared_dir()
    assert _apply(tenant_server, _job("warmer", out)).status_code == 200
    tenant_server.wait_phase("warmer", "Succeeded", timeout=90)
    # the dataset's status is written by the controller's next pass over the caches
    _wait_status(tenant_server, lambda status: any(n["complete"] for n in status.get("nodes", [])))
    # this server's cache (other xdist workers' servers keep theirs under /var/lib too)
    tasks = default_task_root(tenant_server.data_dir)
    target = str(tasks.with_name(tasks.name + "-datasets") / "acme")
    assert Path(target).is_dir(), target
    for owner in ("acme", "rival"):
        job = {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": "peek", "tenant": owner},
            "spec": {
                "queue": "research",
                "tasks": [
                    {
                        "name": "p",
                        "command": [TASK_PYTHON, "-c", PEEKER.format(target=target, out=str(out))],
                    }
                ],
            },
        }
        assert _apply(tenant_server, json.dumps(job)).status_code == 200
        tenant_server.wait_phase("peek", "Succeeded", tenant=owner, timeout=90)
    seen = (out / "acme").read_text()
    assert seen.startswith("read ") and "train-" in seen  # its own: readable
    assert (out / "rival").read_text() == "denied"


def test_the_node_reports_its_cache(s3: S3Server, tenant_server: ServerProcess) -> None:
    s3.upload(BUCKET, OBJECTS)
    assert _apply(tenant_server, _manifests(s3.url)).status_code == 200
    assert _apply(tenant_server, _job("reporter", shared_dir())).status_code == 200
    tenant_server.wait_phase("reporter", "Succeeded", timeout=90)
    size = sum(len(b) for b in OBJECTS.values())
    deadline = time.monotonic() + 90
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with tenant_server.http() as client:
            node = client.get("/nodes").json()["items"][0]
        state = json.loads(node["metadata"]["annotations"].get("aipaas.dev/dataset-cache", "{}"))
        if state.get("complete", 0) >= 1 and state["usedBytes"] >= size:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the node never reported its cache: {state}")
    assert state["capacityBytes"] > 0 and state["entries"] >= state["complete"]
    # Nodes are every tenant's to read: no tenant's dataset is named there.
    assert "acme" not in node["metadata"]["annotations"]["aipaas.dev/dataset-cache"]
