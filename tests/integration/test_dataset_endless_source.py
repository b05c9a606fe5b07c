"""A dataset source whose index pages never end (a generated site: every page links new
subdirectories) on a real server with the local backend: the node's copier gives up at its
bound, naming spec.source, and deleting the Dataset while its copier lists stops the copier
(no process left, no more requests to the source)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.dataset_site import DatasetSite
from tests.support.server_process import ServerProcess


@pytest.fixture(scope="module")
def fast() -> Iterator[DatasetSite]:
    made = DatasetSite(width=40)
    yield made
    made.close()


@pytest.fixture(scope="module")
def slow() -> Iterator[DatasetSite]:
    made = DatasetSite(width=2, delay=0.3)
    yield made
    made.close()


def apply_dataset(server: ServerProcess, name: str, source: str) -> None:
    text = (
        "apiVersion: aipaas/v1\nkind: Dataset\n"
        f"metadata: {{name: {name}, tenant: acme}}\nspec: {{source: {source!r}}}\n"
    )
    with server.http() as client:
        client.post("/apply", content=text).raise_for_status()
        answer = client.post(f"/datasets/{name}/warm", params={"tenant": "acme"}, json={})
        assert answer.status_code == 200, answer.text


def status_of(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.http() as client:
        found = client.get(f"/datasets/{name}", params={"tenant": "acme"}).json()
    status: dict[str, Any] = found.get("status") or {}
    return status


def copiers(name: str) -> list[int]:
    """Pids of live copier processes of tenant acme's dataset ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and b"aipaas.data.copier" in args and f"/acme/{name}-".encode() in args:
            found.append(int(entry.name))
    return found


def test_an_endless_index_is_given_up_at_its_bound(
    tenant_server: ServerProcess, fast: DatasetSite
) -> None:
    apply_dataset(tenant_server, "endless", f"{fast.url}/endless/")
    started = time.monotonic()
    deadline = started + 120
    while status_of(tenant_server, "endless").get("phase") != "Failed":
        assert time.monotonic() < deadline, f"still listing: {len(fast.requests)} pages read"
        time.sleep(0.5)
    message = status_of(tenant_server, "endless")["message"]
    print(f"gave up after {time.monotonic() - started:.1f} s, {len(fast.requests)} requests")
    assert "spec.source" in message and "index pages" in message, message
    time.sleep(2)
    assert copiers("endless") == []
    seen = len(fast.requests)
    time.sleep(2)
    assert len(fast.requests) == seen, "the source is not read any more"


def test_deleting_a_dataset_stops_its_copier(
    tenant_server: ServerProcess, slow: DatasetSite
) -> None:
    apply_dataset(tenant_server, "dripping", f"{slow.url}/endless/")
    deadline = time.monotonic() + 60
    while len(slow.paths("/endless/")) < 3 or not copiers("dripping"):
        assert time.monotonic() < deadline, "the load never started"
        time.sleep(0.2)
    with tenant_server.http() as client:
        answer = client.delete("/datasets/dripping", params={"tenant": "acme"})
        assert answer.status_code == 200, answer.text
    deleted = time.monotonic()
    while copiers("dripping"):
        assert time.monotonic() - deleted < 20, "the copier runs on after the delete"
        time.sleep(0.2)
    print(f"copier gone {time.monotonic() - deleted:.1f} s after the delete")
    time.sleep(1)
    seen = len(slow.requests)
    time.sleep(3)
    assert len(slow.requests) == seen, "the source is not read any more"
