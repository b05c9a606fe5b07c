"""A backend whose tasks never run when their start returns (Ray: ``starts_later``) is not
asked about them in the cycle that started them (a round trip for nothing); one whose tasks
run at once is, and they are Running in that same cycle."""

from __future__ import annotations

from collections.abc import Sequence

from aipaas.backends.base import TaskStatus
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.cluster import load_cluster_with_slices
from aipaas.clock import VirtualClock
from aipaas.store import TaskRepository
from tests.support.ctl_world import World

TASK = "  - name: w\n    replicas: 1\n    command: [sleep, '10']\n    resources: {cpu: 1}\n"


class CountingSim(SimBackend):
    def __init__(self, *args: object, **options: object) -> None:
        super().__init__(*args, **options)  # type: ignore[arg-type]
        self.asked: list[list[str]] = []

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        self.asked.append(list(request_ids))
        return super().status(request_ids)


class LaterSim(CountingSim):
    starts_later = True


def run_first_cycle(world: World, backend: CountingSim, clock: VirtualClock) -> str:
    world.setup()
    world.submit("job", TASK)
    controller = world.controller(backend, clock=clock)
    controller.run_cycle()
    (record,) = TaskRepository(world.store).for_job(world.job("job").metadata.uid or "")
    return record.phase


def test_a_backend_that_starts_later_is_not_asked_in_the_starting_cycle(world: World) -> None:
    clock = VirtualClock()
    nodes, _ = load_cluster_with_slices(None)
    backend = LaterSim(world.tmp / "run", nodes, clock, 100)
    assert run_first_cycle(world, backend, clock) == "Starting"
    assert backend.asked == []  # started, not asked: the next cycle asks


def test_a_backend_whose_tasks_run_at_once_is_asked_and_they_are_running(world: World) -> None:
    clock = VirtualClock()
    nodes, _ = load_cluster_with_slices(None)
    backend = CountingSim(world.tmp / "run", nodes, clock, 100)
    assert run_first_cycle(world, backend, clock) == "Running"
    assert len(backend.asked) == 1
