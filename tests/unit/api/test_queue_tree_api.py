"""The API fields of the queue tree and of batch jobs (issue 11): what is accepted, what is
refused and with which path, and durations and priority resolution as pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.duration import seconds
from aipaas.api.job import Job, topology_label
from aipaas.api.meta import ObjectMeta
from aipaas.api.priority import PriorityClass, PriorityClassSpec, resolve_priority
from aipaas.api.queue import Queue
from aipaas.api.registry import parse_object
from aipaas.api.tenancy import Tenant
from aipaas.errors import InvalidObject


def _queue(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Queue",
        "metadata": {"name": "q", "tenant": "t"},
        "spec": spec,
    }


def _tenant(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": spec}


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": "j", "tenant": "t"},
        "spec": {"queue": "q", "tasks": [{"name": "w", "command": ["x"]}], **spec},
    }


def _paths(document: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObject) as caught:
        parse_object(document)
    return [f.path for f in caught.value.fields]


def test_queue_fields_accepted_and_kept_as_written() -> None:
    queue = parse_object(
        _queue(
            parent="team",
            weight=2,
            guaranteed={"gpu": 2, "cpu": "8", "memory": "64Gi", "gpuMemory": "40Gi"},
            quota={"gpu": 8, "gpuMemory": "80Gi"},
            priority=3,
            minRuntime="30m",
            reservations=0,
            fairSharing={"usageHalfLife": "2h"},
        )
    )
    assert isinstance(queue, Queue)
    spec = queue.spec
    assert spec.parent == "team"
    assert spec.guaranteed.gpu_milli() == 2000
    assert spec.guaranteed.gpu_memory_mib() == 40 * 1024
    assert spec.quota.gpu_memory_mib() == 80 * 1024
    assert (spec.priority, spec.reservations, spec.min_runtime) == (3, 0, "30m")
    assert spec.fair_sharing is not None and spec.fair_sharing.usage_half_life == "2h"
    wire = queue.to_wire()["spec"]
    assert wire["minRuntime"] == "30m"
    assert wire["fairSharing"] == {"usageHalfLife": "2h"}
    assert parse_object(queue.to_wire()) == queue


def test_queue_defaults_keep_old_manifests_meaning() -> None:
    queue = parse_object(_queue(weight=1, quota={"gpu": 4}))
    assert isinstance(queue, Queue)
    spec = queue.spec
    assert spec.parent is None and spec.priority == 0 and spec.reservations == 1
    assert spec.min_runtime is None and spec.fair_sharing is None
    assert spec.guaranteed.gpu is None and spec.quota.gpu_memory is None


@pytest.mark.parametrize(
    ("spec", "paths"),
    [
        ({"parent": "Not A Name"}, ["spec.parent"]),
        ({"priority": "high"}, ["spec.priority"]),
        ({"priority": 1.5}, ["spec.priority"]),
        ({"reservations": -1}, ["spec.reservations"]),
        ({"minRuntime": "soon"}, ["spec.minRuntime"]),
        ({"minRuntime": "-5m"}, ["spec.minRuntime"]),
        ({"fairSharing": {}}, ["spec.fairSharing.usageHalfLife"]),
        ({"fairSharing": {"usageHalfLife": "0s"}}, ["spec.fairSharing.usageHalfLife"]),
        ({"guaranteed": {"cpu": "-1"}}, ["spec.guaranteed.cpu"]),
        ({"guaranteed": {"gpus": 1}}, ["spec.guaranteed.gpus"]),
        ({"quota": {"gpuMemory": "-1Gi"}}, ["spec.quota.gpuMemory"]),
        ({"guaranteed": {"gpu": 3}, "quota": {"gpu": 2}}, ["spec.guaranteed.gpu"]),
        (
            {"guaranteed": {"gpuMemory": "2Gi"}, "quota": {"gpuMemory": "1Gi"}},
            ["spec.guaranteed.gpuMemory"],
        ),
        ({"weight": -1}, ["spec.weight"]),
    ],
)
def test_queue_fields_refused_with_their_paths(spec: dict[str, Any], paths: list[str]) -> None:
    assert _paths(_queue(**spec)) == paths


def test_a_queue_cannot_name_itself_as_parent() -> None:
    assert _paths(_queue(parent="q")) == ["spec.parent"]


def test_tenant_guaranteed_priority_and_fair_sharing() -> None:
    tenant = parse_object(
        _tenant(
            guaranteed={"gpu": 4}, quota={"gpu": 8}, priority=1, fairSharing={"usageHalfLife": 600}
        )
    )
    assert isinstance(tenant, Tenant)
    assert tenant.spec.guaranteed.gpu_milli() == 4000
    assert tenant.spec.priority == 1
    assert _paths(_tenant(guaranteed={"gpu": 9}, quota={"gpu": 8})) == ["spec.guaranteed.gpu"]
    assert _paths(_tenant(priority="x")) == ["spec.priority"]


def test_job_fields() -> None:
    job = parse_object(_job(preemptible=False, timeLimit="1h30m", topology={"required": "rack"}))
    assert isinstance(job, Job)
    assert job.spec.preemptible is False
    assert job.spec.time_limit_seconds == 5400
    assert job.spec.topology is not None and job.spec.topology.required == "rack"
    plain = parse_object(_job())
    assert isinstance(plain, Job)
    assert plain.spec.preemptible is None and plain.spec.time_limit_seconds is None
    assert "preemptible" not in plain.to_wire()["spec"]


@pytest.mark.parametrize(
    ("spec", "paths"),
    [
        ({"preemptible": "yes"}, ["spec.preemptible"]),
        ({"timeLimit": 0}, ["spec.timeLimit"]),
        ({"timeLimit": "2 hours"}, ["spec.timeLimit"]),
        ({"topology": {}}, ["spec.topology"]),
        ({"topology": {"required": "rack", "preferred": "block"}}, ["spec.topology"]),
        ({"topology": {"required": "Rack Level"}}, ["spec.topology.required"]),
        ({"topology": {"preferred": "a/b/c"}}, ["spec.topology.preferred"]),
        ({"topology": {"nearby": "rack"}}, ["spec.topology.nearby"]),
    ],
)
def test_job_fields_refused_with_their_paths(spec: dict[str, Any], paths: list[str]) -> None:
    assert _paths(_job(**spec)) == paths


def test_topology_levels_name_node_labels() -> None:
    assert topology_label("rack") == "topology.aipaas.dev/rack"
    assert topology_label("example.com/block") == "example.com/block"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (90, 90),
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        (0, 0),
    ],
)
def test_durations(text: int | str, expected: int) -> None:
    assert seconds(text) == expected


@pytest.mark.parametrize("text", ["", "h", "2 h", "1.5h", "2w", "-1", True, 10**12])
def test_bad_durations(text: Any) -> None:
    with pytest.raises(ValueError, match=r"duration|seconds|negative"):
        seconds(text)


def _class(name: str, value: int, preemptible: bool = True) -> PriorityClass:
    return PriorityClass(
        metadata=ObjectMeta(name=name), spec=PriorityClassSpec(value=value, preemptible=preemptible)
    )


CLASSES = {
    "production": _class("production", 5000, preemptible=False),
    "high": _class("high", 2000),
}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, (100, True)),  # the default class, normal
        ({"priorityClassName": "production"}, (5000, False)),
        ({"priorityClassName": "production", "preemptible": True}, (5000, True)),
        ({"priority": "high"}, (2000, True)),  # the stored class overrides the built-in
        ({"priority": 50}, (50, True)),  # an admin's number of its own
        ({"priority": 50, "preemptible": False}, (50, False)),
        ({"priorityClassName": "production", "priority": 7}, (7, False)),
        ({"priority": "critical"}, (10000, True)),
    ],
)
def test_resolve_priority_as_a_platform_admin(
    spec: dict[str, Any], expected: tuple[int, bool]
) -> None:
    job = parse_object(_job(**spec))
    assert isinstance(job, Job)
    assert resolve_priority(job.spec, CLASSES) == expected


def test_resolve_priority_names_a_missing_class() -> None:
    job = parse_object(_job(priorityClassName="nope"))
    assert isinstance(job, Job)
    with pytest.raises(InvalidObject) as caught:
        resolve_priority(job.spec, CLASSES)
    assert [f.path for f in caught.value.fields] == ["spec.priorityClassName"]
