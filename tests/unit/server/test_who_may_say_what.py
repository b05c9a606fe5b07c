"""Who may say what: system annotations, priority classes, tenant shares, dependencies."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.job import Job
from aipaas.api.meta import ObjectMeta
from aipaas.api.queue import Queue, QueueSpec, effective_weights
from aipaas.api.tenancy import Tenant
from tests.unit.server.api_world import Api

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}{meta}}}
spec:
  queue: research
{spec}  tasks: [{{name: w, command: ["true"]}}]
"""


def job(name: str, *, meta: str = "", spec: str = "") -> str:
    return JOB.format(name=name, meta=meta, spec=spec)


def apply(api: Api, user: str, text: str) -> Any:
    return api.client.post("/api/v1/apply", content=text, headers=api.as_(user))


def stored_job(api: Api, name: str, tenant: str = "acme") -> Job:
    found = api.store.get("Job", tenant, name)
    assert isinstance(found, Job)
    return found


def fields(answer: Any) -> list[str]:
    return [f["path"] for f in answer.json()["fields"]]


class TestSystemAnnotations:
    def test_submitter_cannot_be_forged_at_submission(self, api: Api) -> None:
        answer = apply(
            api, "alice", job("forged", meta=", annotations: {aipaas.dev/submitted-by: bob}")
        )
        assert answer.status_code == 422, answer.text
        assert fields(answer) == ["metadata.annotations[aipaas.dev/submitted-by]"]
        assert api.store.find("Job", "acme", "forged") is None

    @pytest.mark.parametrize(
        "key",
        ["aipaas.dev/cancel-requested", "aipaas.dev/delete-requested", "x.aipaas.dev/anything"],
    )
    def test_no_system_key_on_a_new_object(self, api: Api, key: str) -> None:
        answer = apply(api, "alice", job("j", meta=f", annotations: {{{key}: 'now'}}"))
        assert answer.status_code == 422
        assert fields(answer) == [f"metadata.annotations[{key}]"]

    def test_system_labels_too(self, api: Api) -> None:
        queue = (
            "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: q, labels: {aipaas.dev/job: x}}\n"
        )
        answer = apply(api, "tad", queue)
        assert answer.status_code == 422
        assert fields(answer) == ["metadata.labels[aipaas.dev/job]"]

    def test_sim_duration_stays_the_users(self, api: Api) -> None:
        answer = apply(
            api, "alice", job("sim", meta=", annotations: {sim.aipaas.dev/duration: '5'}")
        )
        assert answer.status_code == 200, answer.text
        assert stored_job(api, "sim").metadata.annotations["sim.aipaas.dev/duration"] == "5"

    def test_submitter_is_set_by_the_server(self, api: Api) -> None:
        assert apply(api, "alice", job("mine")).status_code == 200
        assert stored_job(api, "mine").metadata.annotations["aipaas.dev/submitted-by"] == "alice"

    def test_a_fetched_job_applies_again(self, api: Api) -> None:
        assert apply(api, "alice", job("mine")).status_code == 200
        fetched = api.client.get("/api/v1/jobs/mine", headers=api.as_("alice")).json()
        answer = api.client.post("/api/v1/apply", json=fetched, headers=api.as_("alice"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["items"][0]["action"] == "unchanged"

    def test_replace_cannot_rewrite_the_submitter(self, api: Api) -> None:
        assert apply(api, "alice", job("mine")).status_code == 200
        fetched = api.client.get("/api/v1/jobs/mine", headers=api.as_("alice")).json()
        fetched["metadata"]["annotations"]["aipaas.dev/submitted-by"] = "bob"
        answer = api.client.put("/api/v1/jobs/mine", json=fetched, headers=api.as_("alice"))
        assert answer.status_code == 422
        assert fields(answer) == ["metadata.annotations[aipaas.dev/submitted-by]"]
        assert stored_job(api, "mine").metadata.annotations["aipaas.dev/submitted-by"] == "alice"

    def test_replace_that_drops_system_keys_keeps_them(self, api: Api) -> None:
        assert apply(api, "alice", job("mine")).status_code == 200
        api.client.post("/api/v1/jobs/mine/cancel", headers=api.as_("alice"))
        fetched = api.client.get("/api/v1/jobs/mine", headers=api.as_("alice")).json()
        fetched["metadata"]["annotations"] = {"team": "vision"}
        answer = api.client.put("/api/v1/jobs/mine", json=fetched, headers=api.as_("alice"))
        assert answer.status_code == 200, answer.text
        annotations = stored_job(api, "mine").metadata.annotations
        assert annotations["team"] == "vision"
        assert annotations["aipaas.dev/submitted-by"] == "alice"
        assert "aipaas.dev/cancel-requested" in annotations

    def test_even_a_platform_admin_cannot_forge_them(self, api: Api) -> None:
        text = job("j", meta=", tenant: acme, annotations: {aipaas.dev/submitted-by: alice}")
        assert apply(api, "admin", text).status_code == 422


PRIORITY_CLASS = """apiVersion: aipaas/v1
kind: PriorityClass
metadata: {{name: {name}}}
spec: {{value: {value}, preemptible: false, description: "{name}"}}
"""


class TestPriorityClasses:
    def test_only_a_platform_admin_writes_them(self, api: Api) -> None:
        text = PRIORITY_CLASS.format(name="urgent", value=5000)
        for user in ("alice", "tad"):
            assert apply(api, user, text).status_code == 403
        assert apply(api, "admin", text).status_code == 200
        listed = api.client.get("/api/v1/priorityclasses", headers=api.as_("alice")).json()
        assert [c["metadata"]["name"] for c in listed["items"]] == ["urgent"]
        assert listed["items"][0]["spec"] == {
            "value": 5000,
            "preemptible": False,
            "description": "urgent",
        }

    def test_only_a_platform_admin_deletes_them(self, api: Api) -> None:
        assert apply(api, "admin", PRIORITY_CLASS.format(name="urgent", value=5)).status_code == 200
        path = "/api/v1/priorityclasses/urgent"
        assert api.client.delete(path, headers=api.as_("tad")).status_code == 403
        assert api.client.get(path, headers=api.as_("vera")).status_code == 200
        assert api.client.delete(path, headers=api.as_("admin")).status_code == 200
        assert api.client.get(path, headers=api.as_("vera")).status_code == 404

    def test_a_default_class_that_does_not_exist(self, api: Api) -> None:
        tenant = (
            "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
            "spec: {defaultPriorityClass: gone}\n"
        )
        assert apply(api, "admin", tenant).status_code == 200
        answer = apply(api, "alice", job("plain"))
        assert answer.status_code == 422
        assert "default priority class gone does not exist" in answer.json()["message"]

    @pytest.mark.parametrize("value", ["1000001", "-1000001", "1.5", '"high"'])
    def test_value_is_bounded(self, api: Api, value: str) -> None:
        answer = apply(api, "admin", PRIORITY_CLASS.format(name="big", value=value))
        assert answer.status_code == 422
        assert fields(answer) == ["spec.value"]

    def test_a_members_job_gets_the_tenants_default(self, api: Api) -> None:
        assert apply(api, "alice", job("plain")).status_code == 200
        spec = stored_job(api, "plain").spec
        assert (spec.priority_class_name, spec.priority) == ("normal", 100)

    def test_the_tenant_chooses_the_default(self, api: Api) -> None:
        tenant = (
            "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
            "spec: {defaultPriorityClass: low}\n"
        )
        assert apply(api, "admin", tenant).status_code == 200
        assert apply(api, "alice", job("plain")).status_code == 200
        spec = stored_job(api, "plain").spec
        assert (spec.priority_class_name, spec.priority) == ("low", 0)

    @pytest.mark.parametrize(
        ("spec", "field"),
        [
            ("  priority: 100000\n", "spec.priority"),
            ("  priority: 1000\n", "spec.priority"),
            ("  priority: critical\n", "spec.priority"),
            ("  priorityClassName: high\n", "spec.priorityClassName"),
            ("  priorityClassName: nosuch\n", "spec.priorityClassName"),
            ("  priorityClassName: low\n  priority: 5\n", "spec.priority"),
        ],
    )
    def test_a_member_is_refused(self, api: Api, spec: str, field: str) -> None:
        answer = apply(api, "alice", job("loud", spec=spec))
        assert answer.status_code == 422, answer.text
        assert fields(answer) == [field]
        assert api.store.find("Job", "acme", "loud") is None

    def test_tenant_admin_is_bound_as_members_are(self, api: Api) -> None:
        assert apply(api, "tad", job("loud", spec="  priority: 100000\n")).status_code == 422

    def test_allowed_classes_are_usable(self, api: Api) -> None:
        assert (
            apply(api, "admin", PRIORITY_CLASS.format(name="urgent", value=5000)).status_code == 200
        )
        tenant = (
            "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
            "spec: {allowedPriorityClasses: [low, normal, urgent, high]}\n"
        )
        assert apply(api, "admin", tenant).status_code == 200
        assert (
            apply(api, "alice", job("u", spec="  priorityClassName: urgent\n")).status_code == 200
        )
        assert stored_job(api, "u").spec.priority == 5000
        # the older form: a built-in name in ``priority``
        assert apply(api, "alice", job("h", spec="  priority: high\n")).status_code == 200
        spec = stored_job(api, "h").spec
        assert (spec.priority_class_name, spec.priority) == ("high", 1000)
        # another tenant has not been allowed them
        text = job("u", spec="  priorityClassName: urgent\n")
        assert apply(api, "bob", text).status_code == 422

    def test_an_object_overrides_a_built_in(self, api: Api) -> None:
        assert apply(api, "admin", PRIORITY_CLASS.format(name="normal", value=7)).status_code == 200
        assert apply(api, "alice", job("plain")).status_code == 200
        assert stored_job(api, "plain").spec.priority == 7
        # and the job, fetched, applies again unchanged
        fetched = api.client.get("/api/v1/jobs/plain", headers=api.as_("alice")).json()
        again = api.client.post("/api/v1/apply", json=fetched, headers=api.as_("alice"))
        assert again.json()["items"][0]["action"] == "unchanged"

    def test_a_platform_admin_may_give_a_number(self, api: Api) -> None:
        text = job("raw", meta=", tenant: acme", spec="  priority: 424242\n")
        assert apply(api, "admin", text).status_code == 200
        spec = stored_job(api, "raw").spec
        assert (spec.priority_class_name, spec.priority) == (None, 424242)
        text = job("crit", meta=", tenant: acme", spec="  priority: critical\n")
        assert apply(api, "admin", text).status_code == 200
        assert stored_job(api, "crit").spec.priority == 10000

    def test_reapplying_the_manifest_is_unchanged(self, api: Api) -> None:
        text = job("plain")
        assert apply(api, "alice", text).status_code == 200
        assert apply(api, "alice", text).json()["items"][0]["action"] == "unchanged"


class TestShares:
    def test_only_a_platform_admin_sets_a_tenants_weight(self, api: Api) -> None:
        tenant = "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\nspec: {weight: 50}\n"
        assert apply(api, "tad", tenant).status_code == 403
        assert apply(api, "admin", tenant).status_code == 200

    def test_queue_weights_divide_the_tenants_share(self) -> None:
        def queue(tenant: str, name: str, weight: float) -> Queue:
            return Queue(
                metadata=ObjectMeta(name=name, tenant=tenant), spec=QueueSpec(weight=weight)
            )

        # acme makes many heavy queues; globex has one; both tenants weigh 1.
        queues = [queue("acme", f"q{i}", 1000) for i in range(10)] + [queue("globex", "q", 1)]
        weights = effective_weights({"acme": 1.0}, queues)
        assert sum(w for (t, _), w in weights.items() if t == "acme") == pytest.approx(1.0)
        assert weights[("globex", "q")] == pytest.approx(1.0)
        weights = effective_weights({"acme": 3.0, "globex": 1.0}, queues[:2] + queues[-1:])
        assert weights[("acme", "q0")] == pytest.approx(1.5)


class TestDependencies:
    def test_a_dependency_on_a_missing_job_is_refused(self, api: Api) -> None:
        answer = apply(api, "alice", job("b", spec="  dependsOn: [ghost]\n"))
        assert answer.status_code == 422
        assert fields(answer) == ["spec.dependsOn[0]"]
        assert "ghost" in answer.json()["message"]
        assert api.store.find("Job", "acme", "b") is None

    def test_another_tenants_job_does_not_count(self, api: Api) -> None:
        answer = apply(api, "alice", job("b", spec="  dependsOn: [secret]\n"))
        assert answer.status_code == 422
        assert fields(answer) == ["spec.dependsOn[0]"]

    def test_in_one_request_in_order(self, api: Api) -> None:
        text = job("a") + "---\n" + job("b", spec="  dependsOn: [a]\n")
        answer = apply(api, "alice", text)
        assert answer.status_code == 200, answer.text
        assert stored_job(api, "b").spec.depends_on == ["a"]

    def test_in_one_request_out_of_order_is_refused(self, api: Api) -> None:
        text = job("b", spec="  dependsOn: [a]\n") + "---\n" + job("a")
        answer = apply(api, "alice", text)
        assert answer.status_code == 422
        assert fields(answer) == ["spec.dependsOn[0]"]

    def test_a_cycle_through_a_recreated_job_is_refused(self, api: Api) -> None:
        # a, then b after a; a is deleted (finished) and comes back depending on b.
        assert (
            apply(
                api, "alice", job("a") + "---\n" + job("b", spec="  dependsOn: [a]\n")
            ).status_code
            == 200
        )
        api.store.delete("Job", "acme", "a")
        text = job("a", spec="  dependsOn: [c, b]\n")
        assert apply(api, "alice", job("c")).status_code == 200
        answer = apply(api, "alice", text)
        assert answer.status_code == 422
        assert fields(answer) == ["spec.dependsOn[1]"]
        assert "cycle" in answer.json()["message"]

    def test_a_longer_cycle_names_the_first_step(self, api: Api) -> None:
        chain = job("a") + "---\n" + job("b", spec="  dependsOn: [a]\n") + "---\n"
        chain += job("c", spec="  dependsOn: [b]\n")
        assert apply(api, "alice", chain).status_code == 200
        api.store.delete("Job", "acme", "a")
        answer = apply(api, "alice", job("a", spec="  dependsOn: [c]\n"))
        assert answer.status_code == 422
        assert fields(answer) == ["spec.dependsOn[0]"]
        assert "through job" in answer.json()["message"]

    def test_concurrent_submissions_in_one_batch(self, api: Api) -> None:
        """Writes of one group commit: b's check fails inside the batch, the batch runs again
        one by one, and b (after a) is stored."""
        from aipaas.api.tenancy import Role
        from aipaas.server.service import ObjectService
        from aipaas.tenancy.principal import Principal

        service = ObjectService(api.store, Principal("alice", "acme", Role.MEMBER))
        (a,) = service.prepare_text(job("a"))
        (b,) = service.prepare_text(job("b", spec="  dependsOn: [a]\n"))
        group = api.store._group_commit
        futures = [
            group.submit(service._creation(a), []),
            group.submit(service._creation(b), []),
        ]
        for future in futures:
            future.result(timeout=60)
        assert stored_job(api, "b").spec.depends_on == ["a"]


NAMED_GPU = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}}}
spec:
  queue: research
  tasks:
    - name: w
      command: ["true"]
      resources: {{gpu: {{count: 1, cores: 30, {named}}}}}
"""


class TestNamingGpus:
    """Naming the GPUs a share goes on (HAMi's use-gpuuuid) is the platform admin's to allow,
    per tenant (Tenant spec.allowGpuSelection, true unless set)."""

    def test_allowed_unless_the_platform_admin_forbids_it(self, api: Api) -> None:
        text = NAMED_GPU.format(name="by-uuid", named="uuids: [GPU-1234]")
        assert apply(api, "alice", text).status_code == 200

    @pytest.mark.parametrize(
        ("named", "path"),
        [
            ("uuids: [GPU-1234]", "spec.tasks[0].resources.gpu.uuids"),
            ("indices: [0]", "spec.tasks[0].resources.gpu.indices"),
        ],
    )
    def test_a_forbidding_tenant_refuses_the_job_naming_the_field(
        self, api: Api, named: str, path: str
    ) -> None:
        tenant = (
            "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
            "spec: {allowGpuSelection: false}\n"
        )
        assert apply(api, "admin", tenant).status_code == 200
        answer = apply(api, "alice", NAMED_GPU.format(name="named", named=named))
        assert answer.status_code == 422, answer.text
        assert fields(answer) == [path]
        assert "allowGpuSelection is false" in answer.text
        assert api.store.find("Job", "acme", "named") is None
        plain = NAMED_GPU.format(name="plain", named="memory: 1Gi")
        assert apply(api, "alice", plain).status_code == 200  # a share not naming its GPUs

    def test_a_tenant_admin_cannot_allow_it_for_their_own_tenant(self, api: Api) -> None:
        tenant = (
            "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\n"
            "spec: {allowGpuSelection: false}\n"
        )
        assert apply(api, "admin", tenant).status_code == 200
        allowing = tenant.replace("false", "true")
        assert apply(api, "tad", allowing).status_code in (403, 404)
        found = api.store.get("Tenant", "", "acme")
        assert isinstance(found, Tenant) and found.spec.allow_gpu_selection is False
