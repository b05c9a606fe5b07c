"""Jobs whose tasks use DRA claims: placed by the device allocator, status.allocation written,
freed when the task ends; an unsatisfiable claim says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctl_world import World

from aipaas.api.dra import ResourceClaimObject
from aipaas.backends.registry import make_backend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.errors import InvalidObject

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: acme}}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {{deviceClassName: gpu.nvidia.com, count: {count}}}
    constraints:
    - matchAttribute: gpu.nvidia.com/nvlinkDomain
"""
TASK = """    - name: worker
      command: [train]
      resources:
        cpu: 1
        claims: [{{name: gpus, resourceClaimName: {claim}}}]
"""


def setup(world: World) -> tuple[Controller, VirtualClock]:
    world.setup("{gpu: 100}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    clock = VirtualClock()
    backend = make_backend("sim", world.tmp / "run", clock=clock)
    return world.controller(backend, clock, inventory_seconds=0), clock


def claim(world: World, name: str) -> ResourceClaimObject:
    stored = world.store.get("ResourceClaim", "acme", name)
    assert isinstance(stored, ResourceClaimObject)
    return stored


def test_a_claim_is_allocated_then_freed(world: World) -> None:
    controller, clock = setup(world)
    controller.run_cycle()  # slices published
    world.service.apply_text(CLAIM.format(name="two", count=2))
    world.submit("train", TASK.format(claim="two"))
    controller.run_cycle()
    assert world.phase("train") in ("Pending", "Running"), world.job("train").status
    status = claim(world, "two").status
    assert status is not None and status.allocation is not None
    results = status.allocation["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-1"]
    assert {r["pool"] for r in results} == {"sim-dgx-0"}
    assert status.reserved_for[0]["name"] == "train/worker-0"
    reasons = [e.reason for e in world.store.list_events(kind="ResourceClaim", name="two")]
    assert "Allocated" in reasons
    clock.advance(60)
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("train") == "Succeeded"
    assert claim(world, "two").status is None


def test_two_jobs_get_different_devices(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    for name in ("a", "b"):
        world.service.apply_text(CLAIM.format(name=name, count=4))
        world.submit(f"job-{name}", TASK.format(claim=name))
    controller.run_cycle()
    held = []
    for name in ("a", "b"):
        status = claim(world, name).status
        assert status is not None and status.allocation is not None
        held.extend((r["pool"], r["device"]) for r in status.allocation["devices"]["results"])
    assert len(held) == len(set(held)) == 8


def test_an_unsatisfiable_claim_says_why(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="huge", count=9))
    world.submit("big", TASK.format(claim="huge"))
    controller.run_cycle()
    status = world.job("big").status
    assert status is not None and status.reason == "Unschedulable"
    assert "0/2 nodes are available" in status.message
    assert claim(world, "huge").status is None
    events = world.store.list_events(kind="ResourceClaim", name="huge")
    assert [e.reason for e in events][-1] == "Unschedulable"


def test_a_missing_claim_says_so(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.submit("orphan", TASK.format(claim="nope"))
    controller.run_cycle()
    status = world.job("orphan").status
    assert status is not None and status.reason == "Unschedulable"
    assert status.message == "task worker: claim nope does not exist in tenant acme"


TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: four-linked, namespace: acme}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 4}
      constraints:
      - matchAttribute: gpu.nvidia.com/nvlinkDomain
"""
REPLICAS = """    - name: worker
      replicas: 3
      command: [train]
      resources:
        cpu: 1
        claims: [{name: gpus, resourceClaimTemplateName: four-linked}]
"""


def test_a_template_gives_each_replica_its_own_claim(world: World) -> None:
    controller, clock = setup(world)
    controller.run_cycle()
    world.service.apply_text(TEMPLATE)
    world.submit("wide", REPLICAS)
    controller.run_cycle()
    held = []
    for index in range(3):
        made = claim(world, f"wide-worker-{index}-gpus")
        assert made.metadata.annotations["aipaas.dev/from-template"] == "four-linked"
        assert made.status is not None and made.status.allocation is not None
        assert made.status.reserved_for[0]["name"] == f"wide/worker-{index}"
        results = made.status.allocation["devices"]["results"]
        assert len(results) == 4 and len({r["pool"] for r in results}) == 1
        held.extend((r["pool"], r["device"]) for r in results)
    assert len(set(held)) == 12
    clock.advance(60)
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("wide") == "Succeeded"
    assert world.store.list_objects("ResourceClaim", "acme") == []


def test_a_template_that_does_not_fit_four_times(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(TEMPLATE)
    world.submit("wider", REPLICAS.replace("replicas: 3", "replicas: 5"))
    controller.run_cycle()
    status = world.job("wider").status
    assert status is not None and status.reason == "Unschedulable"
    assert status.message.startswith("gang: 4 of 5 pods fit")
    assert world.store.list_objects("ResourceClaim", "acme") == []


def test_a_named_claim_is_not_shared_by_replicas(world: World) -> None:
    controller, _ = setup(world)
    controller.run_cycle()
    world.service.apply_text(CLAIM.format(name="one", count=1))
    world.submit(
        "two", REPLICAS.replace("resourceClaimTemplateName: four-linked", "resourceClaimName: one")
    )
    controller.run_cycle()
    status = world.job("two").status
    assert status is not None and status.reason == "Unschedulable"
    assert "claim one is named, so 3 replicas would share it" in status.message


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ("[{name: gpus}]", "exactly one of resourceClaimName or resourceClaimTemplateName"),
        (
            "[{name: gpus, resourceClaimName: a, resourceClaimTemplateName: b}]",
            "exactly one of resourceClaimName or resourceClaimTemplateName",
        ),
        ("[{name: Not_A_Name, resourceClaimName: a}]", "'Not_A_Name' is not a valid name"),
    ],
)
def test_a_bad_claim_reference_is_refused(world: World, claims: str, reason: str) -> None:
    world.setup()
    task = f"    - name: worker\n      command: [x]\n      resources: {{claims: {claims}}}\n"
    with pytest.raises(InvalidObject) as caught:
        world.submit("bad", task)
    message = str(caught.value)
    assert message.startswith("Job bad: spec.tasks[0].resources.claims[0]")
    assert reason in message
