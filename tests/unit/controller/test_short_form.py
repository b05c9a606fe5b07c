"""The ``gpu:`` short form on a cluster that publishes GPU devices: compiled to a claim per
replica, allocated by the same device ledger as explicit claims (no device is given twice),
freed when the task ends; fractions keep the milli-GPU path and still keep claims off their GPU.
"""

from __future__ import annotations

from pathlib import Path

from aipaas.api.dra import ResourceClaimObject
from aipaas.backends.registry import make_backend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRepository
from tests.support.ctl_world import World

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
GPU_TASK = """    - name: worker
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 1, gpu: {gpu}}}
"""
CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: acme}}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {{deviceClassName: gpu.nvidia.com, count: {count}}}
"""
CLAIM_TASK = """    - name: worker
      command: [train]
      resources:
        cpu: 1
        claims: [{{name: gpus, resourceClaimName: {claim}}}]
"""


def setup(world: World, classes: bool = False) -> tuple[Controller, VirtualClock]:
    world.setup("{gpu: 100}")
    if classes:
        world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    clock = VirtualClock()
    backend = make_backend("sim", world.tmp / "run", clock=clock)
    controller = world.controller(backend, clock, inventory_seconds=0)
    controller.run_cycle()  # slices published
    return controller, clock


def compiled(world: World, name: str) -> ResourceClaimObject:
    stored = world.store.get("ResourceClaim", "acme", name)
    assert isinstance(stored, ResourceClaimObject)
    return stored


def devices(world: World, name: str) -> list[tuple[str, str]]:
    status = compiled(world, name).status
    assert status is not None and status.allocation is not None, name
    return [(r["pool"], r["device"]) for r in status.allocation["devices"]["results"]]


def test_a_count_compiles_to_a_claim_per_replica(world: World) -> None:
    controller, clock = setup(world)  # no DeviceClass applied: the short form's is built in
    world.submit("train", GPU_TASK.format(replicas=2, gpu=2))
    controller.run_cycle()
    first = compiled(world, "train-worker-0-gpu")
    assert first.metadata.annotations["aipaas.dev/from-short-form"] == "resources.gpu"
    assert first.status is not None and first.status.reserved_for[0]["name"] == "train/worker-0"
    held = devices(world, "train-worker-0-gpu") + devices(world, "train-worker-1-gpu")
    assert len(set(held)) == 4
    tasks = world.job("train").status.tasks  # type: ignore[union-attr]
    for task, index in zip(tasks, (0, 1), strict=True):
        mine = devices(world, f"train-worker-{index}-gpu")
        assert task.node == mine[0][0]
        assert [f"gpu-{g}" for g in task.gpus] == [d for _, d in mine]
    clock.advance(60)
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("train") == "Succeeded"
    assert world.store.list_objects("ResourceClaim", "acme") == []


def test_short_form_and_explicit_claims_never_share_a_device(world: World) -> None:
    controller, _ = setup(world, classes=True)
    world.service.apply_text(CLAIM.format(name="four", count=4))
    world.submit("explicit", CLAIM_TASK.format(claim="four"))
    for index in range(4):
        world.submit(f"short-{index}", GPU_TASK.format(replicas=1, gpu=3))
    controller.run_cycle()
    held = devices(world, "four")
    for index in range(3):
        held += devices(world, f"short-{index}-worker-0-gpu")
    assert len(held) == len(set(held)) == 13
    status = world.job("short-3").status
    assert status is not None and status.reason == "Unschedulable"
    assert "0/2 nodes are available" in status.message
    assert "claim short-3-worker-0-gpu is what resources.gpu of task worker compiles to" in (
        status.message
    )
    # Node status and metrics count claim-held GPUs too.
    assert controller.metrics.gpus_allocated._value.get() == 13


def test_model_and_memory_select_devices(world: World) -> None:
    controller, _ = setup(world)
    world.submit("fits", GPU_TASK.format(replicas=1, gpu="{count: 1, memory: 20Gi, model: H100}"))
    world.submit("nomodel", GPU_TASK.format(replicas=1, gpu="{count: 1, model: B200}"))
    world.submit("toobig", GPU_TASK.format(replicas=1, gpu="{count: 1, memory: 100Gi}"))
    controller.run_cycle()
    assert len(devices(world, "fits-worker-0-gpu")) == 1
    for name, why in (
        ("nomodel", 'model == "B200"'),
        ("toobig", "memory"),
    ):
        status = world.job(name).status
        assert status is not None and status.reason == "Unschedulable", name
        assert why in status.message, status.message
        assert f"claim {name}-worker-0-gpu is what resources.gpu of task worker" in (status.message)


def test_fractions_share_a_gpu_that_claims_then_avoid(world: World) -> None:
    controller, _ = setup(world, classes=True)
    world.submit("half", GPU_TASK.format(replicas=2, gpu=0.5))
    controller.run_cycle()
    records = TaskRepository(world.store).active()
    assert {(r.node, r.gpus, r.gpu_milli) for r in records} == {("sim-dgx-0", (0,), 500)}
    assert world.store.list_objects("ResourceClaim", "acme") == []  # the milli-GPU path
    world.service.apply_text(CLAIM.format(name="eight", count=8))
    world.submit("whole", CLAIM_TASK.format(claim="eight"))
    world.service.apply_text(CLAIM.format(name="more", count=8))
    world.submit("more", CLAIM_TASK.format(claim="more"))
    controller.run_cycle()
    assert {pool for pool, _ in devices(world, "eight")} == {"sim-dgx-1"}
    status = world.job("more").status
    assert status is not None and status.reason == "Unschedulable"
    assert "only 7 are free" in status.message, status.message


def test_a_restarted_controller_keeps_short_form_devices(world: World) -> None:
    controller, clock = setup(world)
    world.submit("a", GPU_TASK.format(replicas=1, gpu=8))
    controller.run_cycle()
    before = devices(world, "a-worker-0-gpu")
    backend = make_backend("sim", world.tmp / "run", clock=clock)
    again = world.controller(backend, clock, inventory_seconds=0)
    world.submit("b", GPU_TASK.format(replicas=1, gpu=8))
    world.submit("c", GPU_TASK.format(replicas=1, gpu=8))
    again.run_cycle()
    assert devices(world, "a-worker-0-gpu") == before
    held = before + devices(world, "b-worker-0-gpu")
    assert len(set(held)) == 16
    assert world.job("c").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]
