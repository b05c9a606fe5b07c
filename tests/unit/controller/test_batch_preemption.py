"""Preemption in the live controller (issue 11 item 3) on the sim backend and a virtual clock.

A critical job evicts a lower-priority preemptible job of its queue: the victim is asked to stop
and goes back to Pending (not Failed), holding its GPUs until the backend confirms; the
preemptor starts only then, in the room the victim left; the victim starts again later without
using up its backoffLimit (restartPolicy Never: a restart that counted would fail the job), and
its status and events name the preemptor.
"""

from __future__ import annotations

from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.advance import Backoff
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRepository
from tests.support.ctl_world import World, sim_backend

ONE_NODE = """    - name: worker
      replicas: 1
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""


def sim(world: World, kind: str) -> tuple[Controller, VirtualClock, SimBackend]:
    """A controller on the sim cluster (GPUs by count, or publishing slices: ``kind``)."""
    clock = VirtualClock()
    backend = sim_backend(world, clock, kind)
    return world.controller(backend, clock), clock, backend


def held_gpus(world: World) -> list[tuple[str | None, int]]:
    """Every GPU a task record holds (running, starting or stopping)."""
    return [
        (r.node, g)
        for records in TaskRepository(world.store).of_jobs_not_in([]).values()
        for r in records
        if r.node is not None
        for g in r.gpus
    ]


def fill(world: World, controller: Controller, clock: VirtualClock) -> None:
    """Two low-priority 8-GPU jobs fill the 16 GPUs of the sim cluster."""
    world.setup("{gpu: 100}")
    for name in ("low-a", "low-b"):
        world.submit(name, ONE_NODE, extra="  priority: low\n")
        clock.advance(1)
        controller.run_cycle()
    assert [world.phase(n) for n in ("low-a", "low-b")] == ["Running", "Running"]


class TestPreemption:
    def test_a_critical_job_evicts_and_the_victim_comes_back(
        self, world: World, cluster_kind: str
    ) -> None:
        controller, clock, _ = sim(world, cluster_kind)
        fill(world, controller, clock)
        world.submit("urgent", ONE_NODE, extra="  priority: critical\n")
        clock.advance(1)
        controller.run_cycle()
        # The most recently started low job is the victim: Pending again, not Failed, and
        # its status names who evicted it and why.
        victim = world.job("low-b").status
        assert victim is not None and victim.phase.value == "Pending"
        assert victim.reason == "Preempted"
        assert "acme/urgent" in victim.message
        assert victim.tasks[0].phase.value == "Pending"
        assert world.phase("low-a") == "Running"
        assert "Preempted" in world.reasons("low-b")
        # Nothing starts on GPUs the victim may still use: the preemptor waits for the stop.
        urgent = world.job("urgent").status
        assert urgent is not None and urgent.phase.value == "Pending"
        assert urgent.reason == "Preempting"
        records = TaskRepository(world.store).of_jobs_not_in([])
        victim_record = next(r for rs in records.values() for r in rs if r.job_name == "low-b")
        assert victim_record.stopping and victim_record.node is not None
        assert victim_record.evictions == 1
        # The sim confirms the stop in the next cycle: the preemptor starts where it was.
        clock.advance(1)
        controller.run_cycle()
        assert world.phase("urgent") == "Running"
        assert world.job("urgent").status.tasks[0].node == victim_record.node  # type: ignore[union-attr]
        assert world.phase("low-b") == "Pending"
        gpus = held_gpus(world)
        assert len(gpus) == len(set(gpus)) == 16
        # The victim restarts once there is room (the others end after 100 s), without using
        # up backoffLimit 0 (restartPolicy Never).
        for _ in range(3):
            clock.advance(60)
            controller.run_cycle()
        status = world.job("low-b").status
        assert status is not None and status.phase.value in ("Running", "Succeeded")
        assert status.tasks[0].restarts == 1
        clock.advance(200)
        controller.run_cycle()
        controller.run_cycle()
        assert world.phase("low-b") == "Succeeded"
        assert world.phase("urgent") == "Succeeded"

    def test_equal_priority_never_preempts(self, world: World, cluster_kind: str) -> None:
        controller, clock, _ = sim(world, cluster_kind)
        fill(world, controller, clock)
        world.submit("same", ONE_NODE, extra="  priority: low\n")
        clock.advance(1)
        controller.run_cycle()
        controller.run_cycle()
        assert [world.phase(n) for n in ("low-a", "low-b")] == ["Running", "Running"]
        assert world.phase("same") == "Pending"

    def test_a_non_preemptible_job_is_never_evicted(self, world: World, cluster_kind: str) -> None:
        controller, clock, _ = sim(world, cluster_kind)
        world.setup("{gpu: 100}")
        for name in ("keep-a", "keep-b"):
            world.submit(name, ONE_NODE, extra="  priority: low\n  preemptible: false\n")
            controller.run_cycle()
        world.submit("urgent", ONE_NODE, extra="  priority: critical\n")
        clock.advance(1)
        controller.run_cycle()
        controller.run_cycle()
        assert [world.phase(n) for n in ("keep-a", "keep-b")] == ["Running", "Running"]
        assert world.phase("urgent") == "Pending"

    def test_a_restarted_controller_does_not_start_on_a_victims_gpus(
        self, world: World, cluster_kind: str
    ) -> None:
        """A victim whose stop is not confirmed keeps its GPUs across a controller restart."""
        controller, clock, backend = sim(world, cluster_kind)
        fill(world, controller, clock)
        world.submit("urgent", ONE_NODE, extra="  priority: critical\n")
        clock.advance(1)
        backend.stop = lambda request_id, grace_seconds=5.0: None  # type: ignore[method-assign]
        controller.run_cycle()
        assert world.job("low-b").status.reason == "Preempted"  # type: ignore[union-attr]
        again = world.controller(backend, clock)
        for _ in range(3):
            clock.advance(1)
            again.run_cycle()
        gpus = held_gpus(world)
        assert len(gpus) == len(set(gpus)) == 16  # never a GPU held twice
        assert world.phase("urgent") == "Pending"
        # The new controller knows the preemptor waits for its victim (from the victim's
        # record): it evicts no second job for it.
        assert world.phase("low-a") == "Running"
        assert world.job("urgent").status.reason == "Preempting"  # type: ignore[union-attr]

    def test_an_eviction_does_not_use_up_the_backoff_limit(
        self, world: World, cluster_kind: str
    ) -> None:
        """A victim with restartPolicy OnFailure and backoffLimit 1 that fails after its restart
        still gets its one restart: the eviction's attempt is not counted."""
        controller, clock, _ = sim(world, cluster_kind)
        world.setup("{gpu: 100}")
        flaky = ONE_NODE + "      restartPolicy: OnFailure\n      backoffLimit: 1\n"
        world.submit("other", ONE_NODE, extra="  priority: low\n")
        world.submit(
            "flaky",
            flaky,
            extra="  priority: low\n",
            annotations="{sim.aipaas.dev/exit-code: '3', sim.aipaas.dev/duration: '30'}",
        )
        controller.run_cycle()
        world.submit("urgent", ONE_NODE, extra="  priority: critical\n")
        clock.advance(1)
        controller.run_cycle()
        assert world.job("flaky").status.reason == "Preempted"  # type: ignore[union-attr]
        controller.backoff = Backoff(0.0, controller.backoff.max_seconds)
        for _ in range(12):  # urgent and other end after 100 s; flaky runs 30 s, fails
            clock.advance(20)
            controller.run_cycle()
        status = world.job("flaky").status
        assert status is not None and status.phase.value == "Failed"
        assert "TaskRestarting" in world.reasons("flaky")
        # evicted once (attempt 1), failed, restarted (attempt 2), failed: the limit reached
        assert status.tasks[0].restarts == 2 and status.tasks[0].exit_code == 3


def test_queue_status_follows_the_session(world: World, cluster_kind: str) -> None:
    controller, clock, _ = sim(world, cluster_kind)
    fill(world, controller, clock)
    world.submit("waiting", ONE_NODE, extra="  priority: low\n")
    clock.advance(1)
    controller.run_cycle()
    queue = world.store.get("Queue", "acme", "research")
    status = queue.status  # type: ignore[attr-defined]
    assert status is not None
    assert status.allocated.gpu == 16 and status.pending.gpu == 8


GANG = """    - name: worker
      replicas: 2
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""


def test_a_gang_is_evicted_whole_and_starts_again_whole(world: World, cluster_kind: str) -> None:
    controller, clock, _ = sim(world, cluster_kind)
    world.setup("{gpu: 100}")
    world.submit("gang", GANG, extra="  priority: low\n")
    controller.run_cycle()
    assert world.phase("gang") == "Running"
    world.submit(
        "urgent",
        ONE_NODE,
        extra="  priority: critical\n",
        annotations="{sim.aipaas.dev/duration: '30'}",
    )
    clock.advance(1)
    controller.run_cycle()
    status = world.job("gang").status
    assert status is not None and status.phase.value == "Pending"
    assert status.reason == "Preempted"
    assert [t.phase.value for t in status.tasks] == ["Pending", "Pending"]  # both, not one
    clock.advance(1)
    controller.run_cycle()
    assert world.phase("urgent") == "Running"
    status = world.job("gang").status
    assert status is not None and status.phase.value == "Pending"
    assert [t.node for t in status.tasks] == [None, None]  # holds nothing while it waits
    clock.advance(31)  # the critical job ends: the gang starts again, whole
    controller.run_cycle()
    controller.run_cycle()
    status = world.job("gang").status
    assert status is not None and status.phase.value == "Running"
    assert [(t.phase.value, t.restarts) for t in status.tasks] == [("Running", 1)] * 2
