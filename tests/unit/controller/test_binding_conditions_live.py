"""Binding conditions through the controller and the local backend: a claim given a device
published with ``bindingConditions`` gets ``status.devices`` with them Unknown, and its task
does not start until the device's driver sets them True; a failure condition True puts the
task back to Pending and frees the device. (Semantics: devices/binding.py.)"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from aipaas.api.devices import ResourceSlice
from aipaas.api.dra import ClaimStatus, ResourceClaimObject
from aipaas.backends.base import Inventory
from aipaas.backends.local import LocalBackend
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World, cycle_until

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
DRIVER = "gpu.nvidia.com"
CLAIM = "bound-worker-0-gpu"


class DriverReports(LocalBackend):
    """A local machine whose inventory also reports what a device's driver set (as the
    Kubernetes backend reports the conditions in its cluster's claims)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conditions: dict[tuple[str, str, str], tuple[dict[str, Any], ...]] = {}

    def inventory(self) -> Inventory:
        return replace(super().inventory(), device_conditions=dict(self.conditions))


def local(world: World, backend_class: type[LocalBackend] = LocalBackend) -> Controller:
    world.setup("{gpu: 8, cpu: 64, memory: 512Gi}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    device: dict[str, Any] = {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": 0},
            "uuid": {"string": "GPU-0"},
            "model": {"string": "H100"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        "bindingConditions": ["Attached"],
        "bindingFailureConditions": ["AttachFailed"],
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
                "devices": [device],
            },
        }
    )
    backend = backend_class(
        world.tmp / "run", node_name="here", cpu_milli=8000, memory_mib=8192, published=published
    )
    return world.controller(backend, inventory_seconds=0)


def claim(world: World) -> ResourceClaimObject | None:
    found = world.store.find("ResourceClaim", "acme", CLAIM)
    return found if isinstance(found, ResourceClaimObject) else None


def set_condition(world: World, kind: str, status: str) -> None:
    """What the device's driver does: its condition in the claim's status.devices."""
    stored = claim(world)
    assert stored is not None and stored.status is not None
    devices = [
        {**e, "conditions": [{"type": kind, "status": status}]} for e in stored.status.devices
    ]
    world.store.update_status(
        stored,
        ClaimStatus(
            allocation=stored.status.allocation,
            reserved_for=stored.status.reserved_for,
            devices=devices,
        ),
    )


def submit(world: World) -> None:
    world.submit(
        "bound",
        f"    - name: worker\n      command: [{sys.executable}, -c, 'pass']\n"
        "      resources: {cpu: 1, memory: 64Mi, gpu: 1}\n",
    )


def test_the_task_waits_for_the_condition_then_starts(world: World) -> None:
    controller = local(world)
    controller.run_cycle()  # the slice is published
    submit(world)
    cycle_until(controller, lambda: claim(world) is not None)
    for _ in range(3):
        controller.run_cycle()
    stored = claim(world)
    assert stored is not None and stored.status is not None
    (entry,) = stored.status.devices
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, "here", "gpu-0")
    assert [(c["type"], c["status"]) for c in entry["conditions"]] == [("Attached", "Unknown")]
    assert stored.status.allocation is not None
    assert stored.status.allocation.get("allocationTimestamp")
    status = world.job("bound").status
    assert status is not None and status.tasks[0].phase.value == "Starting"
    assert status.tasks[0].message == (
        f"claim {CLAIM} waits for binding conditions (device gpu-0: Attached)"
    )
    set_condition(world, "Attached", "True")
    cycle_until(controller, lambda: world.phase("bound") == "Succeeded")


def test_a_failure_condition_sends_the_task_back_and_frees_the_device(world: World) -> None:
    controller = local(world)
    controller.run_cycle()
    submit(world)
    cycle_until(controller, lambda: claim(world) is not None)
    controller.run_cycle()
    set_condition(world, "AttachFailed", "True")
    cycle_until(controller, lambda: "BindingFailed" in world.reasons("bound"))
    # placed again: a new claim, conditions Unknown again, the task waits again
    cycle_until(
        controller,
        lambda: (
            (c := claim(world)) is not None
            and c.status is not None
            and bool(c.status.devices)
            and c.status.devices[0]["conditions"][0]["status"] == "Unknown"
        ),
    )
    assert world.phase("bound") != "Succeeded"


def test_conditions_a_backend_reports_reach_the_claim_and_start_the_task(world: World) -> None:
    controller = local(world, DriverReports)
    controller.run_cycle()
    submit(world)
    cycle_until(controller, lambda: claim(world) is not None)
    controller.run_cycle()
    assert world.phase("bound") == "Pending"
    backend = controller.backend
    assert isinstance(backend, DriverReports)
    backend.conditions = {
        (DRIVER, "here", "gpu-0"): ({"type": "Attached", "status": "True", "reason": "Ready"},)
    }
    cycle_until(controller, lambda: world.phase("bound") == "Succeeded")
    stored = claim(world)
    assert stored is None or stored.status is None or not stored.status.devices  # freed
