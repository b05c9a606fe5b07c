"""A cycle with nothing new uses the last cycle's jobs and placement (controller/quiet.py), and
any write to the store, by this process or another server, is seen by the next cycle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.controller.quiet import FRESH_SECONDS, Kept, QuietCycles
from aipaas.controller.work import JobWork
from aipaas.server.service import ObjectService
from aipaas.store import Store
from tests.support.ctl_world import ADMIN, World

TASK = """    - name: w
      replicas: 1
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""


@pytest.fixture
def other(tmp_path: Path) -> Iterator[ObjectService]:
    """Another server on the same database: its writes never pass through this process."""
    store = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    yield ObjectService(store, ADMIN)
    store.close()


def _settled(world: World, clock: VirtualClock, jobs: str) -> Controller:
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=1000)
    controller = world.controller(backend, clock)
    for name in jobs:
        world.submit(name, TASK)
    for _ in range(4):
        clock.advance(0.2)
        controller.run_cycle()
    placements = controller.quiet.reused_placements
    clock.advance(0.2)
    controller.run_cycle()
    assert controller.quiet.reused_placements == placements + 1  # settled: the quiet path
    return controller


def _versions(world: World) -> dict[str, str | None]:
    return {j.name: j.metadata.resource_version for j in world.store.list_objects("Job", None)}


def test_a_quiet_cycle_uses_the_last_placement_and_writes_nothing(world: World) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    controller = _settled(world, clock, "abc")  # two 8-GPU nodes: c waits
    assert [world.phase(n) for n in "abc"] == ["Running", "Running", "Pending"]
    versions, events = _versions(world), len(world.store.list_events(kind="Job"))
    placements = controller.quiet.reused_placements
    for _ in range(5):
        clock.advance(0.2)
        controller.run_cycle()
    assert controller.quiet.reused_placements == placements + 5
    assert _versions(world) == versions
    assert len(world.store.list_events(kind="Job")) == events


def test_a_job_another_server_submits_starts(world: World, other: ObjectService) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    controller = _settled(world, clock, "a")
    records = controller.quiet.reused_records
    other.apply_text(
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: d, tenant: acme}\n"
        f"spec:\n  queue: research\n  tasks:\n{TASK}"
    )
    for _ in range(2):
        clock.advance(0.2)
        controller.run_cycle()
    assert world.phase("d") == "Running"
    # listed again, the records kept (this controller wrote them): a running job keeps its own
    assert controller.quiet.reused_records > records
    status = world.job("a").status
    assert status is not None and status.phase.value == "Running" and status.tasks[0].node


def test_a_cancel_by_another_server_frees_room_for_the_waiting_job(
    world: World, other: ObjectService
) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    controller = _settled(world, clock, "abc")
    other.cancel("a", "acme")
    for _ in range(4):
        clock.advance(0.2)
        controller.run_cycle()
    assert world.phase("a") == "Cancelled"
    assert world.phase("c") == "Running"


def test_a_quota_raised_by_another_server_lets_the_waiting_job_start(
    world: World, other: ObjectService
) -> None:
    world.setup("{gpu: 8}")
    clock = VirtualClock()
    controller = _settled(world, clock, "ab")  # b waits for the tenant's quota
    assert world.phase("b") == "Pending"
    other.apply_text(
        "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: acme}\nspec: {quota: {gpu: 16}}\n"
    )
    for _ in range(2):
        clock.advance(0.2)
        controller.run_cycle()
    assert world.phase("b") == "Running"


def test_a_job_deleted_by_another_server_is_not_started(world: World, other: ObjectService) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    controller = _settled(world, clock, "abc")
    uid = world.job("c").metadata.uid
    other.delete("Job", "c", "acme")  # never started: deleted at once
    world.service.cancel("a", "acme")
    for _ in range(4):
        clock.advance(0.2)
        controller.run_cycle()
    assert world.store.find("Job", "acme", "c") is None
    assert uid not in controller.tasks.of_jobs_not_in([])  # no record: never placed
    assert world.phase("b") == "Running"


def test_the_jobs_are_listed_again_after_fresh_seconds(world: World) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    controller = _settled(world, clock, "ab")
    reused = controller.quiet.reused_jobs
    clock.advance(0.2)
    controller.run_cycle()
    assert controller.quiet.reused_jobs == reused + 1
    records = controller.quiet.reused_records
    clock.advance(FRESH_SECONDS)
    controller.run_cycle()
    assert controller.quiet.reused_jobs == reused + 1  # listed anew
    assert controller.quiet.reused_records == records  # and the records read anew


def _kept(work: list[JobWork], **changes: object) -> Kept:
    kept = Kept({"Job": (1, 1, None, 1), "Queue": (1, 1, None, 1)}, 7, 3, 0.0, work, None)
    for name, value in changes.items():
        setattr(kept, name, value)
    return kept


@pytest.mark.parametrize(
    ("marks", "token", "inventory", "now", "due", "jobs_kept", "placement_kept"),
    [
        ({"Job": (1, 1, None, 1), "Queue": (1, 1, None, 1)}, 7, 3, 1.0, False, True, True),
        ({"Job": (1, 1, None, 2), "Queue": (1, 1, None, 1)}, 7, 3, 1.0, False, False, False),
        ({"Job": (1, 1, None, 1), "Queue": (1, 1, None, 2)}, 7, 3, 1.0, False, True, False),
        ({"Job": (1, 1, None, 1), "Queue": (1, 1, None, 1)}, 8, 3, 1.0, False, False, False),
        ({"Job": (1, 1, None, 1), "Queue": (1, 1, None, 1)}, 7, 4, 1.0, False, True, False),
        ({"Job": (1, 1, None, 1), "Queue": (1, 1, None, 1)}, 7, 3, 1.0, True, False, False),
        (
            {"Job": (1, 1, None, 1), "Queue": (1, 1, None, 1)},
            7,
            3,
            FRESH_SECONDS,
            False,
            False,
            False,
        ),
    ],
    ids=["same", "job-written", "queue-written", "new-token", "nodes", "session-due", "stale"],
)
def test_what_a_cycle_may_use_again(
    marks: dict[str, tuple[object, ...]],
    token: int,
    inventory: int,
    now: float,
    due: bool,
    jobs_kept: bool,
    placement_kept: bool,
) -> None:
    quiet = QuietCycles()
    placer = object()
    quiet.keep(_kept([], placer=placer))
    kept = quiet.take(marks, token, inventory, now, due)
    assert (kept is not None) == jobs_kept
    assert (kept is not None and kept.placer is placer) == placement_kept
    assert quiet.take(marks, token, inventory, now, due) is None  # taken: kept only once
