"""Preempt and backfill when GPUs are DRA devices (a cluster that publishes ResourceSlices,
where ``gpu: N`` compiles to a claim): the session's what-if eviction of a victim gives back
the devices its claims hold, the preemptor's claim is allocated on them, and a discarded
what-if gives the victim its very devices back. Backfill reservations fit such claims as the
whole GPUs they are (``Task.fit``) and see a running task's claimed GPUs come back when it
ends (``Task.device_gpus``).

One node n1 with 8 H100 devices; now = 1000.
"""

from __future__ import annotations

from dataclasses import replace

from aipaas.api.devices import ResourceClaim
from aipaas.devices.inventory import DeviceInfo, Inventory
from aipaas.devices.ledger import DeviceLedger, gpu_index
from aipaas.devices.shortform import DEFAULT_CLASS, default_class, gpu_claim
from aipaas.devices.topology_files import GpuShape, gpu_node_slices
from aipaas.scheduler.batch.actions.preempt import preempt
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import Eviction, Job, Resources, Snapshot, Task
from aipaas.scheduler.batch.session import Session
from aipaas.scheduler.framework.types import PodRequest
from tests.unit.scheduler.batch.test_batch_preempt_builders import (
    NOW,
    World,
    consistent,
    evicted,
    node,
    run,
    started,
)

GIB = 1024


def ledger() -> DeviceLedger:
    inventory = Inventory(gpu_node_slices("n1", GpuShape(count=8, model="H100", productName="H")))
    return DeviceLedger.from_claims(inventory, {DEFAULT_CLASS: default_class()}, [])


def claimed(key: str, gpus: int, *, priority: int = 0, limit: float | None = None) -> Job:
    """A one-task job whose ``gpu: N`` compiled to a claim (no GPU count in its request)."""
    name = key.split("/", 1)[1]
    claim: ResourceClaim = gpu_claim(f"{name}-w-0-gpu", gpus)
    request = PodRequest(f"{key}/w-0", 1000, GIB, claims=(claim,))
    task = Task(
        "w-0",
        request,
        counted=Resources(gpus * 1000, 1000, GIB),
        fit=PodRequest(f"{key}/w-0", 1000, GIB, gpus, 1000),
    )
    return Job(key, "t", "t/a", [task], priority=priority, time_limit=limit)


def session(jobs: list[Job], running: dict[str, float]) -> tuple[Session, DeviceLedger]:
    """The jobs named in ``running`` run on n1 since the time given (placed in that order)."""
    book = ledger()
    engine = SnapshotCluster([node("n1", 8)], "bestfit", devices=book)
    for job in jobs:
        since = running.get(job.key)
        if since is None:
            continue
        placed = engine.place([t.request for t in job.tasks])
        assert isinstance(placed, list), placed
        for task, placement in zip(job.tasks, placed, strict=True):
            task.placement, task.since = placement, since
            assert placement.devices is not None
            task.device_gpus = tuple(sorted(gpu_of(p.device) for p in placement.devices.picks))
        job.started = since
    queues = World([]).queue("t").queue("t/a").queues
    return Session(Snapshot(NOW, [node("n1", 8)], queues, jobs), engine), book


def gpu_of(device: DeviceInfo) -> int:
    index = gpu_index(device)
    assert index is not None
    return index


def devices_of(book: DeviceLedger, owner: str) -> set[str]:
    return {p.device.name for p in book.reserved[owner].picks}


def held(book: DeviceLedger) -> set[str]:
    return {name for _, _, name in book.in_use.devices}


def test_a_what_if_eviction_frees_the_victims_devices_for_the_preemptor() -> None:
    """low-a (since 0) and low-b (since 500) hold 4 GPU devices each; high (priority 100)
    asks 4: the most recently started, low-b, is the one victim, and high's claim is given
    low-b's very devices."""
    jobs = [claimed("t/low-a", 4), claimed("t/low-b", 4), claimed("t/high", 4, priority=100)]
    s, book = session(jobs, {"t/low-a": 0.0, "t/low-b": 500.0})
    victim_devices = devices_of(book, "t/low-b/w-0")
    decisions = run(preempt, s)
    assert evicted(decisions) == ["t/low-b/w-0"]
    assert started(decisions) == ["t/high/w-0"]
    (start,) = decisions.started
    assert start.placement.devices is not None
    assert {p.device.name for p in start.placement.devices.picks} == victim_devices
    assert devices_of(book, "t/low-a/w-0").isdisjoint(victim_devices)
    consistent(s)


def test_a_discarded_what_if_gives_the_victims_their_very_devices_back() -> None:
    jobs = [claimed("t/low-a", 4), claimed("t/low-b", 4), claimed("t/high", 8, priority=100)]
    s, book = session(jobs, {"t/low-a": 0.0, "t/low-b": 500.0})
    before = {o: devices_of(book, o) for o in ("t/low-a/w-0", "t/low-b/w-0")}
    statement = s.statement()
    for job in jobs[:2]:
        statement.evict(job, job.tasks[0], Eviction(job.key, "w-0", "t/high", "Preempted", "m"))
    assert s.engine.free("n1").gpu_milli == 8000
    placed = s.engine.place([jobs[2].tasks[0].request])
    assert isinstance(placed, list)  # all 8 devices are free in the what-if
    statement.allocate(jobs[2], jobs[2].tasks[0], placed[0])
    statement.discard()
    assert s.engine.free("n1").gpu_milli == 0
    assert len(book.in_use.devices) == 8
    # Held again by their owners: a later what-if frees the same devices again.
    for job in jobs[:2]:
        again = s.statement()
        again.evict(job, job.tasks[0], Eviction(job.key, "w-0", "t/high", "Preempted", "m"))
        assert held(book) == before[jobs[0 if job is jobs[1] else 1].key + "/w-0"]
        again.discard()
    assert len(book.in_use.devices) == 8
    consistent(s)


def test_a_gang_of_claims_is_reserved_where_claimed_gpus_come_back() -> None:
    """run (8 devices, limit 1h, since 0) ends at 3600: gang (8 GPUs by claim) is reserved n1
    from 3600; without ``fit`` or ``device_gpus`` it would get no reservation."""
    gang = claimed("t/gang", 8, limit=600.0)
    jobs = [claimed("t/run", 8, limit=3600.0), gang]
    s, _ = session(jobs, {"t/run": 0.0})
    reservation = s.reservations.reserve(gang)
    assert reservation is not None
    assert (reservation.start, reservation.nodes) == (3600.0, ("n1",))


def test_no_reservation_without_a_count_fit_or_with_claimed_gpus_unknown() -> None:
    gang = claimed("t/gang", 8, limit=600.0)
    gang.tasks[0].fit = None  # claims of its own: the fit cannot see devices
    s, _ = session([claimed("t/run", 8, limit=3600.0), gang], {"t/run": 0.0})
    assert s.reservations.reserve(gang) is None
    gang = claimed("t/gang", 8, limit=600.0)
    run_job = claimed("t/run", 8, limit=3600.0)
    s, _ = session([run_job, gang], {"t/run": 0.0})
    task = run_job.tasks[0]
    assert task.placement is not None
    # Held from an earlier cycle (no devices on its placement) and not told its GPUs: the
    # reservation cannot see them come back.
    task.placement, task.device_gpus = replace(task.placement, devices=None), ()
    assert s.reservations.reserve(gang) is None


def test_a_claimed_start_of_this_cycle_gives_its_gpus_back_when_it_ends() -> None:
    """run starts in this session (its placement has devices, no ``device_gpus``): the gang's
    reservation still sees n1's GPUs come back at run's end, 1000 + 3600."""
    run_job = claimed("t/run", 8, limit=3600.0)
    gang = claimed("t/gang", 8, limit=600.0)
    s, _ = session([run_job, gang], {})
    placed = s.engine.place([run_job.tasks[0].request])
    assert isinstance(placed, list)
    statement = s.statement()
    statement.allocate(run_job, run_job.tasks[0], placed[0])
    statement.commit()
    run_job.ends_at = NOW + 3600.0
    reservation = s.reservations.reserve(gang)
    assert reservation is not None
    assert (reservation.start, reservation.nodes) == (NOW + 3600.0, ("n1",))
