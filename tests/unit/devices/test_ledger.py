"""The ledger the scheduler calls (filter, explain, score, reserve, unreserve) and device rows."""

from __future__ import annotations

from aipaas.api.devices import ResourceClaim
from aipaas.devices.inventory import Inventory
from aipaas.devices.ledger import DeviceLedger
from aipaas.devices.listing import device_rows
from aipaas.devices.topology_files import GpuShape, gpu_node_slices
from tests.unit.devices.devices_builders import (
    CLASSES,
    DRIVER,
    allocated,
    claim,
    eight_h100,
    gpu,
    node_slice,
    req,
)

MATCH = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]


def ledger() -> DeviceLedger:
    inventory = Inventory([node_slice("a", eight_h100()), node_slice("b", eight_h100())])
    return DeviceLedger.from_claims(inventory, CLASSES, [allocated("x", "a", "gpu-0", "gpu-4")])


class TestDeviceLedger:
    def test_filter_explain_score(self) -> None:
        book = ledger()
        pod = [claim("c", req("g", count=4), constraints=MATCH)]
        assert book.feasible(pod, ["a", "b"]) == [False, True]
        assert book.explain(pod, ["a", "b"]) == {
            'claim "c": 6 matching devices are free but no NVLink domain has 4 free '
            f"(matchAttribute {DRIVER}/nvlinkDomain; the most in one is 3)": 1
        }
        assert book.score([claim("c", req("g", count=2))], ["a", "b"]) == [100, 100]

    def test_reserve_holds_and_unreserve_gives_back(self) -> None:
        book = ledger()
        pod = [claim("c", req("g", count=4), constraints=MATCH)]
        first = book.reserve("pod-1", pod, "b")
        assert not isinstance(first, str)
        assert [p.device.name for p in first.picks] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
        second = book.reserve("pod-2", pod, "b")
        assert not isinstance(second, str)
        assert [p.device.name for p in second.picks] == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
        assert book.feasible(pod, ["b"]) == [False]
        book.unreserve("pod-1")
        book.unreserve("pod-1")  # idempotent
        assert book.feasible(pod, ["b"]) == [True]
        refused = book.reserve("pod-3", pod, "a")
        assert isinstance(refused, str) and "no NVLink domain has 4 free" in refused

    def test_reserve_again_replaces(self) -> None:
        book = ledger()
        pod = [claim("c", req("g", count=8))]
        assert not isinstance(book.reserve("pod-1", pod, "b"), str)
        assert not isinstance(book.reserve("pod-1", pod, "b"), str)  # its own devices come back

    def test_results_to_persist(self) -> None:
        book = ledger()
        pod = [claim("c", req("g"))]
        book.reserve("pod-1", pod, "b")
        (status,) = book.results("pod-1", pod).values()
        assert [r.device for r in status.devices.results] == ["gpu-0"]
        assert book.results("nobody", pod) == {}


class TestDeviceRows:
    def test_states_and_holders(self) -> None:
        slices = gpu_node_slices(
            "m", GpuShape(count=1, model="A100", productName="A100", mig="a100-80gb")
        )
        inventory = Inventory(slices)
        in_use = inventory.in_use(
            [allocated("train", "m", "gpu-0-mig-3g-40gb-0", driver="gpu.nvidia.com")]
        )
        rows = {r.device: r for r in device_rows(inventory, in_use)}
        assert rows["gpu-0-mig-3g-40gb-0"].state == "Allocated"
        assert rows["gpu-0-mig-3g-40gb-0"].holders == ("train",)
        assert rows["gpu-0"].state == "Blocked"
        assert rows["gpu-0-mig-3g-40gb-4"].state == "Free"
        assert rows["gpu-0-mig-4g-40gb-0"].state == "Blocked"
        wire = rows["gpu-0"].to_wire()
        assert wire["attributes"]["gpu.nvidia.com/model"] == "A100"
        assert wire["capacity"]["gpu.nvidia.com/memory"] == "80Gi"


def shared(name: str, *requests: dict[str, object]) -> ResourceClaim:
    """A claim that is one object for every pod naming it (it has a uid)."""
    made = claim(name, *requests)
    return made.model_copy(
        update={"metadata": made.metadata.model_copy(update={"uid": f"acme/{name}"})}
    )


def on_node(name: str, node: str) -> ResourceClaim:
    """A shared claim allocated in an earlier cycle on ``node`` (gpu-0)."""
    made = allocated(name, node, "gpu-0")
    assert made.status is not None and made.status.allocation is not None
    pinned = made.status.allocation.model_copy(
        update={
            "node_selector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        }
    )
    status = made.status.model_copy(update={"allocation": pinned})
    meta = made.metadata.model_copy(update={"uid": f"acme/{name}"})
    return made.model_copy(update={"metadata": meta, "status": status})


class TestSharedClaims:
    def test_consumers_share_one_allocation_on_its_node(self) -> None:
        book = ledger()
        pod = [shared("s", req("g", count=2))]
        first = book.reserve("pod-1", pod, "b")
        assert not isinstance(first, str)
        assert [p.device.name for p in first.picks] == ["gpu-0", "gpu-1"]
        assert book.feasible(pod, ["a", "b"]) == [False, True]
        assert book.explain(pod, ["a", "b"]) == {
            'claim "s" is allocated on node b, which every task that shares it must run on': 1
        }
        joined = book.reserve("pod-2", pod, "b")
        assert not isinstance(joined, str) and joined.picks == ()  # nothing more held
        one = book.results("pod-1", pod)["s"].devices.results
        two = book.results("pod-2", pod)["s"].devices.results
        assert [r.device for r in one] == [r.device for r in two] == ["gpu-0", "gpu-1"]
        assert isinstance(book.reserve("pod-3", pod, "a"), str)

    def test_devices_are_freed_with_the_last_consumer(self) -> None:
        book = ledger()
        pod = [shared("s", req("g", count=8))]
        assert not isinstance(book.reserve("pod-1", pod, "b"), str)
        assert not isinstance(book.reserve("pod-2", pod, "b"), str)
        whole = [claim("w", req("g", count=8))]
        assert book.unreserve("pod-1") == []  # pod-2 still uses it
        assert book.feasible(whole, ["b"]) == [False]
        freed = book.unreserve("pod-2")
        assert len(freed) == 8
        assert book.feasible(whole, ["b"]) == [True]
        assert book.feasible(pod, ["a", "b"]) == [False, True]  # allocated afresh, anywhere

    def test_a_claim_allocated_before_pins_its_consumers(self) -> None:
        book = ledger()
        pod = [on_node("s", "a"), claim("more", req("g", count=2))]
        assert book.feasible(pod, ["a", "b"]) == [True, False]
        assert book.score(pod, ["a", "b"])[1] == 0
        placed = book.reserve("pod-1", pod, "a")
        assert not isinstance(placed, str)
        assert [p.claim for p in placed.picks] == ["more", "more"]
        results = book.results("pod-1", pod)
        assert [r.device for r in results["s"].devices.results] == ["gpu-0"]
        refused = book.reserve("pod-2", pod, "b")
        assert refused == (
            'claim "s" is allocated on node a, which every task that shares it must run on'
        )


def indexed_ledger() -> DeviceLedger:
    """Nodes a and b with GPUs that carry their index (as sim and NVML slices do)."""
    devices = [gpu(f"gpu-{i}", nvlink=i // 4, attrs={"index": {"int": i}}) for i in range(8)]
    inventory = Inventory([node_slice("a", devices), node_slice("b", devices)])
    return DeviceLedger.from_claims(inventory, CLASSES, [allocated("x", "a", "gpu-0", "gpu-4")])


class TestGpuHolds:
    def test_count_based_gpus_keep_claims_off(self) -> None:
        book = indexed_ledger()
        assert book.hold_gpus("frac-1", "b", [0]) is None
        assert book.hold_gpus("frac-2", "b", [0]) is None  # fractions share a GPU
        eight = [claim("c", req("g", count=8))]
        assert book.feasible(eight, ["b"]) == [False]
        book.unreserve("frac-1")
        assert book.feasible(eight, ["b"]) == [False]
        book.unreserve("frac-2")
        assert book.feasible(eight, ["b"]) == [True]

    def test_a_gpu_a_claim_holds_is_refused(self) -> None:
        book = indexed_ledger()  # claim x holds gpu-0 and gpu-4 of node a
        assert book.hold_gpus("frac", "a", [0]) == "GPU 0 of node a is held by a device claim"
        assert book.hold_gpus("frac", "a", [1, 7]) is None
        assert book.hold_gpus("frac", "a", [99]) is None  # not published: not the ledger's
        assert sorted(book.claim_gpus()) == [("a", 0), ("a", 4)]
