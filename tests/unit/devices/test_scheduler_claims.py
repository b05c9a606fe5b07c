"""DRA claims inside the scheduling cycle: filter, topology score, reserve and release."""

from __future__ import annotations

from aipaas.devices.inventory import Inventory
from aipaas.devices.ledger import DeviceLedger
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable
from tests.unit.devices.devices_builders import (
    CLASSES,
    DRIVER,
    allocated,
    claim,
    eight_h100,
    node_slice,
    req,
)

MATCH = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]


def cluster() -> ClusterState:
    inventory = Inventory([node_slice("a", eight_h100()), node_slice("b", eight_h100())])
    # On a, gpu-0 and gpu-4 are held, so neither NVLink domain there has 4 free GPUs.
    ledger = DeviceLedger.from_claims(inventory, CLASSES, [allocated("x", "a", "gpu-0", "gpu-4")])
    nodes = [NodeSpec("a", 64_000, 512_000), NodeSpec("b", 64_000, 512_000)]
    return ClusterState(nodes, devices=ledger)


def four_gpus(name: str) -> PodRequest:
    return PodRequest(
        name, 1_000, 1_000, claims=(claim("c", req("g", count=4), constraints=MATCH),)
    )


def test_claims_choose_the_node_and_the_devices() -> None:
    state = cluster()
    scheduler = Scheduler(state, "default")
    first = scheduler.schedule(four_gpus("p1"))
    assert isinstance(first, Placement)
    assert first.node == "b"
    assert first.devices is not None
    assert [p.device.name for p in first.devices.picks] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    second = scheduler.schedule(four_gpus("p2"))
    assert isinstance(second, Placement) and second.devices is not None
    assert [p.device.name for p in second.devices.picks] == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_unsatisfiable_claims_say_why_per_node() -> None:
    state = cluster()
    scheduler = Scheduler(state, "default")
    assert isinstance(scheduler.schedule(four_gpus("p1")), Placement)
    assert isinstance(scheduler.schedule(four_gpus("p2")), Placement)
    refused = scheduler.schedule(four_gpus("p3"))
    assert isinstance(refused, Unschedulable)
    (reason,) = refused.reasons
    assert reason.startswith("0/2 nodes are available: ")
    assert "no NVLink domain has 4 free" in reason


def test_release_gives_the_devices_back() -> None:
    state = cluster()
    scheduler = Scheduler(state, "default")
    placed = [scheduler.schedule(four_gpus(f"p{i}")) for i in (1, 2)]
    assert all(isinstance(p, Placement) for p in placed)
    assert isinstance(scheduler.schedule(four_gpus("p3")), Unschedulable)
    first = placed[0]
    assert isinstance(first, Placement)
    state.release(first)
    again = scheduler.schedule(four_gpus("p3"))
    assert isinstance(again, Placement)
    assert again.devices is not None
    assert [p.device.name for p in again.devices.picks] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_gang_with_claims_is_all_or_nothing() -> None:
    state = cluster()
    scheduler = Scheduler(state, "default")
    result = scheduler.schedule_gang([four_gpus(f"w{i}") for i in range(3)])
    assert isinstance(result, Unschedulable)
    assert result.reasons[0] == "gang: 2 of 3 pods fit"
    # Nothing stays held: both of b's NVLink domains are free again.
    assert isinstance(scheduler.schedule_gang([four_gpus("v0"), four_gpus("v1")]), list)


def test_claims_without_published_devices_are_unschedulable() -> None:
    state = ClusterState([NodeSpec("a", 64_000, 512_000)])
    refused = Scheduler(state, "default").schedule(four_gpus("p"))
    assert isinstance(refused, Unschedulable)
    assert refused.reasons == ("0/1 nodes are available: 1 no devices are published for claims",)


def test_pods_without_claims_are_untouched_by_the_device_plugins() -> None:
    state = cluster()
    placed = Scheduler(state, "default").schedule(PodRequest("plain", 1_000, 1_000))
    assert isinstance(placed, Placement)
    assert placed.devices is None
