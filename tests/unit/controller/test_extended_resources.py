"""Extended resources backed by DRA (KEP-5004): a task asking ``nvidia.com/gpu: 1`` (as a pod
asks) is ``gpu: 1``, and its claim is of the DeviceClass whose ``extendedResourceName`` is
``nvidia.com/gpu`` when one is stored (else the built-in ``gpu.nvidia.com``). Which class
serves a name follows the Kubernetes rule (``extendedResourceName``, and every class's implicit
``deviceclass.resource.kubernetes.io/<name>``); answers worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.devices import DeviceClass, ResourceSlice
from aipaas.api.dra import ResourceClaimObject
from aipaas.backends.local import LocalBackend
from aipaas.controller.cycle import Controller
from aipaas.devices.extended import serving_class
from aipaas.errors import InvalidObject
from tests.support.ctl_world import World, cycle_until

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
DRIVER = "gpu.nvidia.com"
SECOND_GPU_CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: second-gpu}
spec:
  extendedResourceName: nvidia.com/gpu
  selectors:
  - cel: {expression: 'device.attributes["gpu.nvidia.com"].index == 1'}
"""


def device_class(name: str, extended: str | None = None) -> DeviceClass:
    spec: dict[str, Any] = {"extendedResourceName": extended} if extended else {}
    return DeviceClass.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


class TestServingClass:
    @pytest.mark.parametrize(
        ("resource", "want"),
        [
            pytest.param("nvidia.com/gpu", "a-gpu", id="two name it: the first by name"),
            pytest.param("example.com/fpga", None, id="none names it"),
            pytest.param(
                "deviceclass.resource.kubernetes.io/plain", "plain", id="the implicit name"
            ),
            pytest.param(
                "deviceclass.resource.kubernetes.io/missing", None, id="implicit, no such class"
            ),
        ],
    )
    def test_which_class(self, resource: str, want: str | None) -> None:
        classes = [
            device_class("b-gpu", "nvidia.com/gpu"),
            device_class("a-gpu", "nvidia.com/gpu"),
            device_class("plain"),
        ]
        assert serving_class(classes, resource) == want


def local(world: World) -> Controller:
    world.setup("{gpu: 8, cpu: 64, memory: 512Gi}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())

    def gpu(index: int) -> dict[str, Any]:
        return {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": index},
                "uuid": {"string": f"GPU-{index}"},
                "model": {"string": "H100"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }

    published = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"here-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "here",
                "pool": {"name": "here", "resourceSliceCount": 1},
                "devices": [gpu(0), gpu(1)],
            },
        }
    )
    backend = LocalBackend(
        world.tmp / "run", node_name="here", cpu_milli=8000, memory_mib=8192, published=published
    )
    return world.controller(backend, inventory_seconds=0)


def run(world: World, controller: Controller, out: Path) -> tuple[str, str]:
    """What the task sees in CUDA_VISIBLE_DEVICES, and its claim's class."""
    script = (
        f"import os; open({str(out / 'seen')!r}, 'w')"
        ".write(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))"
    )
    world.submit(
        "ext",
        f"    - name: worker\n      command: [{sys.executable}, -c, {script!r}]\n"
        "      resources: {cpu: 1, memory: 64Mi, nvidia.com/gpu: 1}\n",
    )
    classes: list[str] = []

    def claim_class() -> bool:
        stored = world.store.find("ResourceClaim", "acme", "ext-worker-0-gpu")
        if isinstance(stored, ResourceClaimObject):
            request = stored.spec["devices"]["requests"][0]
            classes.append(request["exactly"]["deviceClassName"])
        return world.phase("ext") == "Succeeded"

    cycle_until(controller, claim_class)
    return (out / "seen").read_text(), classes[0]


def test_a_class_with_the_extended_resource_name_serves_the_task(
    world: World, tmp_path: Path
) -> None:
    controller = local(world)
    world.service.apply_text(SECOND_GPU_CLASS)
    controller.run_cycle()
    assert run(world, controller, tmp_path) == ("1", "second-gpu")


def test_without_one_the_built_in_class_does(world: World, tmp_path: Path) -> None:
    controller = local(world)
    controller.run_cycle()
    assert run(world, controller, tmp_path) == ("0", "gpu.nvidia.com")


def test_both_spellings_at_once_are_refused(world: World) -> None:
    with pytest.raises(InvalidObject, match=r"nvidia.com/gpu and gpu are two ways"):
        world.submit(
            "both",
            "    - name: worker\n      command: [echo]\n"
            "      resources: {cpu: 1, gpu: 1, nvidia.com/gpu: 1}\n",
        )
