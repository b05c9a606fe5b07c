"""Node pools in simulation, end to end through the controller: pending work makes the pool
grow in the cycle it is seen, the new nodes take the work once provisioned, idle nodes are
drained and then removed, and the tasks that ran there all finished on their own."""

from __future__ import annotations

import yaml

from aipaas.api.pool import NodePool
from aipaas.backends.base import NodeInfo
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.pools import PoolController
from tests.support.ctl_world import World

POOL = """
apiVersion: aipaas/v1
kind: NodePool
metadata: {{name: h100}}
spec:
  backend: sim
  node: {{cpu: 64, memory: 512Gi, gpus: {{count: 8, model: H100, memory: 80Gi}}}}
  minSize: 0
  maxSize: {max_size}
  provisioningDelay: 60s
  idleThreshold: 5m
  pricePerHour: 25
"""
TASKS = """    - name: worker
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 8, memory: 64Gi, gpu: {gpus}}}
"""


def sim_with_pool(world: World, max_size: int = 4) -> tuple[Controller, VirtualClock]:
    world.setup("{gpu: 64, cpu: 512, memory: 4Ti}")
    world.service.apply_text(POOL.format(max_size=max_size))
    clock = VirtualClock()
    cpu_only = [NodeInfo("cpu-0", "sim", 8000, 32 * 1024)]
    backend = SimBackend(world.tmp / "run", cpu_only, clock, default_duration=600)
    controller = world.controller(backend, clock, extensions=[PoolController()])
    return controller, clock


def pool_status(world: World) -> dict[str, object]:
    pool = world.store.get("NodePool", "", "h100")
    assert isinstance(pool, NodePool) and pool.status is not None
    return pool.status.model_dump()


def test_pending_gang_grows_the_pool_in_one_cycle_and_runs_there(world: World) -> None:
    controller, clock = sim_with_pool(world)
    world.submit("train", TASKS.format(replicas=3, gpus=4))  # 12 GPUs: two 8-GPU nodes
    controller.run_cycle()
    status = pool_status(world)
    assert (status["size"], status["provisioning"], status["target"]) == (2, 2, 2)
    assert world.phase("train") == "Pending"
    clock.advance(61)
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("train") == "Running"
    nodes = {t.node for t in world.job("train").status.tasks}  # type: ignore[union-attr]
    assert nodes <= {"h100-0", "h100-1"}
    assert pool_status(world)["ready"] == 2


def test_idle_nodes_are_drained_then_removed_and_no_task_is_killed(world: World) -> None:
    controller, clock = sim_with_pool(world)
    world.submit(
        "short", TASKS.format(replicas=1, gpus=8), annotations="{sim.aipaas.dev/duration: '100'}"
    )
    world.submit(
        "long", TASKS.format(replicas=1, gpus=8), annotations="{sim.aipaas.dev/duration: '2000'}"
    )
    controller.run_cycle()
    assert pool_status(world)["provisioning"] == 2
    clock.advance(61)
    for _ in range(3):
        controller.run_cycle()
    assert world.phase("short") == world.phase("long") == "Running"
    # The short job ends at ~161 s; its node stays idle for the 5 minutes, then is drained.
    for _ in range(12):
        clock.advance(60)
        controller.run_cycle()
    assert world.phase("short") == "Succeeded"
    status = pool_status(world)
    assert status["size"] == 1, status  # the idle node is gone, the busy one stays
    assert world.phase("long") == "Running"
    clock.advance(2000)
    for _ in range(8):
        controller.run_cycle()
        clock.advance(60)
    assert world.phase("long") == "Succeeded"
    assert pool_status(world)["size"] == 0
    reasons = [e.message for e in world.store.list_events(kind="NodePool", name="h100")]
    assert any("drained" in m for m in reasons) and any("removed" in m for m in reasons)


def test_work_the_pool_cannot_hold_asks_for_nothing(world: World) -> None:
    controller, _ = sim_with_pool(world, max_size=1)
    world.submit("huge", TASKS.format(replicas=3, gpus=8))  # three nodes, max one
    world.submit("other", TASKS.format(replicas=1, gpus="{count: 1, model: A100}"))
    controller.run_cycle()
    assert pool_status(world)["size"] == 0


def test_an_admin_scale_pins_the_size(world: World) -> None:
    controller, clock = sim_with_pool(world)
    scale(world, 3)
    controller.run_cycle()
    assert pool_status(world)["size"] == 3
    clock.advance(3600)
    controller.run_cycle()
    controller.run_cycle()
    assert pool_status(world)["ready"] == 3  # idle, but pinned: not drained
    world.submit(
        "busy", TASKS.format(replicas=1, gpus=8), annotations="{sim.aipaas.dev/duration: '500'}"
    )
    controller.run_cycle()
    assert world.phase("busy") == "Running"
    busy_node = world.job("busy").status.tasks[0].node  # type: ignore[union-attr]
    scale(world, 1)
    controller.run_cycle()
    controller.run_cycle()
    status = pool_status(world)
    assert [n["name"] for n in status["nodes"]] == [busy_node]  # type: ignore[attr-defined]
    scale(world, 0)
    for _ in range(3):
        controller.run_cycle()
    assert pool_status(world)["draining"] == 1  # drained, not removed: its task runs on
    assert world.phase("busy") == "Running"
    clock.advance(500)
    for _ in range(3):
        controller.run_cycle()
    assert world.phase("busy") == "Succeeded"
    assert pool_status(world)["size"] == 0


def scale(world: World, size: int) -> None:
    pool = world.store.get("NodePool", "", "h100")
    wire = pool.to_wire()
    wire["spec"]["size"] = size
    wire.pop("status", None)
    world.service.replace("NodePool", "h100", yaml.safe_dump(wire))


def test_nothing_new_lands_on_a_draining_node(world: World) -> None:
    controller, clock = sim_with_pool(world)
    scale(world, 1)
    controller.run_cycle()
    clock.advance(61)
    controller.run_cycle()
    world.submit(
        "half", TASKS.format(replicas=1, gpus=4), annotations="{sim.aipaas.dev/duration: '900'}"
    )
    controller.run_cycle()
    assert world.phase("half") == "Running"
    scale(world, 0)
    controller.run_cycle()
    assert pool_status(world)["draining"] == 1
    world.submit("other", TASKS.format(replicas=1, gpus=4))  # would fit beside "half"
    for _ in range(3):
        clock.advance(11)
        controller.run_cycle()
    assert world.phase("other") == "Pending"  # the pinned size 0 makes no node for it
    assert world.phase("half") == "Running"
    clock.advance(900)
    for _ in range(3):
        controller.run_cycle()
    assert world.phase("half") == "Succeeded"
    assert pool_status(world)["size"] == 0
    assert world.phase("other") == "Pending"
