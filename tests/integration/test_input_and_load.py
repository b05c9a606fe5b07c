"""Against a real server: every malformed manifest gets a 4xx naming the problem and nothing is
stored; 2,000 submissions from 20 concurrent clients all land."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx

from tests.support import bad_manifests
from tests.support.server_process import SETUP, ServerProcess


def test_malformed_manifests_are_refused(server: ServerProcess) -> None:
    server.cli("apply", "-f", "-", input=SETUP)
    cases = bad_manifests.CASES
    assert len(cases) >= 30
    with server.http() as client:
        before = len(client.get("/events", params={"tenant": "acme"}).json()["items"])
        for case_id, text, words in cases:
            answer = client.post("/apply", content=text)
            assert 400 <= answer.status_code < 500, (case_id, answer.text)
            message = answer.json()["message"]
            assert all(word in message for word in words), (case_id, message)
        oversized = client.post("/apply", content="#" * (2 << 20))
        assert oversized.status_code == 413
        assert client.get("/jobs", params={"tenant": "acme"}).json()["items"] == []
        after = len(client.get("/events", params={"tenant": "acme"}).json()["items"])
        assert after == before


def test_two_thousand_submissions_from_twenty_clients(tmp_path: Path, db_url: str | None) -> None:
    server = ServerProcess(tmp_path / "data", backend="sim", db=db_url).start()
    try:
        server.cli("apply", "-f", "-", input=SETUP)
        errors: list[str] = []
        per_client = 100

        def submit(client_index: int) -> None:
            with httpx.Client(
                base_url=server.url + "/api/v1",
                timeout=60,
                headers={"Authorization": "Bearer integration-admin-token"},
            ) as client:
                for index in range(per_client):
                    job = {
                        "apiVersion": "aipaas/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": f"load-{client_index}-{index}",
                            "tenant": "acme",
                            "annotations": {"sim.aipaas.dev/duration": "0.1"},
                        },
                        "spec": {
                            "queue": "research",
                            "tasks": [
                                {
                                    "name": "w",
                                    "command": ["x"],
                                    "resources": {"cpu": "100m", "memory": "64Mi"},
                                }
                            ],
                        },
                    }
                    answer = client.post("/apply", content=json.dumps(job))
                    if answer.status_code != 200:
                        errors.append(f"{answer.status_code} {answer.text[:200]}")

        started = time.monotonic()
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        assert errors == []
        with server.http() as client:
            # Lists are paginated (at most 5000 a page): one page holds them all.
            jobs = client.get("/jobs", params={"tenant": "acme", "limit": 5000}).json()["items"]
        assert len(jobs) == 2000
        assert len({j["metadata"]["name"] for j in jobs}) == 2000
        print(f"2000 submissions in {elapsed:.1f}s: {2000 / elapsed:.0f}/s")
    finally:
        server.stop()
