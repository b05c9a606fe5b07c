"""Streaming from the source when the cache is cold (issue 13, item 3), on the local backend with
a real server, real task processes and a real S3 API (moto's server).

A Dataset whose policy allows streaming: a job that starts while its node's cache is cold gets
the source's URL and fsspec options instead of a path, reads S3 itself and its checksum holds,
and nothing is cached for it; once ``aipaas dataset warm`` has filled the cache, the next job
gets the cached path and S3 sees no request.
"""

from __future__ import annotations

import json
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.data_nodes import BUCKET, OBJECTS, SIZE
from tests.integration.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.support.server_process import TASK_PYTHON, ServerProcess, free_port, shared_dir

#: the task: its mode (stream or cache) and the sha256 of the files it read, in path order.
#: The task's Python is the system's: fsspec and s3fs come from the test's environment.
READER = """
import hashlib, json, os, pathlib, sys
sys.path.append({site!r})
digest = hashlib.sha256()
url = os.environ.get("AIPAAS_DATASET_TRAIN_URL")
if url:
    import fsspec
    options = json.loads(os.environ["AIPAAS_DATASET_TRAIN_STORAGE_OPTIONS"])
    fs, root = fsspec.core.url_to_fs(url, **options)
    for path in sorted(fs.find(root)):
        digest.update(fs.cat_file(path))
    mode = "stream" + ("+path" if "AIPAAS_DATASET_TRAIN_PATH" in os.environ else "")
else:
    root = pathlib.Path(os.environ["AIPAAS_DATASET_TRAIN_PATH"])
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.read_bytes())
    mode = "cache"
pathlib.Path({out!r}, os.environ["AIPAAS_JOB"]).write_text(mode + " " + digest.hexdigest())
"""

MANIFESTS = """apiVersion: aipaas/v1
kind: Secret
metadata: {{name: s3-creds, tenant: acme}}
spec:
  data: {{accessKeyId: {key}, secretAccessKey: {secret}}}
---
apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: train, tenant: acme}}
spec:
  source: s3://{bucket}/train
  endpoint: {endpoint}
  secretRef: s3-creds
  cache: {{replicas: 1, streaming: true}}
"""


def _job(name: str, out: Path) -> str:
    script = READER.format(site=sysconfig.get_paths()["purelib"], out=str(out))
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": {
                "queue": "research",
                "datasets": [{"name": "train", "mountPath": "/data/train"}],
                "tasks": [
                    {
                        "name": "reader",
                        "command": [TASK_PYTHON, "-c", script],
                        "resources": {"cpu": 1, "memory": "256Mi"},
                    }
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(free_port(), tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


def _apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        client.post("/apply", content=text).raise_for_status()


def _status(server: ServerProcess) -> dict[str, Any]:
    with server.http() as client:
        answer = client.get("/datasets/train", params={"tenant": "acme"})
        answer.raise_for_status()
        status: dict[str, Any] = answer.json().get("status") or {}
        return status


def test_a_cold_cache_streams_from_the_source_and_a_warm_one_serves_the_path(
    s3: S3Server, tenant_server: ServerProcess
) -> None:
    expected = s3.upload(BUCKET, OBJECTS)
    out = shared_dir()
    _apply(
        tenant_server,
        MANIFESTS.format(key=ACCESS_KEY, secret=SECRET_KEY, bucket=BUCKET, endpoint=s3.url),
    )
    s3.forget()

    _apply(tenant_server, _job("streamed", out))
    tenant_server.wait_phase("streamed", "Succeeded", timeout=90)
    assert (out / "streamed").read_text() == f"stream {expected}"
    gets = [path for method, path in s3.requests() if method == "GET" and "part-" in path]
    assert len(gets) >= 3, "the task read the objects from S3 itself"
    status = _status(tenant_server)
    assert not any(n.get("complete") for n in status.get("nodes", [])), status
    assert status.get("hits", 0) + status.get("misses", 0) == 0  # the cache served nothing

    tenant_server.cli("dataset", "warm", "train", "-t", "acme")
    deadline = time.monotonic() + 60
    while _status(tenant_server).get("phase") != "Cached":
        assert time.monotonic() < deadline, f"never cached: {_status(tenant_server)}"
        time.sleep(0.3)
    s3.forget()
    _apply(tenant_server, _job("cached", out))
    tenant_server.wait_phase("cached", "Succeeded", timeout=90)
    assert (out / "cached").read_text() == f"cache {expected}"
    assert s3.requests() == [], "a warm cache serves the path: S3 is not asked"
    assert _status(tenant_server)["sizeBytes"] == SIZE
