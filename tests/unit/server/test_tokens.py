"""Tokens through the API, in process: ids, owners by uid, expiry, last use, revocation, who
sees which, and the rules that keep a platform admin reachable."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aipaas.api.meta import ObjectMeta
from aipaas.api.tenancy import Role, User, UserSpec
from aipaas.server.app import create_app
from aipaas.server.auth import PrincipalCache
from aipaas.tenancy.tokens import hash_token
from tests.unit.server.api_world import ADMIN, Api

TOKENS = "/api/v1/tokens"
WHOAMI = "/api/v1/whoami"


def user(name: str, role: str, tenant: str | None = "acme") -> str:
    where = f", tenant: {tenant}" if tenant else ""
    return (
        f"apiVersion: aipaas/v1\nkind: User\nmetadata: {{name: {name}{where}}}\n"
        f"spec: {{role: {role}}}\n"
    )


def mint(api: Api, who: str, **body: Any) -> dict[str, Any]:
    answer = api.client.post(TOKENS, json=body, headers=api.as_(who))
    assert answer.status_code == 201, answer.text
    result: dict[str, Any] = answer.json()
    return result


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def apply(api: Api, who: str, text: str) -> int:
    answer = api.client.post("/api/v1/apply", content=text, headers=api.as_(who))
    return int(answer.status_code)


def listed(api: Api, who: str, **params: str) -> list[dict[str, Any]]:
    answer = api.client.get(TOKENS, headers=api.as_(who), params=params)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


class TestCreateAndList:
    def test_a_token_has_an_id_a_name_an_owner_and_an_expiry(self, api: Api) -> None:
        made = mint(api, "tad", user="alice", name="ci", expiresIn="30d")
        assert made["id"].startswith("tok_") and made["name"] == "ci"
        assert (made["user"], made["tenant"], made["role"], made["state"]) == (
            "alice",
            "acme",
            "member",
            "active",
        )
        expires = datetime.fromisoformat(made["expiresAt"])
        created = datetime.fromisoformat(made["createdAt"])
        assert expires - created == timedelta(days=30)
        assert made["lastUsedAt"] is None and made["revokedAt"] is None
        assert api.client.get(WHOAMI, headers=bearer(made["token"])).json()["user"] == "alice"

    def test_lists_never_show_a_secret_or_a_hash(self, api: Api) -> None:
        made = mint(api, "admin", user="alice", tenant="acme")
        text = api.client.get(TOKENS, headers=api.as_("admin")).text
        assert made["token"] not in text and hash_token(made["token"]) not in text
        assert "token" not in listed(api, "admin")[0]
        shown = api.client.get(f"{TOKENS}/{made['id']}", headers=api.as_("alice")).json()
        assert shown["id"] == made["id"] and "token" not in shown

    def test_who_sees_which_tokens(self, api: Api) -> None:
        def users(who: str, **params: str) -> set[str]:
            return {t["user"] for t in listed(api, who, **params)}

        assert users("admin") == {"admin", "alice", "vera", "tad", "bob"}
        assert users("admin", tenant="globex") == {"bob"}
        assert users("tad") == {"alice", "vera", "tad"}
        assert users("alice") == {"alice"}
        assert users("vera") == {"vera"}
        assert (
            api.client.get(TOKENS, headers=api.as_("tad"), params={"tenant": "globex"}).status_code
            == 404
        )

    def test_lists_come_in_pages(self, api: Api) -> None:
        made = {mint(api, "tad", user="alice", name=f"t{i}")["id"] for i in range(5)}
        seen: list[str] = []
        params = {"limit": "2"}
        for _ in range(10):
            answer = api.client.get(TOKENS, headers=api.as_("alice"), params=params).json()
            assert len(answer["items"]) <= 2
            seen += [t["id"] for t in answer["items"]]
            if "continue" not in answer["metadata"]:
                break
            params["continue"] = answer["metadata"]["continue"]
        assert len(seen) == len(set(seen)) == 6 and made <= set(seen)  # and api_world's
        bad = api.client.get(TOKENS, headers=api.as_("alice"), params={"continue": "x"})
        assert bad.status_code == 422 and bad.json()["fields"][0]["path"] == "continue"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            pytest.param({"user": "alice", "expiresIn": "0"}, "expiresIn", id="zero lifetime"),
            pytest.param({"user": "alice", "expiresIn": "soon"}, "expiresIn", id="no number"),
            pytest.param({"user": "alice", "expiresIn": "4000d"}, "expiresIn", id="too long"),
            pytest.param(
                {"user": "alice", "expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt", id="past"
            ),
            pytest.param(
                {"user": "alice", "expiresAt": "2099-01-01T00:00:00"}, "expiresAt", id="no zone"
            ),
            pytest.param(
                {"user": "alice", "expiresIn": "1d", "expiresAt": "2099-01-01T00:00:00Z"},
                "",
                id="both",
            ),
            pytest.param({"user": "alice", "secret": "x"}, "secret", id="unknown field"),
            pytest.param({"user": "alice", "name": "Bad Name"}, "name", id="bad name"),
        ],
    )
    def test_bad_requests_name_the_field(self, api: Api, body: dict[str, Any], field: str) -> None:
        answer = api.client.post(TOKENS, json=body, headers=api.as_("tad"))
        assert answer.status_code == 422, answer.text
        assert field in [f["path"] for f in answer.json()["fields"]]

    def test_the_caller_is_checked_before_the_body_is_read(self, api: Api) -> None:
        assert api.client.post(TOKENS, content=b"{", headers=bearer("nope")).status_code == 401
        big = b"{" + b" " * 10_000 + b"}"
        assert api.client.post(TOKENS, content=big, headers=api.as_("tad")).status_code == 413


class TestRevocationAndExpiry:
    def test_a_revoked_token_is_401_at_once_in_this_process(self, api: Api) -> None:
        made = mint(api, "tad", user="alice")
        assert api.client.get(WHOAMI, headers=bearer(made["token"])).status_code == 200
        revoked = api.client.delete(f"{TOKENS}/{made['id']}", headers=api.as_("alice"))
        assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
        answer = api.client.get(WHOAMI, headers=bearer(made["token"]))
        assert answer.status_code == 401 and "revoked" in answer.json()["message"]
        again = api.client.delete(f"{TOKENS}/{made['id']}", headers=api.as_("alice"))
        assert again.status_code == 200 and again.json()["revokedAt"] == revoked.json()["revokedAt"]

    def test_another_process_forgets_a_revoked_token_within_the_ttl(self, api: Api) -> None:
        made = mint(api, "tad", user="alice")
        other_app = create_app(api.store)
        other_app.state.principals = PrincipalCache(ttl=0.2)
        with TestClient(other_app) as other:
            assert other.get(WHOAMI, headers=bearer(made["token"])).status_code == 200
            api.client.delete(f"{TOKENS}/{made['id']}", headers=api.as_("tad"))
            time.sleep(0.25)
            assert other.get(WHOAMI, headers=bearer(made["token"])).status_code == 401

    def test_an_expired_token_is_401_even_when_remembered(self, api: Api) -> None:
        made = mint(api, "tad", user="alice", expiresIn="1s")
        assert api.client.get(WHOAMI, headers=bearer(made["token"])).status_code == 200
        time.sleep(1.1)  # less than the cache's TTL: the entry must not outlive the token
        answer = api.client.get(WHOAMI, headers=bearer(made["token"]))
        assert answer.status_code == 401 and "expired" in answer.json()["message"]
        assert [t["state"] for t in listed(api, "alice") if t["id"] == made["id"]] == ["expired"]

    def test_last_use_is_written_at_most_once_a_minute(self, api: Api) -> None:
        made = mint(api, "tad", user="alice")
        cache: PrincipalCache = api.client.app.state.principals  # type: ignore[attr-defined]
        api.client.get(WHOAMI, headers=bearer(made["token"]))
        first = api.store.tokens.get_token(made["id"])
        assert first is not None and first.last_used_at is not None
        cache.forget_all()  # the next request reads the store again
        api.client.get(WHOAMI, headers=bearer(made["token"]))
        second = api.store.tokens.get_token(made["id"])
        assert second is not None and second.last_used_at == first.last_used_at

    def test_who_may_revoke_which_token(self, api: Api) -> None:
        alices = mint(api, "tad", user="alice")
        tads = mint(api, "admin", user="tad", tenant="acme")
        bobs = mint(api, "admin", user="bob", tenant="globex")
        for who, token, want in (
            ("vera", alices, 404),  # another member's: not even seen
            ("alice", bobs, 404),  # another tenant's
            ("tad", bobs, 404),
            ("alice", tads, 404),  # above her
            ("tad", alices, 200),  # its tenant's
            ("admin", bobs, 200),
        ):
            answer = api.client.delete(f"{TOKENS}/{token['id']}", headers=api.as_(who))
            assert answer.status_code == want, (who, token["user"], answer.text)
        assert (
            api.client.delete(f"{TOKENS}/tok_nothere", headers=api.as_("admin")).status_code == 404
        )


class TestOwnersByUid:
    def test_a_new_user_of_an_old_name_gets_none_of_the_old_tokens(self, api: Api) -> None:
        old = api.tokens["alice"]
        deleted = api.client.delete("/api/v1/users/alice?tenant=acme", headers=api.as_("tad"))
        assert deleted.status_code == 200, deleted.text
        assert apply(api, "admin", user("alice", "tenant-admin")) == 200
        answer = api.client.get(WHOAMI, headers=bearer(old))
        assert answer.status_code == 401  # the old code answered 200, as a tenant-admin

    def test_deleting_a_user_revokes_its_tokens(self, api: Api) -> None:
        mint(api, "tad", user="alice", name="second")
        api.client.delete("/api/v1/users/alice?tenant=acme", headers=api.as_("tad"))
        states = [t["state"] for t in listed(api, "admin") if t["user"] == "alice"]
        assert states == ["revoked", "revoked"]


class TestRoleHierarchy:
    def test_platform_admins_belong_to_no_tenant(self, api: Api) -> None:
        inside = api.client.post(
            "/api/v1/apply", content=user("root", "platform-admin"), headers=api.as_("admin")
        )
        assert inside.status_code == 422
        assert [f["path"] for f in inside.json()["fields"]] == ["metadata.tenant"]
        assert apply(api, "admin", user("root", "platform-admin", tenant=None)) == 200
        stored = api.store.find("User", "", "root")
        assert stored is not None and stored.metadata.tenant is None
        made = mint(api, "admin", user="root")
        assert made["tenant"] == "" and made["role"] == "platform-admin"
        member = api.client.post(
            "/api/v1/apply", content=user("loose", "member", tenant=None), headers=api.as_("admin")
        )
        assert member.status_code == 422

    @pytest.mark.parametrize(
        ("text", "want"),
        [
            pytest.param(user("eve", "platform-admin", tenant=None), 403, id="make an admin"),
            pytest.param(user("eve", "platform-admin"), 403, id="make an admin in the tenant"),
            pytest.param(user("alice", "platform-admin"), 403, id="promote to admin"),
            pytest.param(user("scraper", "metrics-reader", tenant=None), 403, id="metrics reader"),
            pytest.param(user("peer", "tenant-admin"), 200, id="a peer"),
            pytest.param(user("alice", "viewer"), 200, id="demote a member"),
        ],
    )
    def test_a_tenant_admin_gives_no_role_above_its_own(
        self, api: Api, text: str, want: int
    ) -> None:
        assert apply(api, "tad", text) == want

    def test_nobody_acts_on_a_user_above_itself(self, api: Api) -> None:
        assert apply(api, "admin", user("root", "platform-admin", tenant=None)) == 200
        # Tenant-less users do not exist for a tenant admin: no token, no change, no delete.
        refused = api.client.post(TOKENS, json={"user": "root"}, headers=api.as_("tad"))
        assert refused.status_code == 404
        gone = api.client.delete("/api/v1/users/root", headers=api.as_("tad"))
        assert gone.status_code == 404
        assert api.store.find("User", "", "root") is not None
        # A member cannot act on a tenant admin (nor on anyone: it writes no users).
        assert apply(api, "alice", user("tad", "viewer")) == 403
        assert (
            api.client.post(TOKENS, json={"user": "vera"}, headers=api.as_("alice")).status_code
            == 403
        )

    def test_a_platform_admin_left_in_a_tenant_is_still_out_of_a_tenant_admins_reach(
        self, api: Api
    ) -> None:
        # A database from before issue 10 may hold one (the write is refused now).
        legacy = User(
            metadata=ObjectMeta(name="oldroot", tenant="acme"),
            spec=UserSpec(role=Role.PLATFORM_ADMIN),
        )
        api.store.create(legacy)
        minted = api.client.post(TOKENS, json={"user": "oldroot"}, headers=api.as_("tad"))
        assert minted.status_code == 403
        assert apply(api, "tad", user("oldroot", "viewer")) == 403
        deleted = api.client.delete("/api/v1/users/oldroot", headers=api.as_("tad"))
        assert deleted.status_code == 403
        assert api.store.find("User", "acme", "oldroot") is not None
        token = mint(api, "admin", user="oldroot", tenant="acme")
        assert token["id"] not in {t["id"] for t in listed(api, "tad")}
        assert token["id"] in {t["id"] for t in listed(api, "admin")}
        shown = api.client.get(f"{TOKENS}/{token['id']}", headers=api.as_("tad"))
        assert shown.status_code == 404

    def test_a_metrics_reader_reads_metrics_and_nothing_else(self, api: Api) -> None:
        assert apply(api, "admin", user("scraper", "metrics-reader", tenant=None)) == 200
        token = bearer(mint(api, "admin", user="scraper")["token"])
        assert api.client.get("/metrics", headers=token).status_code == 200
        for method, path in (
            ("GET", WHOAMI),
            ("GET", "/api/v1/jobs?tenant=acme"),
            ("GET", TOKENS),
            ("POST", "/api/v1/apply"),
        ):
            assert api.client.request(method, path, headers=token).status_code == 403, path
        assert api.client.get("/metrics", headers=api.as_("vera")).status_code == 403
        assert api.client.get("/metrics", headers=api.as_("tad")).status_code == 403
        assert api.client.get("/metrics").status_code == 401

    def test_metrics_can_be_made_public_explicitly(self, api: Api) -> None:
        with TestClient(create_app(api.store, metrics_public=True)) as public:
            assert public.get("/metrics").status_code == 200


class TestTheLastAdmin:
    def test_the_bootstrap_token_is_a_real_users_and_can_go_once_another_admin_exists(
        self, api: Api
    ) -> None:
        admin = api.store.find("User", "", "admin")
        assert admin is not None
        bootstrap = [t for t in listed(api, "admin") if t["user"] == "admin"]
        assert len(bootstrap) == 1 and bootstrap[0]["name"] == "bootstrap"
        alone = api.client.delete(f"{TOKENS}/{bootstrap[0]['id']}", headers=api.as_("admin"))
        assert alone.status_code == 409
        assert api.client.delete("/api/v1/users/admin", headers=api.as_("admin")).status_code == 409
        assert apply(api, "admin", user("root", "platform-admin", tenant=None)) == 200
        # An admin without a live token does not count.
        assert (
            api.client.delete(
                f"{TOKENS}/{bootstrap[0]['id']}", headers=api.as_("admin")
            ).status_code
            == 409
        )
        root = mint(api, "admin", user="root")
        gone = api.client.delete(f"{TOKENS}/{bootstrap[0]['id']}", headers=api.as_("admin"))
        assert gone.status_code == 200
        assert api.client.get(WHOAMI, headers=bearer(ADMIN)).status_code == 401
        assert api.client.get(WHOAMI, headers=bearer(root["token"])).json()["user"] == "root"

    def test_the_last_admin_cannot_be_demoted(self, api: Api) -> None:
        assert apply(api, "admin", user("admin", "metrics-reader", tenant=None)) == 409


class TestReadiness:
    def test_not_ready_says_nothing_more(self, api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
        def broken(**_kwargs: Any) -> Any:
            raise RuntimeError("connection to /secret/path/aipaas.db refused")

        monkeypatch.setattr(api.store, "transaction", broken)
        answer = api.client.get("/readyz")
        assert answer.status_code == 503 and answer.json() == {"status": "not ready"}

    def test_a_starting_controller_is_not_ready(self, api: Api) -> None:
        with TestClient(create_app(api.store, is_ready=lambda: False)) as starting:
            answer = starting.get("/readyz")
        assert answer.status_code == 503 and answer.json() == {"status": "not ready"}


def test_expiry_dates_are_utc(api: Api) -> None:
    made = mint(api, "tad", user="alice", expiresAt="2030-01-01T02:00:00+02:00")
    assert datetime.fromisoformat(made["expiresAt"]) == datetime(2030, 1, 1, tzinfo=UTC)
