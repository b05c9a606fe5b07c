"""The app's ``on_write`` hook (the controller's wake-up) is called after each request that may
have written, by the fast apply lane and the routes alike, and never after a read."""

from __future__ import annotations

import json

from tests.unit.server.api_world import Api

JOB = json.dumps(
    {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "woken"},
        "spec": {"queue": "research", "tasks": [{"name": "w", "command": ["true"]}]},
    }
)


def _counting(api: Api) -> list[str]:
    calls: list[str] = []
    api.client.app.state.on_write = lambda: calls.append("write")  # type: ignore[attr-defined]
    return calls


def test_writes_call_it_once_each(api: Api) -> None:
    calls = _counting(api)
    alice = api.as_("alice")
    assert api.client.post("/api/v1/apply", content=JOB, headers=alice).status_code == 200
    assert calls == ["write"]  # the route's lane (alice was not remembered yet)
    again = JOB.replace('"woken"', '"woken-again"')
    assert api.client.post("/api/v1/apply", content=again, headers=alice).status_code == 200
    assert calls == ["write"] * 2  # the fast lane (remembered now)
    cancel = api.client.post("/api/v1/jobs/woken/cancel", headers=alice)
    assert cancel.status_code == 200, cancel.text
    assert calls == ["write"] * 3
    assert api.client.delete("/api/v1/jobs/woken-again", headers=alice).status_code == 200
    assert calls == ["write"] * 4


def test_a_refused_write_calls_it_too_and_reads_do_not(api: Api) -> None:
    calls = _counting(api)
    bob = api.as_("bob")  # another tenant: alice's job is not his to cancel
    assert api.client.get("/api/v1/jobs", headers=bob).status_code == 200
    assert api.client.get("/healthz").status_code == 200
    assert api.client.head("/healthz").status_code in (200, 405)
    assert calls == []
    assert api.client.post("/api/v1/jobs/nowhere/cancel", headers=bob).status_code == 404
    assert calls == ["write"]
