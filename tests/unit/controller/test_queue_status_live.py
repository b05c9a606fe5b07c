"""The live controller writes each Queue's and Tenant's status from its batch session
(controller/queue_status.py through the write-back), and leaves it alone while nothing moves."""

from __future__ import annotations

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World

GPU_TASKS = """    - name: worker
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 8, memory: 64Gi, gpu: {gpu}}}
"""


def sim(world: World) -> tuple[Controller, VirtualClock]:
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=100)
    return world.controller(backend, clock), clock


def status(world: World, kind: str = "Queue") -> dict[str, object]:
    tenant = "acme" if kind == "Queue" else ""
    name = "research" if kind == "Queue" else "acme"
    wire = world.store.get(kind, tenant, name).to_wire()
    found: dict[str, object] = wire.get("status") or {}
    return found


def test_queue_and_tenant_status_follow_the_cycle(world: World) -> None:
    world.setup(quota="{gpu: 12, cpu: 128, memory: 1Ti}")
    controller, clock = sim(world)
    world.submit("a", GPU_TASKS.format(replicas=1, gpu=8))
    world.submit("b", GPU_TASKS.format(replicas=1, gpu=8))
    controller.run_cycle()
    queue = status(world)
    # One 8-GPU job runs; the other waits: the tenant's quota of 12 leaves 4.
    assert queue["allocated"] == {"gpu": 8, "cpu": "8", "memory": "64Gi"}
    assert queue["pending"] == {"gpu": 8, "cpu": "8", "memory": "64Gi"}
    assert (queue["runningJobs"], queue["pendingJobs"]) == (1, 1)
    tenant = status(world, "Tenant")
    assert tenant["quota"] == {"gpu": 12, "cpu": "128", "memory": "1Ti"}
    assert tenant["allocated"] == queue["allocated"]
    version = world.store.get("Queue", "acme", "research").metadata.resource_version
    tenant_version = world.store.get("Tenant", "", "acme").metadata.resource_version
    controller.run_cycle()
    clock.advance(5)
    controller.run_cycle()
    # Nothing moved: the status is not written again.
    assert world.store.get("Queue", "acme", "research").metadata.resource_version == version
    assert world.store.get("Tenant", "", "acme").metadata.resource_version == tenant_version
    clock.advance(100)  # a ends; b starts
    controller.run_cycle()
    controller.run_cycle()
    queue = status(world)
    assert (queue["runningJobs"], queue["pendingJobs"]) == (1, 0)
    assert queue["pending"] == {"gpu": 0, "cpu": "0", "memory": "0"}
