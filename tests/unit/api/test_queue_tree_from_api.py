"""API objects -> the batch session's model (scheduler/batch/from_api.py): the queue tree in
model units, creation order, broken parents tolerated, pod requests and jobs."""

from __future__ import annotations

from typing import Any

from aipaas.api.job import Job as ApiJob
from aipaas.api.queue import Queue
from aipaas.api.registry import parse_object
from aipaas.api.tenancy import Tenant
from aipaas.scheduler.batch.from_api import batch_job, pod_request, queue_tree
from aipaas.scheduler.batch.model import NO_LIMIT, UNBOUNDED, Resources
from aipaas.scheduler.framework.types import Placement


def tenant(name: str, stamp: str | None = None, **spec: Any) -> Tenant:
    meta: dict[str, Any] = {"name": name}
    if stamp:
        meta["creationTimestamp"] = stamp
    obj = parse_object(
        {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": meta, "spec": spec}
    )
    assert isinstance(obj, Tenant)
    return obj


def queue(name: str, owner: str, stamp: str | None = None, **spec: Any) -> Queue:
    meta: dict[str, Any] = {"name": name, "tenant": owner}
    if stamp:
        meta["creationTimestamp"] = stamp
    obj = parse_object({"apiVersion": "aipaas/v1", "kind": "Queue", "metadata": meta, "spec": spec})
    assert isinstance(obj, Queue)
    return obj


def job(**spec: Any) -> ApiJob:
    obj = parse_object(
        {
            "apiVersion": "aipaas/v1",
            "kind": "Job",
            "metadata": {"name": "j", "tenant": "t"},
            "spec": spec,
        }
    )
    assert isinstance(obj, ApiJob)
    return obj


def test_tree_shape_and_units() -> None:
    tree = queue_tree(
        [tenant("t", guaranteed={"gpu": 4}, quota={"gpu": 64}, weight=2, priority=1)],
        [
            queue(
                "a",
                "t",
                guaranteed={"gpu": 0.5, "cpu": "500m", "memory": "1Gi", "gpuMemory": "2Gi"},
                quota={"gpu": 8, "memory": "4Gi"},
                weight=3,
                priority=2,
                minRuntime="30m",
                reservations=2,
                fairSharing={"usageHalfLife": "1h"},
            ),
            queue("b", "t", parent="a"),
        ],
        usage={"t/a": Resources(gpu_milli=7)},
    )
    assert set(tree) == {"", "t", "t/a", "t/b"}
    root, t, a, b = tree[""], tree["t"], tree["t/a"], tree["t/b"]
    assert root.parent is None and root.quota == NO_LIMIT
    assert (t.parent, t.weight, t.priority) == ("", 2, 1)
    assert t.guaranteed == Resources(gpu_milli=4000)
    assert t.quota == Resources(64000, UNBOUNDED, UNBOUNDED, UNBOUNDED)
    assert a.parent == "t" and b.parent == "t/a"
    assert a.guaranteed == Resources(500, 500, 1024, 2048)
    assert a.quota == Resources(8000, UNBOUNDED, 4096, UNBOUNDED)
    assert (a.weight, a.priority, a.min_runtime, a.reservations) == (3, 2, 1800.0, 2)
    assert a.usage_half_life == 3600.0 and a.decayed_usage == Resources(gpu_milli=7)
    assert b.usage_half_life is None and b.reservations == 1
    assert b.min_runtime == 1800.0  # none of its own: its parent a's (a parent has no jobs)


def test_created_follows_timestamps_then_list_order() -> None:
    tree = queue_tree(
        [
            tenant("late", "2026-01-02T00:00:00.000000Z"),
            tenant("early", "2026-01-01T00:00:00.000000Z"),
        ],
        [
            queue("unstamped", "early"),
            queue("second", "early", "2026-01-01T10:00:00+00:00"),
            queue("first", "early", "2026-01-01T09:00:00.000000Z"),
            queue("tie-b", "late", "2026-01-03T00:00:00Z"),
            queue("tie-a", "late", "2026-01-03T00:00:00Z"),
        ],
    )
    assert tree["early"].created < tree["late"].created
    order = sorted(
        ["early/unstamped", "early/second", "early/first"], key=lambda k: tree[k].created
    )
    assert order == ["early/first", "early/second", "early/unstamped"]
    assert tree["late/tie-b"].created < tree["late/tie-a"].created


def test_broken_parents_go_under_the_tenant() -> None:
    tree = queue_tree(
        [tenant("t")],
        [
            queue("orphan", "t", parent="gone"),
            queue("x", "t", parent="y"),
            queue("y", "t", parent="x"),
            queue("below", "t", parent="x"),
            queue("stray", "nobody"),
        ],
    )
    assert tree["t/orphan"].parent == "t"
    assert tree["t/x"].parent == "t" and tree["t/y"].parent == "t"
    assert tree["t/below"].parent == "t/x"
    assert tree["nobody"].parent == "" and tree["nobody/stray"].parent == "nobody"


def test_pod_request_whole_fraction_and_model() -> None:
    whole = job(
        tasks=[{"name": "w", "command": ["x"], "resources": {"gpu": {"count": 2, "model": "H100"}}}]
    )
    request = pod_request(whole.spec.tasks[0], "p")
    assert (request.gpu_count, request.gpu_milli, request.gpu_models) == (2, 1000, ("H100",))
    half = job(
        tasks=[
            {"name": "w", "command": ["x"], "resources": {"gpu": 0.25, "cpu": "2", "memory": "1Gi"}}
        ]
    )
    request = pod_request(half.spec.tasks[0], "p")
    assert (request.gpu_count, request.gpu_milli, request.cpu_milli, request.memory_mib) == (
        1,
        250,
        2000,
        1024,
    )
    none = job(tasks=[{"name": "w", "command": ["x"]}])
    request = pod_request(none.spec.tasks[0], "p")
    assert (request.gpu_count, request.gpu_milli, request.gpu_models) == (0, 0, ())


def test_batch_job() -> None:
    api = job(
        queue="a",
        priority=50,
        preemptible=False,
        minAvailable=2,
        timeLimit="2h",
        topology={"preferred": "rack"},
        tasks=[
            {
                "name": "w",
                "replicas": 2,
                "command": ["x"],
                "resources": {"gpu": {"count": 1, "memory": "40Gi"}},
            },
            {"name": "ps", "command": ["x"]},
        ],
    )
    placement = Placement("t/j/w-1", "n1", 0, (0,), 1000, 1000, 256)
    model = batch_job(api, key_order=4, submitted=12.0, running={"w-1": (placement, 100.0)})
    assert (model.key, model.tenant, model.queue) == ("t/j", "t", "t/a")
    assert [t.name for t in model.tasks] == ["w-0", "w-1", "ps-0"]
    assert [t.running for t in model.tasks] == [False, True, False]
    assert model.tasks[1].since == 100.0 and model.tasks[1].placement == placement
    assert model.tasks[0].gpu_memory_mib == 40 * 1024 and model.tasks[2].gpu_memory_mib == 0
    assert (model.priority, model.preemptible, model.min_available) == (50, False, 2)
    assert (model.submitted, model.order, model.time_limit) == (12.0, 4, 7200.0)
    assert (model.topology_required, model.topology_preferred) == (None, "topology.aipaas.dev/rack")
    assert (model.started, model.ends_at) == (100.0, 7300.0)


def test_batch_job_defaults() -> None:
    model = batch_job(
        job(tasks=[{"name": "w", "replicas": 3, "command": ["x"]}]), key_order=0, submitted=0.0
    )
    assert model.queue == "t/default"
    assert model.preemptible is True  # unresolved: the classes' default
    assert model.min_available == 3  # the whole gang
    assert model.time_limit is None and model.started is None and model.ends_at is None
