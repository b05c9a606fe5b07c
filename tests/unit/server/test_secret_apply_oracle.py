"""A tenant admin may write a Secret but never read its values: re-applying one must not tell
whether a guessed value is the stored one (no "unchanged", no unmoved resourceVersion, no
missing Updated event), or writing becomes a way of reading."""

from __future__ import annotations

from typing import Any

from tests.unit.server.api_world import Api


def secret(value: str) -> str:
    return (
        "apiVersion: aipaas/v1\nkind: Secret\nmetadata: {name: creds, tenant: acme}\n"
        f"spec: {{data: {{token: {value}}}}}\n"
    )


def apply_as_tad(api: Api, value: str) -> dict[str, Any]:
    answer = api.client.post("/api/v1/apply", content=secret(value), headers=api.as_("tad"))
    assert answer.status_code == 200, answer.text
    item: dict[str, Any] = answer.json()["items"][0]
    assert value not in answer.text
    return item


def updated_events(api: Api) -> int:
    scope = {"tenant": "acme", "kind": "Secret", "name": "creds", "limit": "500"}
    answer = api.client.get("/api/v1/events", params=scope, headers=api.as_("tad"))
    assert answer.status_code == 200, answer.text
    return sum(1 for event in answer.json()["items"] if event["reason"] == "Updated")


def test_a_right_and_a_wrong_guess_get_the_same_answer(api: Api) -> None:
    assert apply_as_tad(api, "the-stored-value")["action"] == "created"
    seen: list[tuple[str, str, int]] = []
    for guess in ("a-wrong-guess", "the-stored-value", "the-stored-value"):
        before = updated_events(api)
        item = apply_as_tad(api, guess)
        seen.append(
            (item["action"], item["object"]["spec"]["data"]["token"], updated_events(api) - before)
        )
        version = item["object"]["metadata"]["resourceVersion"]
        stored = api.client.get("/api/v1/secrets/creds", headers=api.as_("tad")).json()
        assert stored["metadata"]["resourceVersion"] == version  # the answer is what is stored
    assert seen == [("configured", "***", 1)] * 3
    versions = [apply_as_tad(api, "same")["object"]["metadata"]["resourceVersion"] for _ in "ab"]
    assert int(versions[1]) == int(versions[0]) + 1  # the version moves either way


def test_other_kinds_still_answer_unchanged(api: Api) -> None:
    queue = "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n"
    answer = api.client.post("/api/v1/apply", content=queue, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["items"][0]["action"] == "unchanged"
