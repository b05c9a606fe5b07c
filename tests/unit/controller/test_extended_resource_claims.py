"""Extended resources other than GPUs, served by DRA (KEP-5004) in the live controller: a task
asking ``example.com/fpga: 2`` gets, per replica, a claim of the DeviceClass that serves the
name asking exactly 2 devices (``JOB-TASK-example-com-fpga``), as kube-scheduler makes one
claim for a pod's extended resources; the allocation is recorded in the claim, the backend is
pinned to its devices, and the claim is deleted when the task ends (as Kubernetes deletes the
claim with its pod). A name no class serves keeps the job Pending, as a pod whose extended
resource nothing offers stays Pending, until a class appears. Answers worked by hand: one
node, four FPGAs ``fpga-0..3`` of driver ``fpga.example.com``."""

from __future__ import annotations

from pathlib import Path

from aipaas.api.devices import ResourceSlice
from aipaas.api.dra import ResourceClaimObject
from aipaas.backends.base import ClaimDevice, LaunchRequest, NodeInfo
from aipaas.backends.registry import make_backend
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.placement import Placer
from aipaas.store import TaskRecord
from tests.support.ctl_world import World

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
DRIVER = "fpga.example.com"
FPGA_CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {name}}}
spec:
  {extended}
  selectors:
  - cel: {{expression: '{selector}'}}
"""
TASK = """    - name: worker
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 1, memory: 64Mi, {resource}: {count}}}
"""


class RecordingSim(SimBackend):
    """The sim backend, keeping every launch request (to see the devices a task is pinned to)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.started: list[LaunchRequest] = []

    def start(self, request: LaunchRequest) -> None:
        self.started.append(request)
        super().start(request)


def fpga_class(
    world: World,
    name: str = "fpga",
    resource: str | None = "example.com/fpga",
    selector: str = f'device.driver == "{DRIVER}"',
) -> None:
    extended = f"extendedResourceName: {resource}" if resource else ""
    world.service.apply_text(FPGA_CLASS.format(name=name, extended=extended, selector=selector))


def setup(
    world: World, quota: str = "{gpu: 8, cpu: 64, memory: 512Gi}", gpus: int = 0
) -> tuple[Controller, VirtualClock, RecordingSim]:
    """Node ``n-0`` with four FPGAs published as devices and ``gpus`` GPUs by count only."""
    world.setup(quota)
    node = NodeInfo(
        name="n-0",
        backend="sim",
        cpu_milli=16000,
        memory_mib=65536,
        gpu_count=gpus,
        gpu_model="H100" if gpus else "",
        gpu_memory_mib=81920 if gpus else 0,
        labels={"aipaas.dev/backend": "sim"},
    )
    published = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n-0-fpga"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n-0",
                "pool": {"name": "n-0", "resourceSliceCount": 1},
                "devices": [
                    {"name": f"fpga-{i}", "attributes": {"index": {"int": i}}} for i in range(4)
                ],
            },
        }
    )
    clock = VirtualClock()
    backend = RecordingSim(world.tmp / "run", [node], clock, 100, slices=[published])
    controller = world.controller(backend, clock, inventory_seconds=0)
    controller.run_cycle()  # the slice is stored
    return controller, clock, backend


def claim(world: World, name: str) -> ResourceClaimObject:
    stored = world.store.get("ResourceClaim", "acme", name)
    assert isinstance(stored, ResourceClaimObject)
    return stored


def devices_of(world: World, name: str) -> list[str]:
    status = claim(world, name).status
    assert status is not None and status.allocation is not None, name
    return [r["device"] for r in status.allocation["devices"]["results"]]


def claim_names(world: World) -> list[str]:
    return sorted(o.name for o in world.store.list_objects("ResourceClaim", None))


class TestServed:
    def test_the_class_naming_the_resource_gives_each_replica_its_devices(
        self, world: World
    ) -> None:
        """KEP-5004: the class whose extendedResourceName is the name serves it, one claim
        per pod asking exactly the count; 2 x 2 of 4 FPGAs, none twice."""
        controller, _, backend = setup(world)
        fpga_class(world)
        world.submit("ext", TASK.format(replicas=2, resource="example.com/fpga", count=2))
        controller.run_cycle()
        assert world.phase("ext") == "Running"
        first = claim(world, "ext-worker-0-example-com-fpga")
        request = first.spec["devices"]["requests"][0]
        assert request["exactly"] == {"deviceClassName": "fpga", "count": 2}
        # 4 FPGAs, 2 replicas of 2: each gets two, none twice (device order: fpga-0 first).
        assert devices_of(world, "ext-worker-0-example-com-fpga") == ["fpga-0", "fpga-1"]
        assert devices_of(world, "ext-worker-1-example-com-fpga") == ["fpga-2", "fpga-3"]
        pinned = {r.task: r.devices for r in backend.started}
        assert pinned["worker-0"] == (
            ClaimDevice(DRIVER, "n-0", "fpga-0"),
            ClaimDevice(DRIVER, "n-0", "fpga-1"),
        )
        assert pinned["worker-1"] == (
            ClaimDevice(DRIVER, "n-0", "fpga-2"),
            ClaimDevice(DRIVER, "n-0", "fpga-3"),
        )

    def test_the_implicit_name_is_served_by_the_class_of_that_name(self, world: World) -> None:
        """KEP-5004: every class serves deviceclass.resource.kubernetes.io/<its name>."""
        controller, _, _ = setup(world)
        fpga_class(world, name="fpga-any", resource=None)  # no extendedResourceName
        world.submit(
            "ext",
            TASK.format(
                replicas=1, resource="deviceclass.resource.kubernetes.io/fpga-any", count=3
            ),
        )
        controller.run_cycle()
        assert world.phase("ext") == "Running"
        name = "ext-worker-0-deviceclass-resource-kubernetes-io-fpga-any"
        request = claim(world, name).spec["devices"]["requests"][0]
        assert request["exactly"] == {"deviceClassName": "fpga-any", "count": 3}
        assert devices_of(world, name) == ["fpga-0", "fpga-1", "fpga-2"]

    def test_of_two_classes_naming_it_the_first_by_name_serves(self, world: World) -> None:
        """Kubernetes takes the newest of two classes naming one resource; aipaas the first
        by name (docs/devices.md says where it differs and why)."""
        controller, _, _ = setup(world)
        # b-high offers fpga-2 and fpga-3, a-low fpga-0 and fpga-1: the devices say which.
        high = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].index >= 2'
        low = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].index < 2'
        fpga_class(world, name="b-high", selector=high)
        fpga_class(world, name="a-low", selector=low)
        world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=1))
        controller.run_cycle()
        name = "ext-worker-0-example-com-fpga"
        assert claim(world, name).spec["devices"]["requests"][0]["exactly"]["deviceClassName"] == (
            "a-low"
        )
        assert devices_of(world, name) == ["fpga-0"]


class TestUnserved:
    def test_waits_pending_naming_the_resource_then_starts_once_a_class_appears(
        self, world: World
    ) -> None:
        """A pod whose extended resource nothing serves stays Pending (not refused) and is
        scheduled once a DeviceClass names it."""
        controller, _, _ = setup(world)
        world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=2))
        controller.run_cycle()
        controller.run_cycle()
        status = world.job("ext").status
        assert status is not None
        assert (status.phase.value, status.reason, status.message) == (
            "Pending",
            "Unschedulable",
            "task worker: no DeviceClass serves extended resource example.com/fpga",
        )
        assert claim_names(world) == []
        fpga_class(world)
        controller.run_cycle()
        assert world.phase("ext") == "Running"
        assert devices_of(world, "ext-worker-0-example-com-fpga") == ["fpga-0", "fpga-1"]

    def test_more_devices_than_the_node_has_wait_without_a_claim_stored(self, world: World) -> None:
        """As kube-scheduler, the claim is written only once the pod has a node."""
        controller, _, _ = setup(world)
        fpga_class(world)
        world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=5))
        controller.run_cycle()
        controller.run_cycle()
        assert world.phase("ext") == "Pending"
        assert claim_names(world) == []


class TestAllocation:
    def test_recorded_in_the_claim_and_released_when_the_task_ends(self, world: World) -> None:
        """The claim made for a pod's extended resources holds its allocation and the pod
        in reservedFor, and is deleted with the pod; its devices then go to the next."""
        controller, clock, _ = setup(world)
        fpga_class(world)
        world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=4))
        controller.run_cycle()
        name = "ext-worker-0-example-com-fpga"
        stored = claim(world, name)
        assert stored.metadata.annotations["aipaas.dev/from-short-form"] == (
            "resources[example.com/fpga]"
        )
        assert stored.status is not None
        assert [r["name"] for r in stored.status.reserved_for] == ["ext/worker-0"]
        assert devices_of(world, name) == ["fpga-0", "fpga-1", "fpga-2", "fpga-3"]
        # All four are held: a second job asking one waits while the first runs.
        world.submit("next", TASK.format(replicas=1, resource="example.com/fpga", count=1))
        controller.run_cycle()
        assert world.phase("next") == "Pending"
        clock.advance(200)  # the sim runs each task 100 s
        controller.run_cycle()
        controller.run_cycle()
        assert world.phase("ext") == "Succeeded"
        assert name not in claim_names(world)  # deleted with its task
        controller.run_cycle()
        assert world.phase("next") == "Running"
        assert devices_of(world, "next-worker-0-example-com-fpga") == ["fpga-0"]

    def test_fpgas_are_not_gpus_for_quotas(self, world: World) -> None:
        """Devices that are not GPUs count against no GPU quota (a quota of 0 GPUs)."""
        controller, _, _ = setup(world, quota="{gpu: 0, cpu: 64, memory: 512Gi}")
        fpga_class(world)
        world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=2))
        controller.run_cycle()
        assert world.phase("ext") == "Running"
        tasks = world.job("ext").status.tasks  # type: ignore[union-attr]
        assert tasks[0].gpus == []


def test_a_count_of_zero_asks_no_class_and_no_claim(world: World) -> None:
    """A pod's request of 0 of an extended resource asks nothing: no class is needed."""
    controller, _, _ = setup(world)
    world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=0))
    controller.run_cycle()
    assert world.phase("ext") == "Running"
    assert claim_names(world) == []


def test_a_replica_to_place_again_after_its_class_went_is_not_placed_without_devices(
    world: World,
) -> None:
    """A job already running is not asked ``problem`` again: a replica of it to be placed
    while no class serves its resource gets a claim no device meets (its reason names the
    resource), never a node without its FPGAs."""
    controller, _, backend = setup(world)
    world.submit("ext", TASK.format(replicas=1, resource="example.com/fpga", count=1))
    job = world.job("ext")
    record = TaskRecord(job.metadata.uid or "", "acme", "ext", "worker-0", "worker", 0, 0)
    controller.claims.devices([])  # no DeviceClass stored
    pod = controller.claims.pod(job, record)
    placer = Placer(backend.nodes, devices=controller.claims.devices([]))
    reasons = placer.place([pod])
    assert isinstance(reasons, tuple)
    assert reasons[-1] == (
        '0/1 nodes are available: 1 claim "ext-worker-0-example-com-fpga" request '
        '"example-com-fpga": no device matches selector '
        '\'"no DeviceClass serves extended resource example.com/fpga" == ""\''
    )


def test_devices_of_a_gpu_class_count_as_gpus_for_quotas(world: World) -> None:
    """Through the implicit name of the GPU class, the devices given are GPUs (type gpu of
    driver gpu.nvidia.com) and count against the tenant's GPU quota, as a claim's GPUs do:
    2 GPUs do not fit a quota of 1; 1 GPU does."""
    world.setup("{gpu: 1, cpu: 64, memory: 512Gi}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    clock = VirtualClock()
    controller = world.controller(make_backend("sim", world.tmp / "run", clock=clock), clock)
    controller.run_cycle()
    implicit = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    world.submit("two", TASK.format(replicas=1, resource=implicit, count=2))
    controller.run_cycle()
    status = world.job("two").status
    assert status is not None
    assert (status.phase.value, status.reason) == ("Pending", "QuotaExceeded")
    assert "needs 2 more" in status.message
    world.service.delete("Job", "two", "acme")
    world.submit("one", TASK.format(replicas=1, resource=implicit, count=1))
    controller.run_cycle()
    controller.run_cycle()
    tasks = world.job("one").status.tasks  # type: ignore[union-attr]
    assert world.phase("one") == "Running"
    assert len(tasks[0].gpus) == 1


def test_gpus_asked_by_count_besides_an_extended_resource_are_held_too(world: World) -> None:
    """Two GPUs known by count only (no GPU devices published: ``gpu:`` takes the count
    path) and four FPGAs: two replicas of ``gpu: 1, example.com/fpga: 1`` hold GPU 0 and GPU 1
    (as a pod asking both nvidia.com/gpu and a DRA-backed resource holds both), so a job
    asking one more GPU waits while they run."""
    controller, _, _ = setup(world, gpus=2)
    fpga_class(world)
    world.submit(
        "mixed",
        "    - name: worker\n      replicas: 2\n      command: [train]\n"
        "      resources: {cpu: 1, memory: 64Mi, gpu: 1, example.com/fpga: 1}\n",
    )
    controller.run_cycle()
    tasks = world.job("mixed").status.tasks  # type: ignore[union-attr]
    assert [(t.name, t.gpus) for t in tasks] == [("worker-0", [0]), ("worker-1", [1])]
    assert devices_of(world, "mixed-worker-0-example-com-fpga") == ["fpga-0"]
    assert devices_of(world, "mixed-worker-1-example-com-fpga") == ["fpga-1"]
    world.submit("more", TASK.format(replicas=1, resource="gpu", count=1))
    controller.run_cycle()
    controller.run_cycle()  # the running tasks are held again from their records
    assert world.phase("more") == "Pending"
    assert world.phase("mixed") == "Running"
