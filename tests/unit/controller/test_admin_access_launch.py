"""A task whose only claim asks adminAccess holds no device, and its claim's allocation still
goes to the backend with the start: the Kubernetes backend writes it before binding the pod
(a pod bound with its claim unallocated never starts)."""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.base import LaunchRequest
from aipaas.backends.registry import make_backend
from aipaas.clock import VirtualClock
from tests.support.ctl_world import World

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"
MONITOR = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: monitor, namespace: acme}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com, count: 1, adminAccess: true}
"""
TASK = """    - name: watcher
      command: [watch]
      resources:
        cpu: 1
        claims: [{name: gpu, resourceClaimName: monitor}]
"""


def test_an_admin_access_claim_is_handed_to_the_backend(world: World) -> None:
    world.setup("{gpu: 100}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    clock = VirtualClock()
    backend = make_backend("sim", world.tmp / "run", clock=clock)
    started: list[LaunchRequest] = []
    start = backend.start

    def recording(request: LaunchRequest) -> None:
        started.append(request)
        start(request)

    backend.start = recording  # type: ignore[method-assign]
    controller = world.controller(backend, clock, inventory_seconds=0)
    controller.run_cycle()  # slices published
    world.service.apply_text(MONITOR)
    world.submit("watch", TASK)
    controller.run_cycle()
    [request] = started
    assert request.devices == ()  # adminAccess holds no device
    [document] = request.claims
    assert document["metadata"]["name"] == "monitor"
    [result] = document["status"]["allocation"]["devices"]["results"]
    assert result["adminAccess"] is True
