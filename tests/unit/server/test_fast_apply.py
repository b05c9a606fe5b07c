"""The fast lane of ``POST /api/v1/apply`` (a small body by a remembered caller) answers exactly
as the route does: the same statuses, bodies and stored objects, for good and bad input."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from aipaas.server.routes import SMALL_BODY_BYTES
from tests.unit.server.api_world import Api


def _job(name: str, **spec: object) -> str:
    body = {"queue": "research", "tasks": [{"name": "w", "command": ["true"]}], **spec}
    return json.dumps(
        {"apiVersion": "aipaas/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}
    )


CASES = {
    "created": _job("fresh"),
    "unknown field": _job("odd", colour="blue"),
    "negative replicas": _job("neg", tasks=[{"name": "w", "replicas": -1, "command": ["true"]}]),
    "missing queue": _job("lost", queue="nowhere"),
    "not json or yaml": "{{{ not a manifest",
    "unknown kind": '{"apiVersion": "aipaas/v1", "kind": "Pizza", "metadata": {"name": "x"}}',
    "another tenant": json.dumps(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": "intrude", "tenant": "globex"},
            "spec": {"queue": "research", "tasks": [{"name": "w", "command": ["true"]}]},
        }
    ),
    "empty": "",
}


def _answer(
    api: Api, user: str, body: str, remembered: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, object]:
    principals = api.client.app.state.principals  # type: ignore[attr-defined]
    principals.forget_all()
    if remembered:  # any authenticated request makes this process remember the caller
        assert api.client.get("/api/v1/whoami", headers=api.as_(user)).status_code == 200
    routed: list[str] = []
    through_fastapi = FastAPI.__call__

    async def counting(app: FastAPI, scope: Scope, receive: Receive, send: Send) -> None:
        routed.append(scope["path"])
        await through_fastapi(app, scope, receive, send)

    with monkeypatch.context() as patch:
        patch.setattr(FastAPI, "__call__", counting)
        answer = api.client.post("/api/v1/apply", content=body, headers=api.as_(user))
    small = len(body.encode()) <= SMALL_BODY_BYTES
    assert routed == ([] if remembered and small else ["/api/v1/apply"])
    payload = answer.json()
    if answer.status_code == 200:  # uid and times differ between the two creations
        payload = [(item["action"], item["kind"]) for item in payload["items"]]
    return answer.status_code, payload


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_lane_answers_as_the_route_does(
    api: Api, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = CASES[case]
    slow = _answer(api, "alice", body, False, monkeypatch)
    if slow[0] == 200:  # a second job of the same name would be "unchanged"
        body = body.replace('"fresh"', '"fresh-again"')
    fast = _answer(api, "alice", body, True, monkeypatch)
    assert fast == slow
    assert 200 <= slow[0] < 500


def test_a_remembered_viewer_is_refused_and_nothing_is_stored(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, payload = _answer(api, "vera", _job("peek"), True, monkeypatch)
    assert status == 403
    assert "vera" in json.dumps(payload) or "viewer" in json.dumps(payload)
    assert api.store.find("Job", "acme", "peek") is None


def test_a_body_over_the_small_size_takes_the_route_and_is_still_applied(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    padding = "x" * (SMALL_BODY_BYTES + 10)
    body = _job("big", tasks=[{"name": "w", "command": ["echo", padding]}])
    status, payload = _answer(api, "alice", body, True, monkeypatch)
    assert (status, payload) == (200, [("created", "Job")])
    assert api.store.find("Job", "acme", "big") is not None
