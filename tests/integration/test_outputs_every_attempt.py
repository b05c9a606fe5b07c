"""``spec.outputs[].uploadOn: Always``: what a failed attempt wrote is uploaded too (a real
server, a real S3 API from moto's server, real task processes), while an output without it is
uploaded only after exit code 0, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.support.server_process import ADMIN, SETUP, TASK_PYTHON, ServerProcess, free_port

BUCKET = "results"
SECRET = f"""apiVersion: aipaas/v1
kind: Secret
metadata: {{name: s3-creds, tenant: acme}}
spec:
  data: {{accessKeyId: {ACCESS_KEY}, secretAccessKey: {SECRET_KEY}}}
"""
# A checkpoint is written, then the task crashes.
CRASHER = """
import os, pathlib, sys
out = pathlib.Path(os.environ["AIPAAS_OUTPUT_PATH"])
(out / "checkpoint.pt").write_bytes(b"c" * 1000)
sys.exit(3)
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(free_port(), tmp_path_factory.mktemp("moto") / "moto.log").start()
    server.upload(BUCKET, {".keep": b""})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("aipaas") / "data").start()
    process.cli("apply", "-f", "-", input=SETUP + "---\n" + SECRET)
    yield process
    process.close()


def _job(name: str, s3: S3Server, upload_on: str | None) -> str:
    output = {
        "path": "/out",
        "destination": f"s3://{BUCKET}/{name}",
        "endpoint": s3.url,
        "secretRef": "s3-creds",
    }
    if upload_on is not None:
        output["uploadOn"] = upload_on
    return json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": name, "tenant": "acme"},
            "spec": {
                "queue": "research",
                "outputs": [output],
                "tasks": [{"name": "main", "command": [TASK_PYTHON, "-c", CRASHER]}],
            },
        }
    )


def _keys(s3: S3Server, prefix: str) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
    return sorted(item["Key"] for item in listed.get("Contents", []))


def _apply(server: ServerProcess, text: str) -> httpx.Response:
    with server.http(ADMIN) as client:
        return client.post("/apply", content=text, headers={"Content-Type": "application/json"})


def test_a_failed_attempt_uploads_the_outputs_marked_always(
    s3: S3Server, server: ServerProcess
) -> None:
    assert _apply(server, _job("always", s3, "Always")).status_code == 200
    done = server.wait_phase("always", "Failed", timeout=90)
    # the task's own exit code stays: the upload after a failure does not replace it
    assert done["status"]["tasks"][0]["exitCode"] == 3
    assert _keys(s3, "always") == ["always/checkpoint.pt"]


def test_a_failed_attempt_uploads_nothing_by_default(s3: S3Server, server: ServerProcess) -> None:
    assert _apply(server, _job("onsuccess", s3, None)).status_code == 200
    done = server.wait_phase("onsuccess", "Failed", timeout=90)
    assert done["status"]["tasks"][0]["exitCode"] == 3
    assert _keys(s3, "onsuccess") == []


def test_upload_on_takes_only_its_two_values(s3: S3Server, server: ServerProcess) -> None:
    refused = _apply(server, _job("wrong", s3, "OnFailure"))
    assert refused.status_code == 422
    assert "spec.outputs[0].uploadOn" in refused.text
