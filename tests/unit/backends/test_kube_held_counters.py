"""The Kubernetes inventory hands what others' claims hold to the device ledger (partitionable
devices): a partition another scheduler allocated, and what it consumes of its GPU's shared
counters, are held as aipaas's own allocations are, so no partition of aipaas's overbooks the
GPU, while an adminAccess request may still select it. An allocation that cannot be read has
its device left out of its slice and its counters taken off instead."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.inventory import inventory
from aipaas.devices.inventory import Inventory as DeviceInventory
from aipaas.devices.ledger import DeviceLedger
from tests.unit.devices.devices_builders import claim as resource_claim
from tests.unit.devices.devices_builders import device_class, req

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
    """The partitions' slice as published and the shared counters, as the inventory has them."""
    found = inventory([node()], [], slices(), claims, tasks)
    by_name = {s.metadata.name: s for s in found.slices}
    counters = by_name["counters"].spec.shared_counters[0].counters
    devices = [d.name for d in by_name["partitions"].spec.devices]
    return {k: v.value for k, v in counters.items()}, devices


CLASSES = {"mig": device_class("mig", f'device.driver == "{DRIVER}"')}


def ledger(claims: list[dict[str, Any]], tasks: frozenset[str] = frozenset()) -> DeviceLedger:
    """The device ledger the controller builds: the slices, and what others' claims hold."""
    found = inventory([node()], [], slices(), claims, tasks)
    return DeviceLedger.from_claims(
        DeviceInventory(list(found.slices)), CLASSES, list(found.held_elsewhere)
    )


def fits(book: DeviceLedger, *, admin: bool = False) -> bool:
    [answer] = book.feasible([resource_claim("want", req("m", "mig", admin=admin))], ["gpu-a"])
    return answer


def test_partitions_others_hold_are_held_in_the_ledger_with_their_counters() -> None:
    # published whole: what others hold is handed over as their allocations
    assert published([claim("mig-0", "theirs")]) == (
        {"memory": "80Gi", "compute": "7"},
        ["mig-0", "mig-1", "mig-2"],
    )
    one = ledger([claim("mig-0", "theirs")])
    assert fits(one)  # 40Gi and 4 compute are left: one more partition
    two = ledger([claim("mig-0", "theirs"), claim("mig-1", "others")])
    assert not fits(two)  # mig-2 is published, but the GPU's counters are used up
    assert fits(two, admin=True)  # adminAccess may select a device in use, as kube-scheduler's
    every = two.reserve(
        "admin", [resource_claim("all", req("m", "mig", all_=True, admin=True))], "gpu-a"
    )
    assert not isinstance(every, str)
    assert sorted(p.device.id[2] for p in every.picks) == ["mig-0", "mig-1", "mig-2"]


def test_aipaas_s_own_partitions_are_counted_by_aipaas_itself() -> None:
    found = inventory([node()], [], slices(), [claim("mig-0", "task")], frozenset({"task"}))
    assert found.held_elsewhere == ()
    assert published([claim("mig-0", "task")], frozenset({"task"})) == (
        {"memory": "80Gi", "compute": "7"},
        ["mig-0", "mig-1", "mig-2"],
    )


def test_an_allocation_that_cannot_be_read_leaves_its_device_out() -> None:
    unreadable = claim("mig-0", "theirs")
    unreadable["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = "all"
    counters, devices = published([unreadable])
    assert devices == ["mig-1", "mig-2"]
    assert counters == {"memory": "40Gi", "compute": "4"}


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
    # a partition held by a claim whose allocation cannot be read: the pool's slices are read
    # with it left out, not taken from what was read before
    unreadable = claim("mig-0", "theirs")
    unreadable["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = "all"
    held = inventory([node()], [], versioned("8"), [unreadable], frozenset(), parsed)
    by_name = {s.metadata.name: s for s in held.slices}
    assert [d.name for d in by_name["partitions"].spec.devices] == ["mig-1", "mig-2"]
