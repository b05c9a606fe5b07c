"""The ledger the scheduler calls (filter, explain, score, reserve, unreserve) and device rows."""

from __future__ import annotations

from devices_builders import CLASSES, DRIVER, allocated, claim, eight_h100, node_slice, req

from aipaas.devices.inventory import Inventory
from aipaas.devices.ledger import DeviceLedger
from aipaas.devices.listing import device_rows
from aipaas.devices.topology_files import GpuShape, gpu_node_slices

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
