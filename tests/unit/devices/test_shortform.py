"""The short GPU form compiles to a claim that the allocator understands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aipaas.api.devices import DeviceClass, dump_device_object, load_device_documents
from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import Inventory
from aipaas.devices.shortform import ShortFormError, gpu_claim, gpu_claim_spec
from aipaas.devices.topology_files import load_topology, topology_slices

NV = "gpu.nvidia.com"
CLASSES_FILE = Path(__file__).parents[3] / "examples" / "dra" / "nvidia-classes.yaml"


def nvidia_classes() -> dict[str, DeviceClass]:
    objects = load_device_documents(CLASSES_FILE.read_text(encoding="utf-8"))
    return {o.metadata.name or "": o for o in objects if isinstance(o, DeviceClass)}


class TestGpuClaimSpec:
    @pytest.mark.parametrize(
        ("value", "want"),
        [
            pytest.param(2, {"deviceClassName": NV, "count": 2}, id="count"),
            pytest.param(
                {"count": 1, "memory": "20Gi", "model": "H100"},
                {
                    "deviceClassName": NV,
                    "count": 1,
                    "selectors": [
                        {"cel": {"expression": f'device.attributes["{NV}"].model == "H100"'}}
                    ],
                    "capacity": {"requests": {"memory": "20Gi"}},
                },
                id="count, memory and model",
            ),
            pytest.param(
                0.5,
                {"deviceClassName": NV, "count": 1, "capacity": {"requests": {"compute": "50"}}},
                id="half a GPU",
            ),
            pytest.param(
                {"fraction": 0.2, "memory": "16384Mi"},
                {
                    "deviceClassName": NV,
                    "count": 1,
                    "capacity": {"requests": {"memory": "16Gi", "compute": "20"}},
                },
                id="a fifth with memory",
            ),
            pytest.param(4.0, {"deviceClassName": NV, "count": 4}, id="whole float"),
        ],
    )
    def test_compiles(self, value: Any, want: dict[str, Any]) -> None:
        spec = gpu_claim_spec(value).model_dump(by_alias=True, exclude_unset=True)
        assert spec == {"devices": {"requests": [{"name": "gpu", "exactly": want}]}}

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            pytest.param(0, r"gpu\.count: must be a whole number from 1 to 64, got 0", id="zero"),
            pytest.param(True, "gpu: must be a number or an object, not a boolean", id="bool"),
            pytest.param(1.5, "gpu: more than one GPU must be a whole number", id="1.5"),
            pytest.param({"memory": "20 Gi"}, r"gpu\.memory: invalid quantity", id="memory"),
            pytest.param({"colour": "red"}, r"gpu\.colour: unknown field", id="unknown"),
            pytest.param({"count": 2, "fraction": 0.5}, "needs count 1", id="fraction of two"),
            pytest.param({"model": 'H"1'}, r"gpu\.model: must be a model name", id="quote"),
            pytest.param("two", "gpu: must be a number or an object", id="string"),
        ],
    )
    def test_refuses(self, value: Any, message: str) -> None:
        with pytest.raises(ShortFormError, match=message):
            gpu_claim_spec(value)


class TestShortFormAllocates:
    def test_model_and_memory_on_a_mixed_pool(self) -> None:
        inventory = Inventory(topology_slices(load_topology("mixed-pool")))
        classes = nvidia_classes()
        claim = gpu_claim("task-0", {"count": 2, "model": "L40S", "memory": "40Gi"})
        assert dump_device_object(claim)["metadata"] == {"name": "task-0"}
        result = allocate_pod([claim], inventory, classes)
        assert result.allocation is not None
        assert result.allocation.node == "l40s-0"
        assert [p.device.name for p in result.allocation.picks] == ["gpu-0", "gpu-1"]

    def test_fraction_lands_on_the_shared_node(self) -> None:
        inventory = Inventory(topology_slices(load_topology("mixed-pool")))
        classes = nvidia_classes()
        claims = [gpu_claim(f"t-{i}", 0.25) for i in range(5)]
        result = allocate_pod(claims, inventory, classes)
        assert result.allocation is not None
        assert result.allocation.node == "l4shared-0"
        # Shares pack: four quarters fill gpu-0's compute, the fifth goes to gpu-1.
        assert [p.device.name for p in result.allocation.picks] == ["gpu-0"] * 4 + ["gpu-1"]
        assert result.allocation.picks[0].result().consumed_capacity == {
            "memory": "1Gi",
            "compute": "25",
        }
