"""Backfill with reservations (EASY, issue 11 item 4): every case worked out by hand.

The usual cluster: n1..n7, 8 GPUs each, now = 600. n1 and n2 run a job without a time limit
(it never ends as far as reservations know); n3 and n4 a job ending at 3600; n5 and four GPUs
of n6 a job ending at 5400; four GPUs of n6 and all of n7 are free. A gang of 4 x 8 GPUs
therefore fits first at 5400 (n3..n6 free by then; n7 comes last in node order).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from aipaas.scheduler.batch.actions.backfill import (
    backfill,
    compress_nodes,
    reservation_message,
    when,
)
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import (
    Job,
    Node,
    QueueNode,
    Reservation,
    Resources,
    Snapshot,
    Task,
)
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.run import decide
from aipaas.scheduler.batch.session import Session
from aipaas.scheduler.framework.types import Placement, PodRequest


def pod(
    name: str, *, gpus: int = 0, milli: int = 1000, cpu: int = 1000, mem: int = 1024
) -> PodRequest:
    return PodRequest(name, cpu, mem, gpu_count=gpus, gpu_milli=milli if gpus else 0)


def job(
    key: str,
    pods: Sequence[PodRequest],
    *,
    queue: str = "t/a",
    limit: float | None = None,
    order: int = 0,
    priority: int = 0,
    topology: str | None = None,
) -> Job:
    tasks = [Task(f"w-{i}", p) for i, p in enumerate(pods)]
    return Job(
        key,
        "t",
        queue,
        tasks,
        priority=priority,
        min_available=len(tasks),
        order=order,
        time_limit=limit,
        topology_required=topology,
    )


def gpus(
    key: str,
    count: int,
    per_task: int = 8,
    *,
    queue: str = "t/a",
    limit: float | None = None,
    order: int = 0,
    topology: str | None = None,
) -> Job:
    """A gang of ``count`` tasks of ``per_task`` whole GPUs each."""
    pods = [pod(f"{key}-{i}", gpus=per_task) for i in range(count)]
    return job(key, pods, queue=queue, limit=limit, order=order, topology=topology)


def queues(**reservations: int) -> dict[str, QueueNode]:
    out = {"": QueueNode("", None, ""), "t": QueueNode("t", "", "t", created=1)}
    for i, name in enumerate(("a", "b"), start=2):
        out[f"t/{name}"] = QueueNode(
            f"t/{name}", "t", "t", created=i, reservations=reservations.get(name, 1)
        )
    return out


def session(
    nodes: list[Node],
    running: Sequence[tuple[Job, list[str], float]],
    pending: list[Job],
    *,
    now: float = 600,
    tree: dict[str, QueueNode] | None = None,
    options: BatchOptions | None = None,
) -> Session:
    """Running jobs: (job, node of each task, started), held in the engine as the caller
    of a session does."""
    engine = SnapshotCluster(nodes)
    for run, where, started in running:
        for task, node in zip(run.tasks, where, strict=True):
            placed = engine.place([task.request], nodes=[node])
            assert isinstance(placed, list), placed
            task.placement, task.since = placed[0], started
        run.started = started
    snapshot = Snapshot(now, nodes, tree or queues(), [r for r, _, _ in running] + pending)
    return Session(snapshot, engine, options)


def cluster(
    count: int = 7, gpus_per_node: int = 8, rack: dict[str, str] | None = None
) -> list[Node]:
    rack = rack or {}
    return [
        Node(
            f"n{i}",
            gpus_per_node,
            64_000,
            512_000,
            labels={"topology.aipaas.dev/rack": rack[f"n{i}"]} if f"n{i}" in rack else {},
        )
        for i in range(1, count + 1)
    ]


def usual(
    *pending: Job,
    now: float = 600,
    tree: dict[str, QueueNode] | None = None,
    options: BatchOptions | None = None,
) -> Session:
    forever = gpus("t/forever", 2)
    short = gpus("t/short", 2, limit=3600)
    mid = job("t/mid", [pod("m0", gpus=8), pod("m1", gpus=4)], limit=5400)
    return session(
        cluster(),
        [(forever, ["n1", "n2"], 0), (short, ["n3", "n4"], 0), (mid, ["n5", "n6"], 0)],
        list(pending),
        now=now,
        tree=tree,
        options=options,
    )


# --- reserve: when and where -----------------------------------------------------------


def test_reservation_at_the_earliest_end_on_the_nodes_the_gang_would_use() -> None:
    big = gpus("t/big", 4)
    s = usual(big)
    assert s.reservations.reserve(big) == Reservation("t/big", 5400, ("n3", "n4", "n5", "n6"))
    assert s.reservations.held == {"t/big": Reservation("t/big", 5400, ("n3", "n4", "n5", "n6"))}


def test_a_smaller_gang_is_reserved_at_the_first_end_that_frees_enough() -> None:
    # At 3600 n3 and n4 are free and n7 is free already: 3 x 8 GPUs fit on n3, n4, n7.
    three = gpus("t/three", 3)
    s = usual(three)
    assert s.reservations.reserve(three) == Reservation("t/three", 3600, ("n3", "n4", "n7"))


def test_ends_at_set_by_the_caller_wins_over_the_time_limit() -> None:
    big = gpus("t/big", 4)
    s = usual(big)
    s.jobs["t/mid"].ends_at = 4000
    reservation = s.reservations.reserve(big)
    assert reservation is not None and reservation.start == 4000


def test_gpu_shares_count_per_gpu_not_as_a_sum() -> None:
    # n1 has 2 GPUs, each half used: 1000 milli free in sum but no whole GPU until the share
    # on GPU 0 ends at 1000.
    nodes = [Node("n1", 2, 16_000, 64_000)]
    a = job("t/a-share", [pod("a", gpus=1, milli=500)], limit=1000)
    b = job("t/b-share", [pod("b", gpus=1, milli=500)], limit=2000)
    whole = job("t/whole", [pod("w", gpus=1)])
    s = session(nodes, [], [a, b, whole], now=0)
    for gpu, share in enumerate((a, b)):
        task = share.tasks[0]
        task.placement = Placement(task.request.name, "n1", 0, (gpu,), 500, 1000, 1024)
        task.since = share.started = 0
        s.engine.hold(task.placement)
    assert s.engine.free("n1").gpu_milli == 1000
    assert s.reservations.reserve(whole) == Reservation("t/whole", 1000, ("n1",))


def test_cpu_counts_too() -> None:
    # The GPUs of n1 are free but a CPU-only job holds all its CPU until 900.
    nodes = [Node("n1", 8, 8_000, 64_000)]
    cpu_hog = job("t/hog", [pod("h", cpu=8_000)], limit=900)
    wants = job("t/wants", [pod("w", gpus=2, cpu=2_000)])
    s = session(nodes, [(cpu_hog, ["n1"], 0)], [wants], now=100)
    assert s.reservations.reserve(wants) == Reservation("t/wants", 900, ("n1",))


def test_a_job_that_can_never_fit_gets_no_reservation() -> None:
    # 8 x 8 GPUs: the cluster has 7 nodes; and 6 x 8 GPUs: n1, n2 never free up.
    too_big, blocked = gpus("t/too-big", 8), gpus("t/blocked", 6)
    s = usual(too_big, blocked)
    assert s.reservations.reserve(too_big) is None
    assert s.reservations.reserve(blocked) is None
    assert s.reservations.held == {}


def test_queue_with_zero_reservations_never_reserves() -> None:
    big, other = gpus("t/big", 4), gpus("t/other", 4, queue="t/b")
    s = usual(big, other, tree=queues(a=0))
    assert s.reservations.reserve(big) is None
    assert s.reservations.allowed_nodes(gpus("t/later", 1)) is None
    assert s.reservations.reserve(other) is not None  # queue b keeps its default of 1


def test_one_reservation_per_queue_by_default_and_the_next_queue_respects_it() -> None:
    first, second = gpus("t/first", 4), gpus("t/second", 4)
    # Queue b's gang of 2 with a 1800 s limit ends by 5400 if it starts at 3600: it may use
    # n3, n4 before the first reservation starts.
    short_b = gpus("t/short-b", 2, queue="t/b", limit=1800)
    s = usual(first, second, short_b)
    assert s.reservations.reserve(first) is not None
    assert s.reservations.reserve(second) is None  # queue a holds its one reservation
    assert s.reservations.reserve(short_b) == Reservation("t/short-b", 3600, ("n3", "n4"))


def test_a_later_reservation_waits_for_the_earlier_one_to_end() -> None:
    # first: n3..n6 from 5400 for 1000 s. Queue b's 2 x 8 GPUs for 3600 s would overlap it
    # at 3600 and 5400 (only n7 outside it), so it starts when first ends, at 6400.
    first = gpus("t/first", 4, limit=1000)
    long_b = gpus("t/long-b", 2, queue="t/b", limit=3600)
    s = usual(first, long_b)
    s.reservations.reserve(first)
    assert s.reservations.reserve(long_b) == Reservation("t/long-b", 6400, ("n3", "n4"))


def test_a_reservation_behind_one_without_time_limit_waits_forever() -> None:
    first = gpus("t/first", 4)  # no limit: holds n3..n6 from 5400 on
    long_b = gpus("t/long-b", 2, queue="t/b", limit=3600)
    s = usual(first, long_b)
    s.reservations.reserve(first)
    assert s.reservations.reserve(long_b) is None


def test_topology_required_reserves_inside_one_rack() -> None:
    # rack r1: n1 free now, n2 free at 1000, n3 at 3000, n4 never. rack r2: n5, n6 at 2000,
    # n7, n8 never. Anywhere, 3 x 8 GPUs fit at 2000 (n1, n2, n5); inside one rack at 3000.
    rack = {f"n{i}": ("r1" if i <= 4 else "r2") for i in range(1, 9)}
    nodes = cluster(8, rack=rack)
    running = [
        (gpus("t/r2", 1, limit=1000), ["n2"], 0),
        (gpus("t/r3", 1, limit=3000), ["n3"], 0),
        (gpus("t/r4", 1), ["n4"], 0),
        (gpus("t/r56", 2, limit=2000), ["n5", "n6"], 0),
        (gpus("t/r78", 2), ["n7", "n8"], 0),
    ]
    anywhere = gpus("t/anywhere", 3)
    in_rack = gpus("t/in-rack", 3, queue="t/b", topology="topology.aipaas.dev/rack")
    s = session(nodes, running, [anywhere, in_rack], now=0)
    assert s.reservations.reserve(anywhere) == Reservation("t/anywhere", 2000, ("n1", "n2", "n5"))
    s.reservations.drop("t/anywhere")
    assert s.reservations.reserve(in_rack) == Reservation("t/in-rack", 3000, ("n1", "n2", "n3"))


def test_topology_required_on_a_label_no_node_has_gets_none() -> None:
    gang = gpus("t/gang", 1, topology="topology.aipaas.dev/block")
    s = usual(gang)
    assert s.reservations.reserve(gang) is None


def test_refresh_moves_a_reservation_earlier_after_an_eviction() -> None:
    big = gpus("t/big", 4)
    s = usual(big)
    s.reservations.reserve(big)
    mid = s.jobs["t/mid"]
    statement = s.statement()
    from aipaas.scheduler.batch.model import Eviction

    for task in list(mid.running_tasks):
        statement.evict(mid, task, Eviction(mid.key, task.name, "t/x", "Preempted", "test"))
    statement.commit()
    s.reservations.refresh()
    # n5, n6 are free now; n3, n4 at 3600: 4 nodes at 3600 (n7 is listed after n6).
    assert s.reservations.held["t/big"] == Reservation("t/big", 3600, ("n3", "n4", "n5", "n6"))


def shares(s: Session, gpus: int) -> None:
    """Give queue t/a and tenant t a fair share of ``gpus`` GPUs (CPU, memory: plenty)."""
    share = Resources(gpus * 1000, 10**9, 10**12)
    s.fair_share.update({"t/a": share, "t": share})


def test_a_gang_above_its_fair_share_is_reserved_for_when_its_queue_is_back_within() -> None:
    # Queue t/a holds 44 GPUs, fair share 40. 3 x 8 GPUs fit at 3600 (n3, n4, n7) but then
    # t/a would hold 28 + 24 = 52 > 40; at 5400 it holds 16 + 24 = 40: reserved then, on the
    # first nodes that fit at 5400.
    three = gpus("t/three", 3)
    s = usual(three)
    shares(s, 40)
    assert s.reservations.reserve(three) == Reservation("t/three", 5400, ("n3", "n4", "n5"))


def test_a_queue_that_stays_above_its_fair_share_gets_no_reservation() -> None:
    # t/forever alone keeps 16 GPUs for good: 16 + 24 > 20 at every time.
    three = gpus("t/three", 3)
    s = usual(three)
    shares(s, 20)
    assert s.reservations.reserve(three) is None


def test_fifo_ignores_fair_share() -> None:
    three = gpus("t/three", 3)
    s = usual(three, options=BatchOptions(fairShare="fifo"))
    shares(s, 20)
    assert s.reservations.reserve(three) == Reservation("t/three", 3600, ("n3", "n4", "n7"))


def test_an_overdue_job_counts_as_ending_now() -> None:
    # mid's limit passed (ends_at 500 < now 600): it is stopped at once, so n5 and n6 count
    # as free now; with n7, 3 x 8 GPUs fit at 600 on n5, n6, n7.
    three = gpus("t/three", 3)
    s = usual(three)
    s.jobs["t/mid"].ends_at = 500
    assert s.reservations.reserve(three) == Reservation("t/three", 600, ("n5", "n6", "n7"))


def test_a_queue_may_hold_several_reservations_when_it_says_so() -> None:
    # Queue a holds 2. two (2 x 8 GPUs, no limit) must keep off n3..n6 from 5400 on, for
    # good: n7 alone is never enough, it gets none. one (1 x 8 GPUs) fits n7 from the first
    # end on (reserve looks from there: it is asked after a refusal now).
    first, two, one = gpus("t/first", 4), gpus("t/two", 2), gpus("t/one", 1)
    s = usual(first, two, one, tree=queues(a=2))
    assert s.reservations.reserve(first) is not None
    assert s.reservations.reserve(two) is None
    assert s.reservations.reserve(one) == Reservation("t/one", 3600, ("n7",))
    assert set(s.reservations.held) == {"t/first", "t/one"}


def test_an_elastic_job_reserves_its_gang_only() -> None:
    # 6 tasks of 8 GPUs, minAvailable 3: the gang of 3 fits at 3600 (n3, n4, n7).
    elastic = gpus("t/elastic", 6)
    elastic.min_available = 3
    s = usual(elastic)
    assert s.reservations.reserve(elastic) == Reservation("t/elastic", 3600, ("n3", "n4", "n7"))


def test_gpu_models_are_respected() -> None:
    # n1 (model a) frees up at 1000, n2 (model b) at 2000: a task asking for model b waits
    # for n2.
    nodes = [
        Node("n1", 1, 8_000, 64_000, gpu_model="a"),
        Node("n2", 1, 8_000, 64_000, gpu_model="b"),
    ]
    on_a, on_b = gpus("t/on-a", 1, 1, limit=1000), gpus("t/on-b", 1, 1, limit=2000)
    wants_b = job(
        "t/wants-b", [PodRequest("wb", 1000, 1024, gpu_count=1, gpu_milli=1000, gpu_models=("b",))]
    )
    s = session(nodes, [(on_a, ["n1"], 0), (on_b, ["n2"], 0)], [wants_b], now=0)
    assert s.reservations.reserve(wants_b) == Reservation("t/wants-b", 2000, ("n2",))


def test_a_run_started_this_cycle_ends_its_limit_from_now_whatever_ends_at_says() -> None:
    # starter (8 GPUs, limit 1000) starts now on n7 with an ends_at left from an earlier run
    # (100, which would read as overdue: free at once). Its run ends at 600 + 1000 = 1600: a
    # one-task 8-GPU job is reserved n7 then, before n3 and n4 free up at 3600.
    starter = gpus("t/starter", 1, limit=1000)
    starter.ends_at = 100
    one = gpus("t/one", 1)
    s = usual(starter, one)
    placed = s.engine.place([starter.tasks[0].request], nodes=["n7"])
    assert isinstance(placed, list)
    statement = s.statement()
    statement.allocate(starter, starter.tasks[0], placed[0])
    statement.commit()
    assert s.reservations.reserve(one) == Reservation("t/one", 1600, ("n7",))


# --- allowed_nodes: who may start now, where ---------------------------------------------


def test_a_short_job_that_ends_before_the_reservation_may_use_any_node() -> None:
    big = gpus("t/big", 4)
    s = usual(big)
    s.reservations.reserve(big)
    assert s.reservations.allowed_nodes(gpus("t/short", 1, 4, limit=1800)) is None
    # Ending exactly at the start (600 + 4800 = 5400) delays nothing either.
    assert s.reservations.allowed_nodes(gpus("t/edge", 1, 4, limit=4800)) is None


def test_a_long_job_and_a_job_without_limit_keep_off_the_reserved_nodes() -> None:
    big = gpus("t/big", 4)
    s = usual(big)
    s.reservations.reserve(big)
    outside = frozenset({"n1", "n2", "n7"})
    assert s.reservations.allowed_nodes(gpus("t/long", 1, 4, limit=4801)) == outside
    assert s.reservations.allowed_nodes(gpus("t/no-limit", 1, 4)) == outside
    assert s.reservations.allowed_nodes(big) is None  # the reserved job itself is free


def test_a_running_elastic_job_is_judged_by_the_end_of_its_run() -> None:
    big = gpus("t/big", 4)
    s = usual(big)
    s.reservations.reserve(big)
    # "t/short" started at 0 with a 3600 s limit: its extras end at 3600, before 5400.
    assert s.reservations.allowed_nodes(s.jobs["t/short"]) is None
    assert s.reservations.allowed_nodes(s.jobs["t/forever"]) == frozenset({"n1", "n2", "n7"})


def test_a_reserved_job_that_starts_releases_its_nodes() -> None:
    # reserve() is asked after a refusal now, so it looks from the first end on: n3 at 3600.
    # Then the job starts after all (a later pass, on n7): its reservation is gone.
    big = gpus("t/big", 1)
    s = usual(big)
    assert s.reservations.reserve(big) == Reservation("t/big", 3600, ("n3",))
    later = gpus("t/no-limit", 1, 4)
    assert s.reservations.allowed_nodes(later) == frozenset({"n1", "n2", "n4", "n5", "n6", "n7"})
    placed = s.engine.place([big.tasks[0].request], nodes=["n7"])
    assert isinstance(placed, list)
    statement = s.statement()
    statement.allocate(big, big.tasks[0], placed[0])
    statement.commit()
    assert s.reservations.allowed_nodes(later) is None
    assert s.reservations.held == {}


def test_a_job_ending_between_two_reservations_may_use_the_later_ones_nodes() -> None:
    # first: n3..n6 from 5400 (1000 s); queue b's later: n3, n4 from 6400. A job ending at
    # 6000 would delay first (5400 < 6000) but not later (6000 <= 6400).
    first = gpus("t/first", 4, limit=1000)
    later = gpus("t/later", 2, queue="t/b", limit=3600)
    s = usual(first, later)
    s.reservations.reserve(first)
    s.reservations.reserve(later)
    assert s.reservations.allowed_nodes(gpus("t/x", 1, 1, limit=5400)) == frozenset(
        {"n1", "n2", "n7"}
    )
    assert s.reservations.allowed_nodes(gpus("t/y", 1, 1, limit=4800)) is None


# --- the backfill action -----------------------------------------------------------------


def test_backfill_starts_short_jobs_anywhere_long_ones_outside_and_reserves_the_first() -> None:
    big = gpus("t/big", 4, order=1)
    short = gpus("t/short-4", 1, 4, order=2, limit=1800)  # fits n6's 4 free GPUs, ends 2400
    long = gpus("t/long-8", 1, 8, order=3, limit=7200)  # only n7 is outside the reservation
    no_limit = gpus("t/no-limit", 1, 8, order=4)  # n7 is taken by then: it waits
    s = usual(big, short, long, no_limit)
    backfill(s)
    started = {(x.job, x.placement.node) for x in s.decisions.started}
    assert started == {("t/short-4", "n6"), ("t/long-8", "n7")}
    assert s.reservations.held == {"t/big": Reservation("t/big", 5400, ("n3", "n4", "n5", "n6"))}
    assert s.waiting["t/big"] == ("Reserved", "reserved: starts at t=5400s on n3-n6")
    assert "t/no-limit" in s.waiting and s.waiting["t/no-limit"][0] != "Reserved"


def test_backfill_never_starts_a_job_without_limit_on_reserved_nodes() -> None:
    # Only n6's 4 GPUs are free apart from n7, which a long job takes first: the 4-GPU job
    # without a limit could fit n6 but n6 is reserved.
    big = gpus("t/big", 4, order=1)
    taker = gpus("t/taker", 1, 8, order=2, limit=9999)
    no_limit = gpus("t/no-limit-4", 1, 4, order=3)
    s = usual(big, taker, no_limit)
    backfill(s)
    assert {x.job for x in s.decisions.started} == {"t/taker"}
    assert s.waiting["t/no-limit-4"] == (
        "Reserved",
        "n3-n6 are reserved for t/big from t=5400s; it fits there now but has no time limit",
    )


def test_backfill_with_zero_reservations_lets_everything_start_where_it_fits() -> None:
    big = gpus("t/big", 4, order=1)
    no_limit = gpus("t/no-limit-4", 1, 4, order=2)
    s = usual(big, no_limit, tree=queues(a=0))
    backfill(s)
    assert s.reservations.held == {}
    assert {x.job for x in s.decisions.started} == {"t/no-limit-4"}
    assert s.waiting["t/big"][0] != "Reserved"


def test_a_whole_cycle_reserves_the_big_gang_of_a_full_single_queue() -> None:
    # Fair share of t/a is the whole cluster (56 GPUs): allocate refuses big (44 + 32 > 56)
    # for fair share, starts the 4-GPU job on n6 and the 8-GPU one on n7 (both within share);
    # t/a then holds 56, so the job without a limit waits -- for room: a share of the whole
    # cluster is no limit of its own (Unschedulable, not FairShare). big is reserved for 5400,
    # when its queue holds 24 (all three time-limited jobs ended) and n3..n6 are free.
    big = gpus("t/big", 4, order=1)
    short = gpus("t/short-4", 1, 4, order=2, limit=1800)
    long = gpus("t/long-8", 1, 8, order=3, limit=7200)
    no_limit = gpus("t/no-limit", 1, 4, order=4)
    s = usual(big, short, long, no_limit)
    decisions = decide(s)
    assert {(x.job, x.placement.node) for x in decisions.started} == {
        ("t/short-4", "n6"),
        ("t/long-8", "n7"),
    }
    assert decisions.reservations == {"t/big": Reservation("t/big", 5400, ("n3", "n4", "n5", "n6"))}
    assert decisions.reasons["t/big"] == ("Reserved", "reserved: starts at t=5400s on n3-n6")
    assert decisions.reasons["t/no-limit"][0] == "Unschedulable"


def test_strict_order_lets_jobs_behind_the_blocker_through_only_where_it_is_not_delayed() -> None:
    # Slurm: strict FIFO, then backfill. big blocks the queue and is reserved; the short job
    # behind it starts on n6 (ends 2400 <= 5400), the long one on n7 (outside n3..n6), the
    # job without a limit finds no room left.
    options = BatchOptions(
        actions=("allocate", "backfill"), fairShare="fifo", jobOrder="fifo", strictOrder=True
    )
    big = gpus("t/big", 4, order=1)
    short = gpus("t/short-4", 1, 4, order=2, limit=1800)
    long = gpus("t/long-8", 1, 8, order=3, limit=7200)
    no_limit = gpus("t/no-limit", 1, 4, order=4)
    s = usual(big, short, long, no_limit, options=options)
    decisions = decide(s)
    assert {(x.job, x.placement.node) for x in decisions.started} == {
        ("t/short-4", "n6"),
        ("t/long-8", "n7"),
    }
    assert decisions.reasons["t/big"] == ("Reserved", "reserved: starts at t=5400s on n3-n6")
    # n6's 4 free GPUs went to the short job: nothing fits it now, reservation or not.
    assert decisions.reasons["t/no-limit"][0] == "Unschedulable"


def test_a_profile_without_backfill_holds_no_reservations() -> None:
    options = BatchOptions(actions=("allocate",), fairShare="fifo", jobOrder="fifo")
    big = gpus("t/big", 4, order=1)
    no_limit = gpus("t/no-limit", 1, 4, order=2)
    s = usual(big, no_limit, options=options)
    decisions = decide(s)
    assert decisions.reservations == {}
    assert [(x.job, x.placement.node) for x in decisions.started] == [("t/no-limit", "n6")]


# --- words ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["n3", "n4", "n5", "n6"], "n3-n6"),
        (["n1", "n3", "n4"], "n1,n3-n4"),
        (["n9", "n10", "n11"], "n9-n11"),
        (["a", "b"], "a,b"),
        (["gpu-a1", "gpu-b2"], "gpu-a1,gpu-b2"),
        (["node08", "node09", "node10", "gpu1"], "node08-node10,gpu1"),
    ],
)
def test_node_lists_are_compressed(names: list[str], text: str) -> None:
    assert compress_nodes(names) == text


def test_reservation_message_on_virtual_and_wall_clocks() -> None:
    reservation = Reservation("t/big", 5400, ("n3", "n4", "n5", "n6"))
    assert reservation_message(reservation, 600) == "reserved: starts at t=5400s on n3-n6"
    epoch = datetime(2026, 11, 23, 14, 5, tzinfo=UTC).timestamp()
    wall = Reservation("t/big", epoch, ("n1",))
    assert reservation_message(wall, epoch - 3600) == "reserved: starts at 14:05 UTC on n1"
    assert when(90.5, 0) == "t=90.5s"
