"""Scaling on GPU utilisation (metric ``gpu``): the services' controller step reads how busy
each GPU is from the backend (here a simulated cluster whose utilisation reader is faked) and
sums it over the running replicas' GPUs; the replica count follows the HPA's rule,
ceil(replicas x mean utilisation / target). With no reading the count is held, never guessed.
The pure rule is checked on its own too."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from aipaas.api.job import Job
from aipaas.api.registry import parse_object
from aipaas.api.service import SERVICE_LABEL, Service, ServiceSpec
from aipaas.autoscale.replicas import Load, ScalerMemory, decide
from aipaas.backends.base import NodeInfo
from aipaas.backends.local.gpu_usage import read_utilization
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.services import ServiceExtension
from aipaas.errors import InvalidObject
from tests.support.ctl_world import World

SERVICE = """
apiVersion: aipaas/v1
kind: Service
metadata: {name: vision, tenant: acme}
spec:
  queue: research
  minReplicas: 1
  maxReplicas: 4
  template:
    command: [serve]
    resources: {cpu: 1, memory: 1Gi, gpu: 1}
  autoscaling:
    metric: gpu
    target: 50
    stableWindowSeconds: 10
    panicWindowSeconds: 2
    scaleDown: {stabilizationWindowSeconds: 5}
"""
NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class MeasuredSim(SimBackend):
    """A simulated cluster whose GPUs are as busy as the test says (NVML's reading, faked)."""

    busy: float = 0.0

    def gpu_utilization(self) -> Mapping[tuple[str, int], float]:
        return {("gpu-0", index): self.busy for index in range(8)}


class BlindSim(SimBackend):
    """A cluster that cannot tell how busy its GPUs are."""


def make(world: World, kind: type[SimBackend]) -> tuple[Controller, VirtualClock, SimBackend]:
    world.setup()
    clock = VirtualClock(NOON)
    nodes = [NodeInfo("gpu-0", "sim", 64000, 512 * 1024, gpu_count=8, gpu_model="H100")]
    backend = kind(world.tmp / "run", nodes, clock, default_duration=10**6)
    controller = world.controller(backend, clock, extensions=[ServiceExtension(seed=3)])
    world.service.apply_text(SERVICE)
    return controller, clock, backend


def running_replicas(world: World) -> int:
    return sum(
        1
        for job in world.store.list_objects("Job", "acme")
        if isinstance(job, Job)
        and job.metadata.labels.get(SERVICE_LABEL) == "vision"
        and job.status is not None
        and job.status.phase == "Running"
    )


def desired(world: World) -> int:
    found = world.store.get("Service", "acme", "vision")
    assert isinstance(found, Service) and found.status is not None
    return found.status.desired_replicas


def run_for(controller: Controller, clock: VirtualClock, seconds: int) -> None:
    for _ in range(seconds):
        controller.run_cycle()
        clock.advance(1.0)


def test_busy_gpus_add_replicas_and_idle_ones_remove_them(world: World) -> None:
    controller, clock, backend = make(world, MeasuredSim)
    assert isinstance(backend, MeasuredSim)
    run_for(controller, clock, 3)
    assert running_replicas(world) == 1
    backend.busy = 90.0  # one replica at 90% against a target of 50%: two replicas
    run_for(controller, clock, 4)
    assert desired(world) >= 2
    run_for(controller, clock, 12)  # every running replica at 90%: ceil(4 x 90 / 50) -> max 4
    assert desired(world) == 4
    assert running_replicas(world) == 4
    backend.busy = 10.0  # 4 x 10% = 40%: one replica carries it
    run_for(controller, clock, 30)
    assert desired(world) == 1
    events = [e.message for e in world.store.list_events(kind="Service", name="vision")]
    assert any("(gpu stable" in message for message in events), events


def test_without_a_reading_the_count_is_held(world: World) -> None:
    controller, clock, _ = make(world, BlindSim)
    run_for(controller, clock, 10)
    assert desired(world) == 1 and running_replicas(world) == 1


def spec(**scaling: object) -> ServiceSpec:
    return ServiceSpec.model_validate(
        {
            "template": {"command": ["serve"]},
            "minReplicas": 0,
            "maxReplicas": 8,
            "autoscaling": {"metric": "gpu", "target": 60, **scaling},
        }
    )


def test_the_rule_is_the_hpas_and_a_waiting_request_asks_for_a_replica() -> None:
    memory = ScalerMemory()
    decision = decide(
        spec(),
        memory,
        load=Load(0.0, 0.0, 0.0, gpu_utilization=3 * 80.0),
        now=0.0,
        wall=NOON,
        current=3,
        ready=3,
    )
    assert decision.desired == 4  # ceil(3 x 80 / 60)
    woken = decide(
        spec(),
        ScalerMemory(),
        load=Load(0.0, 0.0, 0.0, waiting=1, gpu_utilization=0.0),
        now=0.0,
        wall=NOON,
        current=0,
        ready=0,
    )
    assert woken.desired == 1
    blind = decide(
        spec(),
        ScalerMemory(),
        load=Load(0.0, 0.0, 0.0, waiting=1),
        now=0.0,
        wall=NOON,
        current=0,
        ready=0,
    )
    assert blind.desired == 1 and "no GPU utilisation reading" in blind.reason


def test_a_gpu_target_above_100_percent_is_refused() -> None:
    with pytest.raises(InvalidObject) as caught:
        parse_object(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Service",
                "metadata": {"name": "v", "tenant": "acme"},
                "spec": {
                    "template": {"command": ["x"]},
                    "autoscaling": {"metric": "gpu", "target": 150},
                },
            }
        )
    reasons = {e.path: e.reason for e in caught.value.fields}
    assert any("more than 100" in r for r in reasons.values()), reasons


@pytest.mark.gpu
def test_a_real_gpus_reading_drives_the_rule() -> None:
    """On a machine with an NVIDIA GPU: the local backend's NVML reader gives each GPU's
    utilisation in percent, and one replica on GPU 0 at that reading is scaled by the rule
    (scale-up at once, scale-down only after its window)."""
    reading = read_utilization("here")
    if not reading:
        pytest.skip("no NVIDIA GPU visible through NVML on this machine")
    assert all(0.0 <= value <= 100.0 for value in reading.values()), reading
    used = reading[("here", 0)]
    decision = decide(
        spec(),
        ScalerMemory(),
        load=Load(0.0, 0.0, 0.0, gpu_utilization=used),
        now=0.0,
        wall=NOON,
        current=1,
        ready=1,
    )
    wanted = min(8, math.ceil(used / 60))
    assert wanted <= decision.desired <= max(1, wanted), (used, decision.desired)
