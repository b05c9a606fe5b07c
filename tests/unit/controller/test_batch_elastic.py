"""Elastic jobs in the live controller (issue 11 item 5): minAvailable starts first, extras
start as room appears and are the first to go under pressure; each task starts with WORLD_SIZE
the job's size at its start, and AIPAAS_MEMBERSHIP_FILE names a file, written by the backend,
that the controller keeps up to date as members come and go."""

from __future__ import annotations

import json
from pathlib import Path

from aipaas.backends.base import LaunchRequest
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.cluster import load_cluster_with_slices
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World

ELASTIC = """    - name: w
      replicas: 3
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""
ONE_NODE = """    - name: worker
      replicas: 1
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""


class Recording(SimBackend):
    """The simulator, remembering every start asked of it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.requests: dict[str, LaunchRequest] = {}

    def start(self, request: LaunchRequest) -> None:
        self.requests.setdefault(request.task, request)
        super().start(request)


def sim(world: World, kind: str) -> tuple[Controller, VirtualClock, Recording]:
    """A controller on the sim cluster (GPUs by count, or publishing slices: ``kind``)."""
    clock = VirtualClock()
    nodes, slices = load_cluster_with_slices(None)
    published = slices if kind == "slices" else ()
    backend = Recording(world.tmp / "run", nodes, clock, 1000, slices=published)
    return world.controller(backend, clock), clock, backend


def membership(request: LaunchRequest) -> dict[str, object]:
    path = request.env["AIPAAS_MEMBERSHIP_FILE"]
    return json.loads(Path(path).read_text())  # type: ignore[no-any-return]


def test_extras_grow_and_shrink_with_world_size_and_membership(
    world: World, cluster_kind: str
) -> None:
    world.setup("{gpu: 100}")
    controller, clock, backend = sim(world, cluster_kind)
    world.submit("blocker", ONE_NODE, annotations="{sim.aipaas.dev/duration: '20'}")
    world.submit("el", ELASTIC, extra="  minAvailable: 1\n  priority: low\n")
    controller.run_cycle()
    assert world.phase("el") == "Running"
    first = backend.requests["w-0"]
    assert first.env["WORLD_SIZE"] == "1"
    assert membership(first) == {
        "size": 1,
        "members": [{"rank": 0, "name": "w-0", "node": first.node}],
    }
    # The blocker ends: one more member starts, told the new size; the file follows.
    clock.advance(21)
    controller.run_cycle()
    second = backend.requests["w-1"]
    assert second.env["WORLD_SIZE"] == "2"
    assert "w-2" not in backend.requests  # 16 GPUs: no room for a third
    assert second.env["AIPAAS_MEMBERSHIP_FILE"] == first.env["AIPAAS_MEMBERSHIP_FILE"]
    now = membership(first)
    assert now["size"] == 2
    assert [m["name"] for m in now["members"]] == ["w-0", "w-1"]  # type: ignore[attr-defined]
    # A critical job takes the extra's GPUs: the extra goes, the job keeps running at its
    # minAvailable, and the membership file says so.
    world.submit("urgent", ONE_NODE, extra="  priority: critical\n")
    clock.advance(1)
    controller.run_cycle()
    assert world.phase("el") == "Running"
    assert membership(first) == {
        "size": 1,
        "members": [{"rank": 0, "name": "w-0", "node": first.node}],
    }
    clock.advance(1)
    controller.run_cycle()
    assert world.phase("urgent") == "Running"
    status = world.job("el").status
    assert status is not None
    assert [t.phase.value for t in status.tasks] == ["Running", "Pending", "Pending"]


def test_a_rigid_job_keeps_its_full_world_size(world: World, cluster_kind: str) -> None:
    world.setup("{gpu: 100}")
    controller, _, backend = sim(world, cluster_kind)
    world.submit("rigid", ELASTIC.replace("gpu: 8", "gpu: 1"))
    controller.run_cycle()
    assert {r.env["WORLD_SIZE"] for r in backend.requests.values()} == {"3"}
    assert all("AIPAAS_MEMBERSHIP_FILE" not in r.env for r in backend.requests.values())
