"""The API's rules, in process: authentication, roles, tenant isolation, bad input, CAS."""

from __future__ import annotations

import pytest

from aipaas.api.job import JobPhase, JobStatus
from tests.support import bad_manifests
from tests.unit.server.api_world import Api

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}{tenant}}}
spec:
  queue: research
  tasks: [{{name: w, command: ["true"]}}]
"""


def job(name: str = "mine", tenant: str | None = None) -> str:
    return JOB.format(name=name, tenant=f", tenant: {tenant}" if tenant else "")


class TestAuthentication:
    @pytest.mark.parametrize(
        "headers",
        [
            pytest.param({}, id="no header"),
            pytest.param({"Authorization": "Bearer nope"}, id="unknown token"),
            pytest.param({"Authorization": "Basic abc"}, id="wrong scheme"),
            pytest.param({"Authorization": "Bearer "}, id="empty token"),
        ],
    )
    def test_bad_token_is_401(self, api: Api, headers: dict[str, str]) -> None:
        answer = api.client.get("/api/v1/jobs", headers=headers)
        assert answer.status_code == 401
        assert answer.json()["code"] == "Unauthenticated"

    def test_whoami(self, api: Api) -> None:
        answer = api.client.get("/api/v1/whoami", headers=api.as_("alice"))
        assert answer.json() == {"user": "alice", "tenant": "acme", "role": "member"}

    def test_tokens_are_stored_hashed(self, api: Api) -> None:
        assert api.store.tokens.find_token(api.tokens["alice"]) is None

    def test_deleted_user_loses_access(self, api: Api) -> None:
        api.store.delete("User", "acme", "vera")
        assert api.client.get("/api/v1/jobs", headers=api.as_("vera")).status_code == 401


class TestIsolation:
    """A member of acme: 404 for globex's objects, 403 for admin actions, lists filtered."""

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/api/v1/jobs/secret?tenant=globex"),
            ("DELETE", "/api/v1/jobs/secret?tenant=globex"),
            ("POST", "/api/v1/jobs/secret/cancel?tenant=globex"),
            ("GET", "/api/v1/jobs/secret/logs?tenant=globex"),
            ("GET", "/api/v1/events?tenant=globex"),
            ("GET", "/api/v1/events?tenant=globex&kind=Job&name=secret"),
            ("GET", "/api/v1/queues/research?tenant=globex"),
            ("GET", "/api/v1/users/bob?tenant=globex"),
            ("GET", "/api/v1/tenants/globex"),
            ("GET", "/api/v1/jobs?tenant=globex"),
            ("DELETE", "/api/v1/tenants/globex"),
        ],
    )
    def test_other_tenant_is_404(self, api: Api, method: str, path: str) -> None:
        answer = api.client.request(method, path, headers=api.as_("alice"))
        assert answer.status_code == 404, answer.text
        assert "not found" in answer.json()["message"]

    def test_writing_into_other_tenant_is_404(self, api: Api) -> None:
        answer = api.client.post(
            "/api/v1/apply", content=job("x", "globex"), headers=api.as_("alice")
        )
        assert answer.status_code == 404
        assert answer.json()["message"] == "tenant globex not found"
        assert api.store.find("Job", "globex", "x") is None

    def test_token_for_other_tenant_user_is_404(self, api: Api) -> None:
        answer = api.client.post(
            "/api/v1/tokens", json={"user": "bob", "tenant": "globex"}, headers=api.as_("tad")
        )
        assert answer.status_code == 404

    def test_own_job_without_tenant(self, api: Api) -> None:
        answer = api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["items"][0]["object"]["metadata"]["tenant"] == "acme"
        assert answer.json()["items"][0]["object"]["status"]["phase"] == "Pending"
        listed = api.client.get("/api/v1/jobs", headers=api.as_("alice")).json()["items"]
        assert [j["metadata"]["name"] for j in listed] == ["mine"]
        assert api.client.get("/api/v1/jobs/mine", headers=api.as_("alice")).status_code == 200

    def test_lists_show_only_own_tenant(self, api: Api) -> None:
        tenants = api.client.get("/api/v1/tenants", headers=api.as_("alice")).json()["items"]
        assert [t["metadata"]["name"] for t in tenants] == ["acme"]
        users = api.client.get("/api/v1/users", headers=api.as_("alice")).json()["items"]
        assert sorted(u["metadata"]["name"] for u in users) == ["alice", "tad", "vera"]
        events = api.client.get("/api/v1/events", headers=api.as_("alice")).json()["items"]
        assert events and all(e["tenant"] == "acme" for e in events)
        admin = api.client.get("/api/v1/jobs", headers=api.as_("admin")).json()["items"]
        assert [j["metadata"]["tenant"] for j in admin] == ["globex"]

    @pytest.mark.parametrize(
        "manifest",
        [
            pytest.param(
                "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
                "spec: {quota: {gpu: 1000}}\n",
                id="raise own tenant quota",
            ),
            pytest.param(
                "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: q2}\n", id="create a queue"
            ),
            pytest.param(
                "apiVersion: aipaas/v1\nkind: User\nmetadata: {name: eve}\n", id="create a user"
            ),
            pytest.param(
                "apiVersion: aipaas/v1\nkind: Node\nmetadata: {name: n}\n"
                "spec: {backend: x, cpu: 1, memory: 1Gi}\n",
                id="write a node",
            ),
        ],
    )
    def test_admin_actions_are_403(self, api: Api, manifest: str) -> None:
        answer = api.client.post("/api/v1/apply", content=manifest, headers=api.as_("alice"))
        assert answer.status_code == 403, answer.text

    def test_member_cannot_create_tokens(self, api: Api) -> None:
        answer = api.client.post("/api/v1/tokens", json={"user": "vera"}, headers=api.as_("alice"))
        assert answer.status_code == 403

    def test_member_cannot_delete_users(self, api: Api) -> None:
        answer = api.client.delete("/api/v1/users/vera", headers=api.as_("alice"))
        assert answer.status_code == 403

    def test_viewer_cannot_submit_or_cancel(self, api: Api) -> None:
        answer = api.client.post("/api/v1/apply", content=job(), headers=api.as_("vera"))
        assert answer.status_code == 403
        api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        assert (
            api.client.post("/api/v1/jobs/mine/cancel", headers=api.as_("vera")).status_code == 403
        )
        assert api.client.get("/api/v1/jobs/mine", headers=api.as_("vera")).status_code == 200

    def test_tenant_admin_manages_own_tenant(self, api: Api) -> None:
        user = "apiVersion: aipaas/v1\nkind: User\nmetadata: {name: newbie}\n"
        assert (
            api.client.post("/api/v1/apply", content=user, headers=api.as_("tad")).status_code
            == 200
        )
        made = api.client.post("/api/v1/tokens", json={"user": "newbie"}, headers=api.as_("tad"))
        assert made.status_code == 201 and made.json()["role"] == "member"
        boss = user.replace("newbie}", "boss}\nspec: {role: platform-admin}")
        assert (
            api.client.post("/api/v1/apply", content=boss, headers=api.as_("tad")).status_code
            == 403
        )


class TestBadInput:
    CASES = bad_manifests.CASES

    @pytest.mark.parametrize(
        ("text", "want_words"), [pytest.param(t, w, id=i) for i, t, w in CASES]
    )
    def test_rejected_and_nothing_stored(self, api: Api, text: str, want_words: list[str]) -> None:
        before = (api.store.count("Job"), len(api.store.list_events()))
        answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("admin"))
        assert 400 <= answer.status_code < 500, answer.text
        message = answer.json()["message"]
        for word in want_words:
            assert word in message
        assert (api.store.count("Job"), len(api.store.list_events())) == before

    def test_oversized_body_is_413(self, api: Api) -> None:
        answer = api.client.post(
            "/api/v1/apply", content="#" * (65 * 1024), headers=api.as_("admin")
        )
        assert answer.status_code == 413

    def test_one_bad_document_stores_none(self, api: Api) -> None:
        text = job("good", "acme") + "---\n" + job("Bad", "acme")
        answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("admin"))
        assert answer.status_code == 422
        assert "document 1" in answer.json()["message"]
        assert api.store.find("Job", "acme", "good") is None

    def test_empty_body(self, api: Api) -> None:
        answer = api.client.post("/api/v1/apply", content="", headers=api.as_("admin"))
        assert answer.status_code == 422

    def test_unknown_queue(self, api: Api) -> None:
        text = job().replace("queue: research", "queue: nope")
        answer = api.client.post("/api/v1/apply", content=text, headers=api.as_("alice"))
        assert answer.status_code == 422
        assert answer.json()["fields"][0]["path"] == "spec.queue"

    def test_unknown_kind_in_path(self, api: Api) -> None:
        answer = api.client.get("/api/v1/pods", headers=api.as_("alice"))
        assert answer.status_code == 404 and "unknown kind" in answer.json()["message"]

    def test_admin_must_name_tenant(self, api: Api) -> None:
        answer = api.client.post("/api/v1/apply", content=job(), headers=api.as_("admin"))
        assert answer.status_code == 422 and "metadata.tenant" in answer.json()["message"]


class TestUpdates:
    def test_apply_twice_is_unchanged(self, api: Api) -> None:
        first = api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        again = api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        assert first.json()["items"][0]["action"] == "created"
        assert again.json()["items"][0]["action"] == "unchanged"

    def test_job_spec_cannot_change(self, api: Api) -> None:
        api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        changed = job().replace('["true"]', '["false"]')
        answer = api.client.post("/api/v1/apply", content=changed, headers=api.as_("alice"))
        assert answer.status_code == 409

    def test_stale_resource_version_is_409(self, api: Api) -> None:
        queue = (
            "apiVersion: aipaas/v1\nkind: Queue\n"
            "metadata: {{name: research, tenant: acme{rv}}}\nspec: {{weight: {w}}}\n"
        )
        ok = api.client.post(
            "/api/v1/apply",
            content=queue.format(rv=", resourceVersion: '1'", w=2),
            headers=api.as_("tad"),
        )
        assert ok.status_code == 200, ok.text
        stale = api.client.post(
            "/api/v1/apply",
            content=queue.format(rv=", resourceVersion: '1'", w=3),
            headers=api.as_("tad"),
        )
        assert stale.status_code == 409
        assert "resourceVersion is 2, not 1" in stale.json()["message"]

    def test_cancel_and_delete_are_requests(self, api: Api) -> None:
        api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        cancelled = api.client.post("/api/v1/jobs/mine/cancel", headers=api.as_("alice"))
        assert cancelled.status_code == 200
        assert "aipaas.dev/cancel-requested" in cancelled.json()["metadata"]["annotations"]
        deleted = api.client.delete("/api/v1/jobs/mine", headers=api.as_("alice"))
        assert deleted.json() == {"message": "job mine deleting"}

    def test_tenant_with_objects_cannot_be_deleted(self, api: Api) -> None:
        answer = api.client.delete("/api/v1/tenants/globex", headers=api.as_("admin"))
        assert answer.status_code == 409


class TestServiceEndpoints:
    def test_health_ready_metrics_docs(self, api: Api) -> None:
        assert api.client.get("/healthz").json() == {"status": "ok"}
        assert api.client.get("/readyz").status_code == 200
        assert api.client.get("/metrics").status_code == 401  # a token is needed (issue 10)
        assert "aipaas_jobs" in api.client.get("/metrics", headers=api.as_("admin")).text
        assert api.client.get("/docs").status_code == 200
        paths = api.client.get("/openapi.json").json()["paths"]
        assert "/api/v1/apply" in paths


class TestAdminWithoutTenant:
    def test_unique_name_is_found(self, api: Api) -> None:
        answer = api.client.get("/api/v1/jobs/secret", headers=api.as_("admin"))
        assert answer.status_code == 200
        assert answer.json()["metadata"]["tenant"] == "globex"

    def test_missing_is_404(self, api: Api) -> None:
        answer = api.client.get("/api/v1/jobs/nope", headers=api.as_("admin"))
        assert answer.status_code == 404 and answer.json()["message"] == "job nope not found"

    def test_ambiguous_is_422(self, api: Api) -> None:
        api.client.post("/api/v1/apply", content=job("secret", "acme"), headers=api.as_("admin"))
        answer = api.client.get("/api/v1/jobs/secret", headers=api.as_("admin"))
        assert answer.status_code == 422
        assert "exists in tenants acme, globex" in answer.json()["message"]

    def test_token_for_a_user_found_by_name(self, api: Api) -> None:
        answer = api.client.post("/api/v1/tokens", json={"user": "bob"}, headers=api.as_("admin"))
        assert answer.status_code == 201 and answer.json()["tenant"] == "globex"
        missing = api.client.post("/api/v1/tokens", json={"user": "zed"}, headers=api.as_("admin"))
        assert missing.status_code == 404


class TestDeleteFinished:
    def test_a_finished_job_goes_at_once(self, api: Api) -> None:
        api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        stored = api.store.get("Job", "acme", "mine")
        api.store.update_status(stored, JobStatus(phase=JobPhase.SUCCEEDED))
        answer = api.client.delete("/api/v1/jobs/mine", headers=api.as_("alice"))
        assert answer.json() == {"message": "job mine deleted"}
        assert api.client.get("/api/v1/jobs/mine", headers=api.as_("alice")).status_code == 404


class TestLogs:
    def test_unknown_task_is_404(self, api: Api) -> None:
        api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        answer = api.client.get("/api/v1/jobs/mine/logs?task=w-9", headers=api.as_("alice"))
        assert answer.status_code == 404
        assert answer.json()["message"] == "job mine has no task w-9 (tasks: w-0)"

    def test_no_logs_yet_is_empty(self, api: Api) -> None:
        api.client.post("/api/v1/apply", content=job(), headers=api.as_("alice"))
        answer = api.client.get("/api/v1/jobs/mine/logs", headers=api.as_("alice"))
        assert answer.status_code == 200 and answer.text == ""


class TestReplace:
    QUEUE = (
        "apiVersion: aipaas/v1\nkind: Queue\n"
        "metadata: {{name: research, tenant: acme{rv}}}\nspec: {{weight: {w}}}\n"
    )

    def test_cas(self, api: Api) -> None:
        current = api.client.get("/api/v1/queues/research", headers=api.as_("tad")).json()
        version = current["metadata"]["resourceVersion"]
        body = self.QUEUE.format(rv=f", resourceVersion: '{version}'", w=5)
        ok = api.client.put("/api/v1/queues/research", content=body, headers=api.as_("tad"))
        assert ok.status_code == 200 and ok.json()["spec"]["weight"] == 5
        stale = api.client.put("/api/v1/queues/research", content=body, headers=api.as_("tad"))
        assert stale.status_code == 409

    @pytest.mark.parametrize(
        ("path", "body", "user", "want_status"),
        [
            pytest.param(
                "/api/v1/queues/research",
                QUEUE.format(rv="", w=2),
                "tad",
                422,
                id="no resourceVersion",
            ),
            pytest.param(
                "/api/v1/queues/other",
                QUEUE.format(rv=", resourceVersion: '1'", w=2),
                "tad",
                422,
                id="path and body disagree",
            ),
            pytest.param(
                "/api/v1/queues/research",
                QUEUE.format(rv=", resourceVersion: '1'", w=2),
                "alice",
                403,
                id="member may not",
            ),
            pytest.param(
                "/api/v1/queues/research",
                QUEUE.format(rv=", resourceVersion: '1'", w=2).replace("acme", "globex"),
                "tad",
                404,
                id="other tenant",
            ),
            pytest.param("/api/v1/queues/research", "", "tad", 422, id="empty"),
            pytest.param("/api/v1/queues/research", "{bad", "tad", 422, id="not YAML"),
        ],
    )
    def test_refused(self, api: Api, path: str, body: str, user: str, want_status: int) -> None:
        answer = api.client.put(path, content=body, headers=api.as_(user))
        assert answer.status_code == want_status, answer.text


class TestRequestShapes:
    @pytest.mark.parametrize(
        ("method", "path", "kwargs", "want_status", "want_word"),
        [
            pytest.param(
                "POST",
                "/api/v1/tokens",
                {"json": {"user": "alice", "x": 1}},
                422,
                "x",
                id="token request with an unknown field",
            ),
            pytest.param(
                "POST",
                "/api/v1/tokens",
                {"content": "not json"},
                422,
                "",
                id="token request not JSON",
            ),
            pytest.param(
                "POST",
                "/api/v1/tokens",
                {"json": {"user": "Bad Name"}},
                422,
                "user",
                id="token for an invalid user name",
            ),
            pytest.param(
                "GET", "/api/v1/jobs?tenant=" + "a" * 64, {}, 422, "tenant", id="tenant too long"
            ),
            pytest.param(
                "GET",
                "/api/v1/jobs/x/logs?follow=maybe",
                {},
                422,
                "follow",
                id="follow not a boolean",
            ),
            pytest.param(
                "GET",
                "/api/v1/events?kind=Pod",
                {},
                422,
                "unknown kind",
                id="events of an unknown kind",
            ),
        ],
    )
    def test_refused_with_reason(
        self,
        api: Api,
        method: str,
        path: str,
        kwargs: dict[str, object],
        want_status: int,
        want_word: str,
    ) -> None:
        answer = api.client.request(method, path, headers=api.as_("admin"), **kwargs)  # type: ignore[arg-type]
        assert answer.status_code == want_status, answer.text
        assert want_word in answer.json()["message"]
