"""The server's rules for the queue tree (issue 11): a queue's parent exists in its tenant, no
cycles, no parent with unfinished jobs, jobs only in leaf queues, guarantees within quotas, and
a job's preemptibility resolved from its priority class as its priority is."""

from __future__ import annotations

from typing import Any

from tests.unit.server.api_world import Api


def _apply(api: Api, text: str, user: str = "admin") -> Any:
    return api.client.post("/api/v1/apply", content=text, headers=api.as_(user))


def _queue(name: str, tenant: str = "acme", **spec: str) -> str:
    fields = ", ".join(f"{k}: {v}" for k, v in spec.items())
    return f"""apiVersion: aipaas/v1
kind: Queue
metadata: {{name: {name}, tenant: {tenant}}}
spec: {{{fields}}}
"""


def _job(name: str, queue: str, extra: str = "", tenant: str = "acme") -> str:
    return f"""apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: {tenant}}}
spec:
  queue: {queue}
  tasks: [{{name: w, command: ["true"]}}]
{extra}"""


def assert_refused(answer: Any, path: str, words: str) -> None:
    assert answer.status_code == 422, answer.text
    fields = answer.json()["fields"]
    assert [f["path"] for f in fields] == [path], fields
    assert words in fields[0]["reason"], fields


def test_a_parent_must_exist_in_the_same_tenant(api: Api) -> None:
    assert_refused(
        _apply(api, _queue("sub", parent="nowhere")), "spec.parent", "queue nowhere does not"
    )
    assert _apply(api, _queue("only-globex", tenant="globex")).status_code == 200
    answer = _apply(api, _queue("sub", parent="only-globex"))
    assert_refused(answer, "spec.parent", "does not exist in tenant acme")
    assert api.store.find("Queue", "acme", "sub") is None


def test_a_queue_cannot_be_its_own_parent(api: Api) -> None:
    assert_refused(_apply(api, _queue("loop", parent="loop")), "spec.parent", "its own parent")


def test_a_parent_that_would_close_a_cycle_is_refused(api: Api) -> None:
    assert _apply(api, _queue("top")).status_code == 200
    assert _apply(api, _queue("mid", parent="top")).status_code == 200
    assert _apply(api, _queue("low", parent="mid")).status_code == 200
    answer = _apply(api, _queue("top", parent="low"))
    assert_refused(answer, "spec.parent", "top -> low -> mid -> top")
    stored = api.store.get("Queue", "acme", "top")
    assert stored.spec.parent is None  # type: ignore[attr-defined]


def test_jobs_go_only_in_leaf_queues(api: Api) -> None:
    assert _apply(api, _queue("team")).status_code == 200
    assert _apply(api, _queue("team-a", parent="team")).status_code == 200
    answer = _apply(api, _job("j1", "team"), user="alice")
    assert_refused(answer, "spec.queue", "queue team is the parent of queues (team-a)")
    assert api.store.find("Job", "acme", "j1") is None
    assert _apply(api, _job("j1", "team-a"), user="alice").status_code == 200


def test_a_queue_with_unfinished_jobs_cannot_become_a_parent(api: Api) -> None:
    assert _apply(api, _job("waiting", "research"), user="alice").status_code == 200
    answer = _apply(api, _queue("sub", parent="research"))
    assert_refused(answer, "spec.parent", "queue research has unfinished jobs (waiting)")
    # Another tenant's queue of the same name has jobs of its own: no matter to acme's.
    assert _apply(api, _queue("team")).status_code == 200
    assert _apply(api, _queue("sub", parent="team")).status_code == 200


def test_a_queue_already_under_its_parent_applies_again(api: Api) -> None:
    assert _apply(api, _queue("team")).status_code == 200
    text = _queue("team-a", parent="team", weight="2")
    assert _apply(api, text).status_code == 200
    again = _apply(api, text)
    assert again.status_code == 200, again.text
    assert again.json()["items"][0]["action"] == "unchanged"


def test_a_guarantee_above_the_quota_is_refused(api: Api) -> None:
    answer = _apply(api, _queue("big", guaranteed="{gpu: 4}", quota="{gpu: 2}"))
    assert_refused(answer, "spec.guaranteed.gpu", "4 is more than the quota of 2")
    answer = _apply(api, _queue("big", guaranteed="{memory: 2Gi}", quota="{memory: 1Gi}"))
    assert_refused(answer, "spec.guaranteed.memory", "2Gi is more than the quota of 1Gi")


def test_a_tenant_guarantee_above_its_quota_is_refused(api: Api) -> None:
    text = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: initech}
spec: {guaranteed: {cpu: "8"}, quota: {cpu: "4"}}
"""
    assert_refused(_apply(api, text), "spec.guaranteed.cpu", "8 is more than the quota of 4")


def test_preemptible_is_resolved_from_the_class_when_the_job_does_not_say(api: Api) -> None:
    classes = """apiVersion: aipaas/v1
kind: PriorityClass
metadata: {name: production}
spec: {value: 5000, preemptible: false}
"""
    assert _apply(api, classes).status_code == 200
    assert _apply(api, _job("plain", "research"), user="alice").status_code == 200
    assert (
        _apply(api, _job("prod", "research", "  priorityClassName: production\n")).status_code
        == 200
    )
    overridden = _job(
        "prod-spot", "research", "  priorityClassName: production\n  preemptible: true\n"
    )
    assert _apply(api, overridden).status_code == 200
    raw = _job("raw", "research", "  priority: 42\n")
    assert _apply(api, raw).status_code == 200
    stored = {
        name: api.store.get("Job", "acme", name).spec  # type: ignore[attr-defined]
        for name in ("plain", "prod", "prod-spot", "raw")
    }
    assert (stored["plain"].priority, stored["plain"].preemptible) == (100, True)
    assert (stored["prod"].priority, stored["prod"].preemptible) == (5000, False)
    assert (stored["prod-spot"].priority, stored["prod-spot"].preemptible) == (5000, True)
    assert (stored["raw"].priority, stored["raw"].preemptible) == (42, True)
    # The same manifest applies again unchanged: the resolved spec is what it resolves to.
    again = _apply(api, _job("prod", "research", "  priorityClassName: production\n"))
    assert again.json()["items"][0]["action"] == "unchanged", again.text


def test_a_job_may_say_it_is_not_preemptible(api: Api) -> None:
    answer = _apply(api, _job("keep", "research", "  preemptible: false\n"), user="alice")
    assert answer.status_code == 200, answer.text
    assert api.store.get("Job", "acme", "keep").spec.preemptible is False  # type: ignore[attr-defined]


def test_job_fields_are_validated_with_their_paths(api: Api) -> None:
    answer = _apply(api, _job("slow", "research", "  timeLimit: soon\n"), user="alice")
    assert_refused(answer, "spec.timeLimit", "must be a duration like")
    answer = _apply(
        api, _job("both", "research", "  topology: {required: rack, preferred: rack}\n")
    )
    assert_refused(answer, "spec.topology", "exactly one of required or preferred")


def test_a_job_stored_before_preemptible_was_resolved_applies_again_unchanged(api: Api) -> None:
    from aipaas.api.registry import parse_object

    text = _job("old", "research")
    assert _apply(api, text, user="alice").status_code == 200
    stored = api.store.get("Job", "acme", "old")
    # As a job stored by an older server: no spec.preemptible.
    spec = stored.spec.model_copy(update={"preemptible": None})  # type: ignore[attr-defined]
    api.store.delete("Job", "acme", "old")
    wire = stored.model_copy(update={"spec": spec}).to_wire()
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        wire["metadata"].pop(key, None)
    api.store.create(parse_object(wire))
    again = _apply(api, text, user="alice")
    assert again.status_code == 200, again.text
    assert again.json()["items"][0]["action"] == "unchanged"


def test_a_replace_is_held_to_the_same_rules(api: Api) -> None:
    assert _apply(api, _queue("top")).status_code == 200
    assert _apply(api, _queue("low", parent="top")).status_code == 200
    current = api.client.get("/api/v1/queues/top?tenant=acme", headers=api.as_("tad")).json()
    version = current["metadata"]["resourceVersion"]
    body = (
        "apiVersion: aipaas/v1\nkind: Queue\n"
        f"metadata: {{name: top, tenant: acme, resourceVersion: '{version}'}}\n"
        "spec: {parent: low}\n"
    )
    answer = api.client.put("/api/v1/queues/top", content=body, headers=api.as_("tad"))
    assert_refused(answer, "spec.parent", "would close a cycle")
    body = body.replace("{parent: low}", "{parent: research}")
    answer = api.client.put("/api/v1/queues/top", content=body, headers=api.as_("tad"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["spec"]["parent"] == "research"
