"""The Kubernetes inventory counts what others' partitions consume of a GPU's shared counters
(partitionable devices): a partition another scheduler allocated is left out, and its
counters are no longer free for aipaas's partitions of the same GPU."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.inventory import inventory

DRIVER = "gpu.nvidia.com"


def node() -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-a", "labels": {}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def partition(index: int) -> dict[str, Any]:
    return {
        "name": f"mig-{index}",
        "attributes": {"type": {"string": "mig"}},
        "consumesCounters": [
            {
                "counterSet": "gpu-0",
                "counters": {"memory": {"value": "40Gi"}, "compute": {"value": "3"}},
            }
        ],
    }


def slices() -> list[dict[str, Any]]:
    pool = {"name": "gpu-a", "generation": 1, "resourceSliceCount": 2}
    counters = {
        "name": "gpu-0",
        "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}},
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": "counters"},
            "spec": {"driver": DRIVER, "nodeName": "gpu-a", "pool": pool,
                     "sharedCounters": [counters]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": "partitions"},
            "spec": {"driver": DRIVER, "nodeName": "gpu-a", "pool": pool,
                     "devices": [partition(i) for i in range(3)]},
        },
    ]  # fmt: skip


def claim(device: str, holder: str) -> dict[str, Any]:
    result = {"request": "mig", "driver": DRIVER, "pool": "gpu-a", "device": device}
    return {
        "metadata": {"name": f"{holder}-claim", "namespace": "acme"},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": holder, "uid": holder}],
        },
    }


def published(claims: list[dict[str, Any]], tasks: frozenset[str] = frozenset()) -> Any:
    found = inventory([node()], [], slices(), claims, tasks)
    by_name = {s.metadata.name: s for s in found.slices}
    counters = by_name["counters"].spec.shared_counters[0].counters
    devices = [d.name for d in by_name["partitions"].spec.devices]
    return {k: v.value for k, v in counters.items()}, devices


def test_partitions_others_hold_take_their_counters() -> None:
    counters, devices = published([claim("mig-0", "theirs")])
    assert devices == ["mig-1", "mig-2"]
    assert counters == {"memory": "40Gi", "compute": "4"}
    counters, devices = published([claim("mig-0", "theirs"), claim("mig-1", "others")])
    assert devices == ["mig-2"]  # published, but its counters are gone
    assert counters == {"memory": "0", "compute": "1"}


def test_aipaas_s_own_partitions_are_counted_by_aipaas_itself() -> None:
    counters, devices = published([claim("mig-0", "task")], frozenset({"task"}))
    assert devices == ["mig-0", "mig-1", "mig-2"]
    assert counters == {"memory": "80Gi", "compute": "7"}


def test_nothing_held_leaves_the_counters_as_published() -> None:
    assert published([]) == ({"memory": "80Gi", "compute": "7"}, ["mig-0", "mig-1", "mig-2"])


def versioned(version: str) -> list[dict[str, Any]]:
    documents = slices()
    for document in documents:
        document["metadata"]["resourceVersion"] = version
    return documents


def test_slices_read_before_are_reused_until_their_version_or_others_holdings_change() -> None:
    parsed: dict[tuple[str, str], Any] = {}
    first = inventory([node()], [], versioned("7"), [], frozenset(), parsed)
    again = inventory([node()], [], versioned("7"), [], frozenset(), parsed)
    assert [id(s) for s in again.slices] == [id(s) for s in first.slices]  # not read again
    newer = inventory([node()], [], versioned("8"), [], frozenset(), parsed)
    assert all(id(s) not in {id(o) for o in first.slices} for s in newer.slices)
    assert set(parsed) == {("counters", "8"), ("partitions", "8")}  # the old versions went
    # another scheduler took a partition: the pool's slices are read with it left out, not
    # taken from what was read before
    held = inventory([node()], [], versioned("8"), [claim("mig-0", "theirs")], frozenset(), parsed)
    by_name = {s.metadata.name: s for s in held.slices}
    assert [d.name for d in by_name["partitions"].spec.devices] == ["mig-1", "mig-2"]
