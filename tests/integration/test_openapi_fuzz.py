"""An outside fuzzer against the OpenAPI document: schemathesis over every operation of a real
server, with a platform admin's token and with a viewer's, finds no 5xx and no answer that the
document does not describe (status, content type, headers, body schema).

Two runs per token: the fuzzing phase alone, where each operation with inputs gets
``EXAMPLES`` generated requests (checked from schemathesis' own report), then the examples,
coverage (boundary and negative values) and stateful (create, then use) phases. Run apart
because after the coverage phase schemathesis draws token ids for ``DELETE /tokens/{id}``
from those it has seen and stops early. One worker: on Python 3.11, Hypothesis' lambda
descriptions call ``ast.parse``, which raises SystemError when threads parse at once.

Not checked: ``unsupported_method`` and ``allow_header_conformance``, because the routes by
kind (``/api/v1/{plural}``, ``/api/v1/{plural}/{name}``) take any first segment: ``GET
/api/v1/apply`` is a list of an unknown kind (404), not a wrong method (405).

Set AIPAAS_FUZZ_SEED to replay or vary a run (the default is fixed, so CI is repeatable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server_process import ADMIN, ServerProcess, viewer_world

pytestmark = pytest.mark.slow

EXAMPLES = 100
SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "missing_required_header",
        "ignored_auth",
    ]
)
SEED = os.environ.get("AIPAAS_FUZZ_SEED", "20261123")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server on the simulated backend, a tenant, and a viewer's token."""
    with viewer_world(tmp_path_factory.mktemp("fuzz") / "data") as world:
        yield world


@pytest.mark.parametrize("role", ["viewer", "platform-admin"])
def test_no_5xx_and_no_answer_outside_the_document(
    fuzzed: tuple[ServerProcess, str], role: str, tmp_path: Path
) -> None:
    server, viewer_token = fuzzed
    token = viewer_token if role == "viewer" else ADMIN
    document = httpx.get(server.url + "/openapi.json", timeout=60).json()

    fuzzing = _schemathesis(server, token, tmp_path / "fuzzing", "fuzzing")
    _schemathesis(server, token, tmp_path / "others", "examples,coverage,stateful")

    counts = _cases_by_operation(fuzzing, "fuzzing")
    for label, has_inputs in _operations(document).items():
        least = EXAMPLES if has_inputs else 1  # an operation with no inputs has one request
        assert counts[label] >= least, f"{label}: {counts[label]} generated requests"
    with server.http(token) as client:  # the fuzzer neither killed the server nor the token
        assert client.get("/whoami").status_code == 200
    assert server.process is not None and server.process.poll() is None


def _schemathesis(server: ServerProcess, token: str, reports: Path, phases: str) -> Path:
    command = [
        SCHEMATHESIS,
        "run",
        server.url + "/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--phases",
        phases,
        "--max-examples",
        str(EXAMPLES),
        "--checks",
        CHECKS,
        "--seed",
        SEED,
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--request-timeout",
        "30",
        "--no-color",
        "--report",
        "ndjson",
        "--report-dir",
        str(reports),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, (
        f"schemathesis ({phases}) found problems:\n{result.stdout[-20000:]}\n"
        f"{result.stderr[-3000:]}\nserver log:\n{server.log.read_text()[-5000:]}"
    )
    (report,) = reports.glob("*.ndjson")
    return report


def _operations(document: dict[str, Any]) -> dict[str, bool]:
    """``METHOD /path`` -> whether it takes any input (parameters or a body)."""
    return {
        f"{method.upper()} {path}": bool(op.get("parameters") or op.get("requestBody"))
        for path, operations in document["paths"].items()
        for method, op in operations.items()
    }


def _cases_by_operation(report: Path, phase: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in report.read_text().splitlines():
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if finished and finished["phase"] == phase:
            recorder = finished["recorder"]
            counts[recorder["label"]] += len(recorder.get("cases", {}))
    return counts
