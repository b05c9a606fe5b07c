"""Datasets on the Slurm backend: a real `aipaas server --backend slurm`, a real Slurm cluster
(slurm_cluster.py) and a real S3 API (moto's server, s3_server.py).

Node n2 is drained for the module, so every job lands on n1: a two-task job stages the dataset
into n1's cache inside its Slurm jobs and checks its checksum; a second job on n1 reads it with
no request reaching S3 (counted by the server); n1 reports its cache with its inventory; a warm
on demand runs the copier as a Slurm job of its own on the node asked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.data_nodes import BUCKET, OBJECTS, READER, SIZE, manifests
from tests.integration.s3_server import S3Server
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support.server_process import SETUP, TASK_PYTHON, ServerProcess, free_port, shared_dir

__all__ = ["slurm_cluster"]  # the fixture, used by name


def _job(name: str, out: Path) -> str:
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
                        "replicas": 2,
                        "command": [TASK_PYTHON, "-c", READER.format(out=str(out))],
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


@pytest.fixture(scope="module")
def node_caches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("node-caches")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, slurm_cluster: SlurmCluster, node_caches: Path
) -> Iterator[ServerProcess]:
    slurm_cluster.drain("n2", "aipaas dataset test: everything on n1")
    caches = node_caches
    process = ServerProcess(
        tmp_path_factory.mktemp("aipaas") / "data",
        backend="slurm",
        extra=["--slurm-conf", str(slurm_cluster.conf)],
        env={"AIPAAS_DATASET_NODE_CACHE_ROOT": str(caches)},
    ).start()
    process.cli("apply", "-f", "-", input=SETUP)
    yield process
    process.stop()
    slurm_cluster.resume("n2")


def _apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        client.post("/apply", content=text).raise_for_status()


def _wait(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _status(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.http() as client:
        answer = client.get(f"/datasets/{name}", params={"tenant": "acme"})
        answer.raise_for_status()
        status: dict[str, Any] = answer.json().get("status") or {}
        return status


def _node(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.http() as client:
        items = client.get("/nodes").json()["items"]
    return next(n for n in items if n["metadata"]["name"] == name)


def test_slurm_jobs_read_a_dataset_through_their_nodes_cache(
    s3: S3Server, server: ServerProcess, node_caches: Path
) -> None:
    expected = s3.upload(BUCKET, OBJECTS)
    out = shared_dir()
    _apply(server, manifests(s3.url))
    s3.forget()

    _apply(server, _job("first", out))
    first = server.wait_phase("first", "Succeeded", timeout=120)
    assert {t["node"] for t in first["status"]["tasks"]} == {"n1"}
    assert (out / "first-0").read_text() == expected
    assert (out / "first-1").read_text() == expected
    gets = [path for method, path in s3.requests() if method == "GET" and "part-" in path]
    assert gets, "the first job's data came from S3"
    status = _wait(
        "train cached on n1",
        lambda: (s := _status(server, "train")).get("phase") == "Cached" and s,
    )
    assert status["sizeBytes"] == SIZE
    assert [(n["node"], n["complete"]) for n in status["nodes"]] == [("n1", True)]
    # In n1's directory under the configured root (settings.dataset_node_cache_root)
    (entry,) = (node_caches / "n1" / "acme").iterdir()
    assert sum(f.stat().st_size for f in (entry / "data").rglob("*") if f.is_file()) == SIZE

    def cache_state() -> dict[str, Any]:
        annotations = _node(server, "n1")["metadata"].get("annotations") or {}
        state: dict[str, Any] = json.loads(annotations.get("aipaas.dev/dataset-cache", "{}"))
        return state

    cache = _wait(
        "n1's cache in its inventory", lambda: cache_state().get("complete") and cache_state()
    )
    assert cache["usedBytes"] >= SIZE and cache["entries"] >= 1

    s3.forget()
    _apply(server, _job("second", out))
    second = server.wait_phase("second", "Succeeded", timeout=120)
    assert {t["node"] for t in second["status"]["tasks"]} == {"n1"}
    assert (out / "second-0").read_text() == expected
    assert (out / "second-1").read_text() == expected
    assert s3.requests() == [], f"the second job was served from n1's cache alone: {s3.requests()}"
    status = _wait(
        "four reads counted",
        lambda: (
            (s := _status(server, "train")) and s.get("hits", 0) + s.get("misses", 0) == 4 and s
        ),
    )
    assert status["bytesFromSource"] == SIZE  # copied from S3 once
    assert status["hits"] >= 3


def test_warm_on_demand_loads_on_the_node_in_a_slurm_job(
    s3: S3Server, server: ServerProcess, slurm_cluster: SlurmCluster
) -> None:
    s3.upload(BUCKET, OBJECTS)
    _apply(server, manifests(s3.url))
    server.cli("dataset", "warm", "labels", "--nodes", "n1", "-t", "acme")
    status = _wait(
        "labels loaded on n1",
        lambda: (s := _status(server, "labels")).get("phase") == "Cached" and s,
    )
    assert status["sizeBytes"] == len(OBJECTS["train/nested/labels.txt"])
    found = json.loads(slurm_cluster.run("squeue", "--json", "--states=all"))["jobs"]
    loads = [j for j in found if str(j.get("name")) == "aipaas-load.n1"]
    assert loads, "the copier ran as a Slurm job on n1"
