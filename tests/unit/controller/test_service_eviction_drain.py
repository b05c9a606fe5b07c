"""An evicted preemptible replica drains before its SIGTERM, on the live controller and the
sim backend: a lending pool's owner takes its GPUs back from a spot service; with
``onEviction: Drain`` (the default) the replica leaves the service's serving replicas in the
eviction's cycle while its process runs on for ``drainSeconds`` (at most its grace period), then
is stopped and the lender's job starts; ``onEviction: Stop`` stops it in the eviction's cycle;
the drain of a replica whose service is deleted meanwhile runs to its end
(controller/stop_drain.py)."""

from __future__ import annotations

from aipaas.api.job import Job
from aipaas.api.service import SERVICE_LABEL, Service
from aipaas.backends.base import NodeInfo, TaskState
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.pools import PoolController
from aipaas.controller.services import ServiceExtension
from aipaas.store import TaskRepository
from tests.support.ctl_world import World

SETUP = """
apiVersion: aipaas/v1
kind: PriorityClass
metadata: {name: spot}
spec: {value: -100, preemptible: true, description: lent capacity}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {guaranteed: {gpu: 8}, quota: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
spec: {guaranteed: {gpu: 8}}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
spec: {allowedPriorityClasses: [spot, low, normal]}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: spot, tenant: globex}
---
apiVersion: aipaas/v1
kind: NodePool
metadata: {name: lent}
spec:
  backend: sim
  node: {cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100}}
  minSize: 1
  maxSize: 1
  provisioningDelay: 0s
  lending: {enabled: true, lender: acme, gracePeriod: 30s, reclaimWithin: 2m}
"""
SERVICE = """
apiVersion: aipaas/v1
kind: Service
metadata: {{name: chat, tenant: globex}}
spec:
  queue: spot
  priorityClassName: spot
  preemptible: true
  replicas: 1
  drainSeconds: {drain}
  onEviction: {policy}
  template:
    command: [serve]
    resources: {{cpu: 8, memory: 64Gi, gpu: 8}}
"""
OWN_JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: own, tenant: acme}
spec:
  queue: research
  tasks:
    - {name: w, replicas: 1, command: [run], resources: {cpu: 8, memory: 64Gi, gpu: 8}}
"""


def spot_service(
    world: World, *, drain: int, policy: str
) -> tuple[Controller, VirtualClock, SimBackend, str]:
    """The lent node running the spot service's one replica; its attempt's request id."""
    world.service.apply_text(SETUP)
    clock = VirtualClock()
    backend = SimBackend(
        world.tmp / "run", [NodeInfo("cpu-0", "sim", 8000, 32768)], clock, default_duration=10**6
    )
    controller = world.controller(
        backend, clock, extensions=[PoolController(), ServiceExtension(seed=7)]
    )
    controller.run_cycle()  # the pool makes its one node (minSize)
    clock.advance(11)  # the next inventory read (every 10 s) sees it
    controller.run_cycle()
    world.service.apply_text(SERVICE.format(drain=drain, policy=policy))
    for _ in range(3):
        controller.run_cycle()
    replica = replica_job(world)
    assert phase(world, "globex", replica.name) == "Running"
    with world.store.transaction(write=False) as tx:
        records = TaskRepository(world.store).for_jobs([replica.metadata.uid or ""], conn=tx)
    (record,) = records[replica.metadata.uid or ""]
    assert record.request_id is not None
    return controller, clock, backend, record.request_id


def replica_job(world: World) -> Job:
    (job,) = [
        j
        for j in world.store.list_objects("Job", "globex")
        if isinstance(j, Job) and j.metadata.labels.get(SERVICE_LABEL) == "chat"
    ]
    return job


def phase(world: World, tenant: str, name: str) -> str:
    job = world.store.get("Job", tenant, name)
    status = getattr(job, "status", None)
    return status.phase.value if status else "Pending"


def runs(backend: SimBackend, request_id: str) -> bool:
    return backend.status([request_id])[request_id].state is TaskState.RUNNING


def replica_state(world: World) -> str:
    service = world.store.get("Service", "globex", "chat")
    assert isinstance(service, Service) and service.status is not None
    (record,) = service.status.replica_jobs
    return record.state


def test_a_reclaimed_replica_leaves_serving_at_once_and_is_stopped_after_its_drain(
    world: World,
) -> None:
    controller, clock, backend, rid = spot_service(world, drain=20, policy="Drain")
    world.service.apply_text(OWN_JOB)
    controller.run_cycle()  # the lender's job reclaims the node: the replica is evicted
    assert replica_state(world) == "Pending"  # no longer a replica requests may go to
    assert runs(backend, rid)  # but its process answers what it was sent
    assert phase(world, "acme", "own") == "Pending"  # the GPUs are still the replica's
    clock.advance(15)
    controller.run_cycle()
    assert runs(backend, rid)
    clock.advance(6)  # 21 s after the eviction: the drain of 20 s is over
    controller.run_cycle()
    assert not runs(backend, rid)
    controller.run_cycle()
    assert phase(world, "acme", "own") == "Running"


def test_with_on_eviction_stop_the_replica_is_stopped_in_the_evictions_cycle(
    world: World,
) -> None:
    controller, _, backend, rid = spot_service(world, drain=20, policy="Stop")
    world.service.apply_text(OWN_JOB)
    controller.run_cycle()
    assert not runs(backend, rid)


def test_the_drain_is_at_most_the_replicas_grace_period(world: World) -> None:
    controller, clock, backend, rid = spot_service(world, drain=600, policy="Drain")
    world.service.apply_text(OWN_JOB)
    controller.run_cycle()
    assert runs(backend, rid)
    clock.advance(31)  # the default grace period is 30 s: the drain of 600 s is cut to it
    controller.run_cycle()
    assert not runs(backend, rid)


def test_a_deleted_service_s_draining_replica_is_stopped_when_its_drain_ends(
    world: World,
) -> None:
    controller, clock, backend, rid = spot_service(world, drain=20, policy="Drain")
    world.service.apply_text(OWN_JOB)
    controller.run_cycle()
    world.service.delete("Service", "chat", "globex")
    controller.run_cycle()  # the service's replicas are cancelled: the drain goes on
    assert runs(backend, rid)
    clock.advance(21)
    controller.run_cycle()
    assert not runs(backend, rid)
    for _ in range(3):
        controller.run_cycle()
    assert phase(world, "acme", "own") == "Running"
