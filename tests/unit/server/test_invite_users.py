"""Invitations: a tenant admin invites, the invitee redeems once and acts as the new user; an
invitation expires; nobody invites into another tenant or above its own rank."""

from __future__ import annotations

import pytest

from aipaas.clock import VirtualClock
from tests.unit.server.api_world import Api

INVITE = {
    "apiVersion": "aipaas/v1",
    "kind": "Invitation",
    "metadata": {"name": "for-nina"},
    "spec": {"user": "nina", "role": "member", "email": "nina@example.com", "expiresIn": "1h"},
}


def invite(api: Api, who: str, **changes: object) -> tuple[int, dict[str, object]]:
    body = {**INVITE, **changes}
    answer = api.client.post("/api/v1/invitations", json=body, headers=api.as_(who))
    return answer.status_code, answer.json()


def redeem(api: Api, token: object) -> tuple[int, dict[str, object]]:
    answer = api.client.post("/api/v1/invitations/redeem", json={"token": token})
    return answer.status_code, answer.json()


def test_an_invitation_is_redeemed_once_into_a_working_user(api: Api) -> None:
    code, made = invite(api, "tad")
    assert code == 201, made
    token = made["token"]
    assert isinstance(token, str) and token.startswith("aipinv_")
    assert token not in str(
        api.client.get("/api/v1/invitations/for-nina", headers=api.as_("tad")).json()
    )
    code, done = redeem(api, token)
    assert code == 201, done
    assert (done["user"], done["tenant"], done["role"]) == ("nina", "acme", "member")
    me = api.client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {done['token']}"})
    assert me.status_code == 200 and me.json()["user"] == "nina"
    again = redeem(api, token)
    assert again[0] == 404
    stored = api.client.get("/api/v1/invitations/for-nina", headers=api.as_("tad")).json()
    assert stored["status"]["phase"] == "Redeemed"


def test_an_expired_invitation_redeems_nothing(api: Api) -> None:
    clock = VirtualClock()
    api.store.clock = clock
    code, made = invite(api, "tad")
    assert code == 201
    clock.advance(3601)
    assert redeem(api, made["token"])[0] == 404
    assert api.client.get("/api/v1/users/nina", headers=api.as_("tad")).status_code == 404
    stored = api.client.get("/api/v1/invitations/for-nina", headers=api.as_("tad")).json()
    assert stored["status"]["phase"] == "Expired"


@pytest.mark.parametrize("who", ["alice", "vera"])
def test_members_and_viewers_cannot_invite(api: Api, who: str) -> None:
    assert invite(api, who)[0] == 403


def test_nobody_invites_into_another_tenant(api: Api) -> None:
    other = {**INVITE, "metadata": {"name": "sneaky", "tenant": "globex"}}
    assert invite(api, "tad", **other)[0] == 404
    assert (
        api.client.get(
            "/api/v1/invitations", params={"tenant": "globex"}, headers=api.as_("tad")
        ).status_code
        == 404
    )
    assert invite(api, "admin", metadata={"name": "g", "tenant": "globex"})[0] == 201
    listed = api.client.get("/api/v1/invitations", headers=api.as_("tad")).json()["items"]
    assert listed == []  # globex's invitation is not acme's to see


def test_an_existing_user_or_a_bad_token_is_refused(api: Api) -> None:
    assert invite(api, "tad", spec={**INVITE["spec"], "user": "alice"})[0] == 409  # type: ignore[dict-item]
    for token in ("aipinv_nope", "", "x" * 500, 12):
        assert redeem(api, token)[0] in (404, 422)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"user": "Nina!"}, "spec.user"),
        ({"user": "nina", "role": "platform-admin"}, "spec.role"),
        ({"user": "nina", "expiresIn": "-1h"}, "spec.expiresIn"),
        ({"user": "nina", "colour": "red"}, "spec.colour"),
    ],
)
def test_bad_invitations_name_the_field(api: Api, spec: dict[str, object], field: str) -> None:
    code, answer = invite(api, "tad", spec=spec)
    assert code == 422, answer
    assert field in str(answer)


def test_invitations_are_not_applied_like_other_objects(api: Api) -> None:
    text = "apiVersion: aipaas/v1\nkind: Invitation\nmetadata: {name: x}\nspec: {user: nina}\n"
    answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("tad"))
    assert answer.status_code == 422 and "/api/v1/invitations" in answer.text


QUOTA = (
    "apiVersion: aipaas/v1\nkind: User\nmetadata: {name: alice}\n"
    "spec: {role: member, quota: QUOTA}\n"
)


def test_a_tenant_admin_sets_a_users_quota_and_the_user_cannot(api: Api) -> None:
    text = QUOTA.replace("QUOTA", "{gpu: 2}")
    assert (
        api.client.post("/api/v1/apply", content=text, headers=api.as_("alice")).status_code == 403
    )
    answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("tad"))
    assert answer.status_code == 200, answer.text
    stored = api.client.get("/api/v1/users/alice", headers=api.as_("alice")).json()
    assert stored["spec"]["quota"] == {"gpu": 2.0}


@pytest.mark.parametrize(
    ("quota", "field"),
    [
        ("{gpu: -1}", "spec.quota.gpu"),
        ("{cpu: lots}", "spec.quota.cpu"),
        ("{gpus: 2}", "spec.quota.gpus"),
    ],
)
def test_a_bad_user_quota_names_the_field(api: Api, quota: str, field: str) -> None:
    text = QUOTA.replace("QUOTA", quota)
    answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("tad"))
    assert answer.status_code == 422 and field in answer.text, answer.text


def tenant_text(default: str, quota: str = "{gpu: 8, cpu: 64, memory: 512Gi}") -> str:
    return (
        "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
        f"spec: {{quota: {quota}, defaultPriorityClass: {default}}}\n"
    )


def test_a_tenant_admin_sets_the_default_class_within_the_allowed_ones(api: Api) -> None:
    answer = api.client.post("/api/v1/apply", content=tenant_text("low"), headers=api.as_("tad"))
    assert answer.status_code == 200, answer.text
    job = (
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j}\n"
        "spec: {queue: research, tasks: [{name: w, command: [x]}]}\n"
    )
    assert (
        api.client.post("/api/v1/apply", content=job, headers=api.as_("alice")).status_code == 200
    )
    stored = api.client.get("/api/v1/jobs/j", headers=api.as_("alice")).json()
    assert stored["spec"]["priorityClassName"] == "low"
    refused = api.client.post("/api/v1/apply", content=tenant_text("high"), headers=api.as_("tad"))
    assert refused.status_code == 422 and "spec.defaultPriorityClass" in refused.text
    more = tenant_text("low", "{gpu: 800}")
    assert api.client.post("/api/v1/apply", content=more, headers=api.as_("tad")).status_code == 403
    assert (
        api.client.post(
            "/api/v1/apply", content=tenant_text("low"), headers=api.as_("alice")
        ).status_code
        == 403
    )
