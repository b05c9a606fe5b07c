"""The exec session's handshake (server/exec_session.py) in process: who is refused and how,
before any command is asked of a backend; and what a server whose backend cannot open
sessions (Kubernetes, Ray, simulated nodes) answers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from starlette.testclient import WebSocketDenialResponse

from aipaas.server.exec_session import UNAVAILABLE, Session
from tests.unit.server.api_world import Api

ACME_JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: mine, tenant: acme}
spec:
  queue: research
  tasks: [{name: w, command: ["true"]}]
"""


def refusal(api: Api, path: str, user: str | None) -> WebSocketDenialResponse:
    headers = api.as_(user) if user is not None else {}
    with pytest.raises(WebSocketDenialResponse) as refused:
        api.client.websocket_connect(path, headers=headers).__enter__()
    return refused.value


@pytest.fixture
def opened(api: Api) -> list[tuple[str, Sequence[str]]]:
    """Every session a backend was asked for (none may be, for a refused handshake)."""
    asked: list[tuple[str, Sequence[str]]] = []

    def opener(
        request_id: str, command: Sequence[str], tty: bool, rows: int, cols: int
    ) -> Session | None:
        asked.append((request_id, command))
        return None

    api.client.app.state.task_session = opener  # type: ignore[attr-defined]
    answer = api.client.post("/api/v1/apply", content=ACME_JOB, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    return asked


@pytest.mark.parametrize(
    ("user", "path", "want_status"),
    [
        pytest.param(
            "alice", "/api/v1/jobs/secret/exec?command=id&tenant=globex", 404, id="another tenant"
        ),
        pytest.param("alice", "/api/v1/jobs/secret/exec?command=id", 404, id="own tenant's view"),
        pytest.param("vera", "/api/v1/jobs/mine/exec?command=id", 403, id="a viewer"),
        pytest.param(None, "/api/v1/jobs/mine/exec?command=id", 401, id="no token"),
        pytest.param("alice", "/api/v1/jobs/mine/exec", 422, id="no command"),
        pytest.param(
            "alice", "/api/v1/jobs/mine/exec?command=id&task=w-9", 404, id="a task it has not"
        ),
        pytest.param(
            "alice", "/api/v1/jobs/mine/exec?command=id", 409, id="a task not running yet"
        ),
    ],
)
def test_a_refused_handshake_asks_the_backend_for_nothing(
    api: Api, opened: list[tuple[str, Sequence[str]]], user: str | None, path: str, want_status: int
) -> None:
    assert refusal(api, path, user).status_code == want_status
    assert opened == []


def test_an_unauthenticated_caller_is_told_only_that(
    api: Api, opened: list[tuple[str, Sequence[str]]]
) -> None:
    refused = refusal(api, "/api/v1/jobs/mine/exec?bogus=1", None)
    assert refused.status_code == 401  # not 422: the query is read after the caller
    assert refused.headers["www-authenticate"] == "Bearer"


def test_a_server_whose_backend_cannot_says_why_in_one_line(api: Api) -> None:
    answer = api.client.post("/api/v1/apply", content=ACME_JOB, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    refused = refusal(api, "/api/v1/jobs/mine/exec?command=sh", "alice")
    assert refused.status_code == 503
    assert refused.json()["message"] == UNAVAILABLE
    assert "Kubernetes" in UNAVAILABLE and "\n" not in UNAVAILABLE
