"""The services' controller step on the simulated backend: replicas become one-task jobs of the
service's queue at its priority, each with its own port; scaling is an event with its numbers;
replica jobs the status does not list are adopted; replicas of a deleted service are stopped."""

from __future__ import annotations

from datetime import UTC, datetime

from aipaas.api.job import CANCEL_ANNOTATION, Job
from aipaas.api.meta import ObjectMeta
from aipaas.api.service import (
    SERVICE_LABEL,
    LoadSample,
    Service,
    ServiceLoad,
    ServiceLoadStatus,
)
from aipaas.backends.base import NodeInfo
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.services import ServiceExtension, measured
from aipaas.controller.services_replicas import replica_job
from tests.support.ctl_world import World

SERVICE = """
apiVersion: aipaas/v1
kind: Service
metadata: {{name: echo, tenant: acme}}
spec:
  queue: research
  priorityClassName: {priority}
  minReplicas: {replicas}
  template:
    command: [serve]
    resources: {{cpu: 1, memory: 1Gi, gpu: 0.5}}
"""


def controller_with_services(world: World) -> Controller:
    world.setup()
    clock = VirtualClock()
    nodes = [NodeInfo("gpu-0", "sim", 64000, 512 * 1024, gpu_count=8, gpu_model="H100")]
    backend = SimBackend(world.tmp / "run", nodes, clock, default_duration=10**6)
    return world.controller(backend, clock, extensions=[ServiceExtension(seed=7)])


def replicas(world: World) -> list[Job]:
    return [
        job
        for job in world.store.list_objects("Job", "acme")
        if isinstance(job, Job) and job.metadata.labels.get(SERVICE_LABEL) == "echo"
    ]


def service(world: World) -> Service:
    found = world.store.get("Service", "acme", "echo")
    assert isinstance(found, Service)
    return found


def test_replicas_are_jobs_of_the_service_queue_with_their_own_ports(world: World) -> None:
    controller = controller_with_services(world)
    world.service.apply_text(SERVICE.format(priority="normal", replicas=3))
    controller.run_cycle()
    jobs = replicas(world)
    assert len(jobs) == 3
    ports = {job.spec.tasks[0].env["PORT"] for job in jobs}
    assert len(ports) == 3
    for job in jobs:
        assert job.spec.queue == "research"
        assert (job.spec.priority, job.spec.preemptible) == (100, False)
        assert job.spec.tasks[0].resources.amounts().gpu_milli == 500
    status = service(world).status
    assert status is not None and status.desired_replicas == 3
    scaled = [e.message for e in world.store.list_events(kind="Service", name="echo")]
    assert "0 -> 3 replicas: minReplicas and schedule" in scaled
    for _ in range(3):
        controller.run_cycle()
    running = [j for j in replicas(world) if j.status is not None and j.status.phase == "Running"]
    assert len(running) == 3  # placed by the batch scheduler like any job
    assert len(replicas(world)) == 3  # nothing more is made while they start


def test_a_replica_job_the_status_does_not_list_is_adopted(world: World) -> None:
    controller = controller_with_services(world)
    world.service.apply_text(SERVICE.format(priority="normal", replicas=1))
    stray = replica_job(service(world), "echo-stray", 31000, classes={}, tenant=None)
    world.store.create(stray)
    controller.run_cycle()
    status = service(world).status
    assert status is not None
    assert [r.job for r in status.replica_jobs] == ["echo-stray"]
    assert status.replica_jobs[0].port == 31000
    assert len(replicas(world)) == 1  # the stray counts: no second replica


def test_replicas_of_a_deleted_service_are_stopped(world: World) -> None:
    controller = controller_with_services(world)
    world.service.apply_text(SERVICE.format(priority="normal", replicas=2))
    controller.run_cycle()
    assert len(replicas(world)) == 2
    world.service.delete("Service", "echo", "acme")
    controller.run_cycle()
    left = replicas(world)
    assert all(CANCEL_ANNOTATION in job.metadata.annotations for job in left)
    for _ in range(3):
        controller.run_cycle()
    assert replicas(world) == []


def test_a_fixed_port_is_every_replica_port(world: World) -> None:
    controller = controller_with_services(world)
    world.service.apply_text(SERVICE.format(priority="normal", replicas=2) + "  port: 8080\n")
    controller.run_cycle()
    assert {job.spec.tasks[0].env["PORT"] for job in replicas(world)} == {"8080"}
    status = service(world).status
    assert status is not None and {r.port for r in status.replica_jobs} == {8080}


def test_the_load_of_several_api_processes_is_added_up_and_old_samples_ignored() -> None:
    now = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)
    at = now.timestamp()
    samples = {
        "worker-a": LoadSample(at=at - 0.4, concurrency=2.5, rate=10.0),
        "worker-b": LoadSample(at=at - 1.0, concurrency=1.5, rate=4.0),
        "gone": LoadSample(at=at - 30.0, concurrency=9.0, rate=90.0),  # stopped measuring
    }
    load = ServiceLoad(
        metadata=ObjectMeta(name="echo", tenant="acme"),
        status=ServiceLoadStatus(samples=samples),
    )
    found = measured(load, now)
    assert found is not None
    assert (found.concurrency, found.rate) == (4.0, 14.0)
    nothing = measured(None, now)
    assert nothing is not None and (nothing.concurrency, nothing.rate) == (0.0, 0.0)
