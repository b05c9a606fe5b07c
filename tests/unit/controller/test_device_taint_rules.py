"""DeviceTaintRule as a stored kind: applied through the API (resource.k8s.io/v1beta2 as
Kubernetes 1.35/1.36 serve it, or v1), refused with the field path and reason when invalid,
and read by the controller's allocator every cycle: a NoSchedule or NoExecute rule keeps new
allocations off the devices it selects, an effect None only informs, and deleting the rule
gives the device back. The effects' cases follow the taint cases of the Kubernetes structured
allocator's TestAllocator table (a tainted device is skipped, effect None is not) and of its
device taint eviction controller (NoExecute evicts); answers worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.devices import ResourceSlice
from aipaas.api.dra import DeviceTaintRuleObject
from aipaas.backends.local import LocalBackend
from aipaas.controller.cycle import Controller
from aipaas.errors import InvalidObject
from tests.support.ctl_world import World, cycle_until

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
DRIVER = "gpu.nvidia.com"


def rule(effect: str, device: str = "gpu-0", version: str = "v1beta2") -> str:
    return (
        f"apiVersion: resource.k8s.io/{version}\nkind: DeviceTaintRule\n"
        "metadata: {name: gpu-0-bad}\nspec:\n"
        f"  deviceSelector: {{driver: {DRIVER}, pool: here, device: {device}}}\n"
        f"  taint: {{key: example.com/bad, value: ecc, effect: {effect}}}\n"
    )


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


def local(world: World) -> Controller:
    world.setup("{gpu: 8, cpu: 64, memory: 512Gi}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
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


def visible_devices(world: World, controller: Controller, out: Path, name: str) -> str:
    script = (
        f"import os; open(os.path.join({str(out)!r}, {name!r}), 'w')"
        ".write(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))"
    )
    world.submit(
        name,
        f"    - name: worker\n      command: [{sys.executable}, -c, {script!r}]\n"
        "      resources: {cpu: 1, memory: 64Mi, gpu: 1}\n",
    )
    cycle_until(controller, lambda: world.phase(name) in ("Succeeded", "Failed"))
    return (out / name).read_text()


class TestStored:
    def test_v1beta2_is_stored_as_v1(self, world: World) -> None:
        world.service.apply_text(rule("NoSchedule"))
        stored = world.store.find("DeviceTaintRule", "", "gpu-0-bad")
        assert isinstance(stored, DeviceTaintRuleObject)
        assert stored.api_version == "resource.k8s.io/v1"
        assert stored.spec["taint"]["effect"] == "NoSchedule"

    @pytest.mark.parametrize(
        ("text", "want_path"),
        [
            pytest.param(rule("Evict"), "spec.taint.effect", id="an unknown effect"),
            pytest.param(
                rule("NoSchedule").replace("key: example.com/bad, ", ""),
                "spec.taint.key",
                id="a taint without key",
            ),
            pytest.param(rule("NoSchedule", version="v1alpha3"), "apiVersion", id="an old version"),
        ],
    )
    def test_invalid_rules_name_the_field(self, world: World, text: str, want_path: str) -> None:
        with pytest.raises(InvalidObject) as caught:
            world.service.apply_text(text)
        assert want_path in [f.path for f in caught.value.fields]


class TestAllocation:
    @pytest.mark.parametrize(
        ("effect", "want"),
        [
            pytest.param("NoSchedule", "1", id="NoSchedule keeps the claim off gpu-0"),
            pytest.param("NoExecute", "1", id="NoExecute keeps it off too"),
            pytest.param("None", "0", id="None only informs: gpu-0, the first, is taken"),
        ],
    )
    def test_a_stored_rule_taints_what_it_selects(
        self, world: World, tmp_path: Path, effect: str, want: str
    ) -> None:
        controller = local(world)
        controller.run_cycle()  # the slice is published
        world.service.apply_text(rule(effect))
        assert visible_devices(world, controller, tmp_path, "one") == want

    def test_deleting_the_rule_gives_the_device_back(self, world: World, tmp_path: Path) -> None:
        controller = local(world)
        controller.run_cycle()
        world.service.apply_text(rule("NoSchedule", device="gpu-1"))
        world.service.apply_text(rule("NoSchedule", device="gpu-1").replace("gpu-0-bad", "g1"))
        world.service.apply_text(
            rule("NoSchedule", device="gpu-0").replace("gpu-0-bad", "g0")
        )  # both tainted: nothing fits
        world.submit(
            "waits",
            f"    - name: worker\n      command: [{sys.executable}, -c, 'pass']\n"
            "      resources: {cpu: 1, memory: 64Mi, gpu: 1}\n",
        )
        for _ in range(3):
            controller.run_cycle()
        assert world.phase("waits") == "Pending"
        world.store.delete("DeviceTaintRule", "", "g0")
        cycle_until(controller, lambda: world.phase("waits") == "Succeeded")


class TestNoExecute:
    """A running task whose device gets a NoExecute taint it does not tolerate is evicted
    (as preemption evicts: back to Pending, its attempt not counted) and placed again on a
    device without it; NoSchedule and None leave it running (devices/device_eviction.py)."""

    def start_on_gpu_0(self, world: World, out: Path) -> Controller:
        controller = local(world)
        controller.run_cycle()
        script = (
            "import os, time; "
            f"open(os.path.join({str(out)!r}, 'seen-' + os.environ['AIPAAS_ATTEMPT']), 'w')"
            ".write(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')); time.sleep(30)"
        )
        world.submit(
            "long",
            f"    - name: worker\n      command: [{sys.executable}, -c, {script!r}]\n"
            "      resources: {cpu: 1, memory: 64Mi, gpu: 1}\n",
        )
        cycle_until(controller, lambda: (out / "seen-0").exists())
        assert (out / "seen-0").read_text() == "0"
        return controller

    def test_no_execute_evicts_and_the_task_comes_back_on_the_other_gpu(
        self, world: World, tmp_path: Path
    ) -> None:
        controller = self.start_on_gpu_0(world, tmp_path)
        world.service.apply_text(rule("NoExecute"))
        cycle_until(controller, lambda: "DeviceTaint" in world.reasons("long"))
        cycle_until(controller, lambda: (tmp_path / "seen-1").exists())
        assert (tmp_path / "seen-1").read_text() == "1"
        stop(world, controller)

    @pytest.mark.parametrize("effect", ["NoSchedule", "None"])
    def test_other_effects_leave_it_running(
        self, world: World, tmp_path: Path, effect: str
    ) -> None:
        controller = self.start_on_gpu_0(world, tmp_path)
        world.service.apply_text(rule(effect))
        for _ in range(3):
            controller.run_cycle()
        assert "DeviceTaint" not in world.reasons("long")
        assert world.phase("long") == "Running"
        stop(world, controller)


def stop(world: World, controller: Controller) -> None:
    """Cancel the long task and wait until it has stopped (no process outlives the test)."""
    world.service.cancel("long", "acme")
    cycle_until(controller, lambda: world.phase("long") in ("Cancelled", "Failed", "Succeeded"))
