"""The allocate and enqueue actions and the session's order, case by case; every expected
decision is worked out by hand in the test's docstring."""

from __future__ import annotations

import pytest

from aipaas.scheduler.batch.model import Job, Reservation, Resources
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.ordering import ordered
from aipaas.scheduler.batch.reservations import Reservations
from aipaas.scheduler.batch.run import decide
from aipaas.scheduler.batch.session import Session
from tests.unit.scheduler.batch.batch_alloc_builders import (
    gpu_quota,
    job,
    node,
    queue,
    session,
    started,
    tree,
)

ONLY = BatchOptions(actions=("enqueue", "allocate"))
ALLOCATE = BatchOptions(actions=("allocate",))


def share(gpu: float, cpu: int = 10**6) -> Resources:
    """A fair share of ``gpu`` GPUs with CPU and memory that never limit."""
    return Resources(int(gpu * 1000), cpu * 1000, 10**9)


def two_queues(a: float, b: float) -> dict[str, Resources]:
    return {"t": share(a + b), "t/a": share(a), "t/b": share(b)}


AB = tree(queue("t"), queue("t/a"), queue("t/b"))


# --- order -------------------------------------------------------------------------------


def test_the_queue_furthest_below_its_fair_share_goes_first() -> None:
    """8 GPUs; t/a runs 6 of its share of 8 (0.75), t/b none of 8 (0). a2 was submitted
    first, but b holds least against its share: b1 takes the last 2 GPUs; a2 finds no room."""
    a1 = job("t/a1", "t/a", tasks=6)
    a2 = job("t/a2", "t/a", tasks=2)
    b1 = job("t/b1", "t/b", tasks=2)
    s = session([node("n1")], AB, [a1, a2, b1], {"t/a1": ["n1"] * 6}, fair_share=two_queues(8, 8))
    d = decide(s)
    assert started(d) == {"t/b1": ["w-0", "w-1"]}
    assert d.reasons["t/a2"][0] == "Unschedulable"
    assert "no room for its gang of 2 tasks" in d.reasons["t/a2"][1]


def test_starts_alternate_between_equal_queues_as_holdings_change() -> None:
    """Equal shares, nothing running, room for 4 one-GPU jobs; a's jobs were all submitted
    first. After each start the queue that started holds more: a, b, a, b."""
    a = [job(f"t/a{i}", "t/a") for i in range(3)]
    b = [job(f"t/b{i}", "t/b") for i in range(3)]
    s = session([node("n1", gpu=4)], AB, a + b, fair_share=two_queues(4, 4), options=ONLY)
    d = decide(s)
    assert [x.job for x in d.started] == ["t/a0", "t/b0", "t/a1", "t/b1"]


def test_dominant_resource_decides_under_drf_and_gpu_only_under_proportion() -> None:
    """a holds 1 GPU of 4 (0.25) and 30 of 32 cores (0.94): dominant 0.94. b holds 2 of 4
    GPUs (0.5) and 1 core (0.03): dominant 0.5. DRF puts b first; proportion (GPU only)
    puts a first."""
    shares = {"t": Resources(8000, 64000, 10**9), "t/a": Resources(4000, 32000, 10**9)}
    shares["t/b"] = Resources(4000, 32000, 10**9)
    jobs = [
        job("t/a1", "t/a", gpu=1, cpu=30),
        job("t/b1", "t/b", tasks=2, gpu=1, cpu=0),
        job("t/a2", "t/a", gpu=0, cpu=1),
        job("t/b2", "t/b", gpu=0, cpu=1),
    ]
    running = {"t/a1": ["n1"], "t/b1": ["n1", "n1"]}
    for mode, first in (("drf", "t/b2"), ("proportion", "t/a2")):
        s = session(
            [node("n1")],
            AB,
            jobs,
            running,
            fair_share=shares,
            options=BatchOptions(fairShare=mode),
        )
        pending = [j for j in jobs if not j.is_running]
        assert next(iter(ordered(s, pending))).key == first, mode


def test_proportion_compares_leaves_flat_while_drf_descends_the_tree() -> None:
    """t1/x holds 7 of 8, t1/y 0 of 1: tenant t1 holds 7 of 9 (0.78); t2/z holds 6 of 8
    (0.75). DRF picks tenant t2 first, so z; proportion looks at leaves: y (0) first."""
    queues = tree(queue("t1"), queue("t1/x"), queue("t1/y"), queue("t2"), queue("t2/z"))
    shares = {"t1": share(9), "t1/x": share(8), "t1/y": share(1), "t2": share(8)}
    shares["t2/z"] = share(8)
    x = job("t1/x", "t1/x", tasks=7)
    z = job("t2/z", "t2/z", tasks=6)
    y1 = job("t1/y1", "t1/y")
    z1 = job("t2/z1", "t2/z")
    nodes = [node("n1"), node("n2")]
    running = {"t1/x": ["n1"] * 7, "t2/z": ["n2"] * 6}
    for mode, first in (("drf", "t2/z1"), ("proportion", "t1/y1")):
        s = session(
            nodes,
            queues,
            [x, z, y1, z1],
            running,
            fair_share=shares,
            options=BatchOptions(fairShare=mode),
        )
        assert next(iter(ordered(s, [y1, z1]))).key == first, mode


def test_higher_priority_first_within_a_queue_then_submission_order() -> None:
    """One queue, room for 2 GPUs: p0 (priority 0, first), p10a and p10b (priority 10). The
    two of priority 10 start in submission order; p0 waits."""
    p0 = job("t/p0", "t/a")
    p10a = job("t/p10a", "t/a", priority=10)
    p10b = job("t/p10b", "t/a", priority=10)
    shares = two_queues(8, 8)
    s = session([node("n1", gpu=2)], AB, [p0, p10a, p10b], fair_share=shares, options=ONLY)
    d = decide(s)
    assert [x.job for x in d.started] == ["t/p10a", "t/p10b"]
    assert d.reasons["t/p0"][0] == "Unschedulable"


def test_job_order_fifo_ignores_priority() -> None:
    """jobOrder fifo: submission order only; p0 came first and takes the one GPU."""
    p0 = job("t/p0", "t/a")
    p10 = job("t/p10", "t/a", priority=10)
    s = session([node("n1", gpu=1)], AB, [p0, p10], options=BatchOptions(jobOrder="fifo"))
    assert started(decide(s)) == {"t/p0": ["w-0"]}


def test_higher_priority_sibling_first_then_the_queue_created_first() -> None:
    """Three queues holding nothing with equal shares; room for 2 GPUs. c has priority 5:
    its job first; a and b tie, a was created first. b's job, submitted first, waits."""
    queues = tree(queue("t"), queue("t/a"), queue("t/b"), queue("t/c", priority=5))
    b1 = job("t/b1", "t/b")
    a1 = job("t/a1", "t/a")
    c1 = job("t/c1", "t/c")
    shares = {"t": share(6), "t/a": share(2), "t/b": share(2), "t/c": share(2)}
    s = session([node("n1", gpu=2)], queues, [b1, a1, c1], fair_share=shares, options=ONLY)
    d = decide(s)
    assert [x.job for x in d.started] == ["t/c1", "t/a1"]
    assert "t/b1" in d.reasons


def test_ordering_ten_thousand_jobs_in_two_hundred_queues_keeps_each_queues_order() -> None:
    """10,000 pending jobs in 200 queues of 20 tenants all come out once, and within each queue
    higher priority first, then the earlier submission (how fast: benchmarks/controller_cycle.py,
    not a timed test)."""
    names = [queue(f"t{i}") for i in range(20)]
    names += [queue(f"t{i}/q{k}") for i in range(20) for k in range(10)]
    queues = tree(*names)
    jobs = [
        job(f"t{n % 20}/j{n}", f"t{n % 20}/q{n % 200 // 20}", priority=n % 3) for n in range(10_000)
    ]
    shares = {key: share(8) for key in queues}
    s = session([node("n1")], queues, jobs, fair_share=shares)
    s.fair_share = shares
    out = list(ordered(s, jobs))
    assert len({j.key for j in out}) == len(out) == 10_000
    by_queue: dict[str, list[tuple[int, int]]] = {}
    for j in out:
        by_queue.setdefault(j.queue, []).append((-j.priority, j.order))
    assert len(by_queue) == 200
    assert all(seen == sorted(seen) for seen in by_queue.values())


# --- quota and enqueue -------------------------------------------------------------------


def test_a_queue_at_its_quota_refuses_with_numbers() -> None:
    """t/a has a quota of 4 GPUs and runs 3; a 2-GPU job would make 5: QuotaExceeded."""
    queues = tree(queue("t"), queue("t/a", quota=gpu_quota(4)))
    a1 = job("t/a1", "t/a", tasks=3)
    a2 = job("t/a2", "t/a", tasks=2)
    s = session([node("n1")], queues, [a1, a2], {"t/a1": ["n1"] * 3}, options=ONLY)
    calls = _record_reservations(s)
    d = decide(s)
    assert d.started == []
    assert calls == []  # a quota does not wait for room: no reservation
    assert d.reasons["t/a2"] == (
        "QuotaExceeded",
        "queue t/a is at its quota of 4 GPUs (gpu: holds 3, needs 2 more)",
    )


def test_a_tenant_quota_limits_its_queues() -> None:
    """Tenant t has a quota of 2 GPUs; its queues none. a1 (2 GPUs; a created first) starts;
    b1 (1) would take the tenant to 3: QuotaExceeded naming the tenant."""
    queues = tree(queue("t", quota=gpu_quota(2)), queue("t/a"), queue("t/b"))
    a1 = job("t/a1", "t/a", tasks=2)
    b1 = job("t/b1", "t/b")
    shares = {"t": share(2), "t/a": share(2), "t/b": share(2)}
    d = decide(session([node("n1")], queues, [a1, b1], fair_share=shares, options=ONLY))
    assert started(d) == {"t/a1": ["w-0", "w-1"]}
    assert d.reasons["t/b1"][0] == "QuotaExceeded"
    assert d.reasons["t/b1"][1].startswith("tenant t is at its quota of 2 GPUs")


def test_enqueue_keeps_out_a_gang_larger_than_its_quota() -> None:
    """A 2 x 8-GPU gang in a queue whose quota is 8 GPUs can never start: it waits at enqueue
    (allocate never tries it) with the numbers; the small job behind it starts."""
    queues = tree(queue("t"), queue("t/a", quota=gpu_quota(8)))
    big = job("t/big", "t/a", tasks=2, gpu=8)
    small = job("t/small", "t/a")
    d = decide(session([node("n1"), node("n2")], queues, [big, small], options=ONLY))
    assert started(d) == {"t/small": ["w-0"]}
    assert d.reasons["t/big"] == (
        "QuotaExceeded",
        "its gang of 2 tasks needs 16 GPUs (gpu), more than the quota of queue t/a (8 GPUs); "
        "it cannot start unless the quota grows",
    )


def test_enqueue_keeps_out_gangs_larger_than_the_cluster_or_any_node() -> None:
    """8-GPU nodes, two of them: a 3 x 8 gang exceeds the cluster (16 GPUs); a 16-GPU task
    exceeds every node."""
    huge = job("t/huge", "t/a", tasks=3, gpu=8)
    wide = job("t/wide", "t/a", gpu=16)
    d = decide(session([node("n1"), node("n2")], AB, [huge, wide], options=ONLY))
    assert d.started == []
    assert d.reasons["t/huge"] == (
        "Unschedulable",
        "its gang needs 24 GPUs (gpu); the whole cluster has 16",
    )
    assert d.reasons["t/wide"][0] == "Unschedulable"
    assert "no node of the cluster is that large" in d.reasons["t/wide"][1]


# --- fair share and borrowing ------------------------------------------------------------


def test_a_queue_at_its_fair_share_waits_while_others_use_the_room() -> None:
    """8 GPUs; t/a holds its share of 4, t/b holds 0 of 4. a2 (2 GPUs, first) would take a to
    6 > 4: FairShare. b1 (4) starts within b's share. Nothing idle is left to borrow: a2 keeps
    the fair-share reason. It asks for a reservation at once (one starting when its queue is
    back within its share and room is there), so that later jobs of the pass keep clear."""
    a1 = job("t/a1", "t/a", tasks=4)
    a2 = job("t/a2", "t/a", tasks=2)
    b1 = job("t/b1", "t/b", tasks=4)
    s = session(
        [node("n1")],
        AB,
        [a1, a2, b1],
        {"t/a1": ["n1"] * 4},
        fair_share=two_queues(4, 4),
        options=ONLY,
    )
    calls = _record_reservations(s)
    d = decide(s)
    assert started(d) == {"t/b1": ["w-0", "w-1", "w-2", "w-3"]}
    assert d.reasons["t/a2"] == (
        "FairShare",
        "fair share of queue t/a is 4 GPUs and it holds 4; the job needs 2 more",
    )
    assert calls == ["t/a2"]
    assert s.borrowed == set()


def test_idle_capacity_is_borrowed_after_the_first_pass() -> None:
    """As above without b1: after the first pass 4 GPUs are idle, so a2 borrows 2 of them; the
    report shows t/a borrowing 2 GPUs above its share of 4."""
    a1 = job("t/a1", "t/a", tasks=4)
    a2 = job("t/a2", "t/a", tasks=2)
    s = session([node("n1")], AB, [a1, a2], {"t/a1": ["n1"] * 4}, fair_share=two_queues(4, 4))
    d = decide(s)
    assert started(d) == {"t/a2": ["w-0", "w-1"]}
    assert s.borrowed == {"t/a2"}
    assert d.queues["t/a"].borrowed.gpu_milli == 2000
    assert d.queues["t/a"].allocated.gpu_milli == 6000
    assert "t/a2" not in d.reasons


def test_an_ancestor_at_its_fair_share_refuses_the_first_pass() -> None:
    """Tenant t's share is 2 GPUs, t/a's 8: a1 (3 GPUs) fits a's share but would take t to 3.
    Room is idle, so it starts in the borrowing pass."""
    shares = {"t": share(2), "t/a": share(8), "t/b": share(0)}
    a1 = job("t/a1", "t/a", tasks=3)
    s = session([node("n1")], AB, [a1], fair_share=shares, options=ALLOCATE)
    d = decide(s)
    assert started(d) == {"t/a1": ["w-0", "w-1", "w-2"]}
    assert s.borrowed == {"t/a1"}


def test_within_share_jobs_go_before_borrowers_even_if_submitted_later() -> None:
    """t/a holds 4 of 4; a2 (first, 2 GPUs) is refused for fair share; b1 (3 GPUs) starts
    within b's share; then a2 borrows what is still idle (1 GPU): not enough, it waits."""
    a1 = job("t/a1", "t/a", tasks=4)
    a2 = job("t/a2", "t/a", tasks=2)
    b1 = job("t/b1", "t/b", tasks=3)
    s = session([node("n1")], AB, [a1, a2, b1], {"t/a1": ["n1"] * 4}, fair_share=two_queues(4, 4))
    d = decide(s)
    assert started(d) == {"t/b1": ["w-0", "w-1", "w-2"]}
    assert d.reasons["t/a2"][0] == "FairShare"


# --- gangs, elastic, strict order ----------------------------------------------------------


def test_a_gang_starts_whole_or_not_at_all_and_smaller_jobs_pass_it() -> None:
    """4 GPUs, r runs on one: 3 free; g needs 4 together: nothing of it starts (3 of 4 would
    fit). s1 (1 GPU) behind it starts: without strict order a blocked gang does not block
    others. g asks for a reservation (no room), s1 does not."""
    r = job("t/r", "t/a")
    g = job("t/g", "t/a", tasks=4)
    s1 = job("t/s1", "t/a")
    shares = two_queues(8, 8)
    s = session(
        [node("n1", gpu=4)], AB, [r, g, s1], {"t/r": ["n1"]}, fair_share=shares, options=ONLY
    )
    calls = _record_reservations(s)
    d = decide(s)
    assert started(d) == {"t/s1": ["w-0"]}
    assert d.reasons["t/g"][0] == "Unschedulable"
    assert "gang: 3 of 4 pods fit" in d.reasons["t/g"][1]
    assert calls == ["t/g"]


def test_strict_fifo_stops_at_the_first_job_that_cannot_start() -> None:
    """fifo + strictOrder, 3 GPUs: f1 (2) starts, f2 (2) finds 1 free and blocks; f3 (1)
    would fit but waits behind f2."""
    f1 = job("t/f1", "t/a", tasks=2)
    f2 = job("t/f2", "t/b", tasks=2)
    f3 = job("t/f3", "t/a")
    options = BatchOptions(actions=("allocate",), fairShare="fifo", strictOrder=True)
    d = decide(session([node("n1", gpu=3)], AB, [f1, f2, f3], options=options))
    assert started(d) == {"t/f1": ["w-0", "w-1"]}
    assert d.reasons["t/f2"][0] == "Unschedulable"
    assert d.reasons["t/f3"][0] == "StrictOrder"
    assert d.reasons["t/f3"][1].startswith("behind t/f2 in strict order")


def test_fifo_orders_across_queues_by_priority_then_submission() -> None:
    """fifo without strict order, 2 GPUs: one global order, queues ignored: hi (priority 9, in
    b) first, then a1 (submitted before a2)."""
    a1 = job("t/a1", "t/a")
    a2 = job("t/a2", "t/a")
    hi = job("t/hi", "t/b", priority=9)
    options = BatchOptions(actions=("allocate",), fairShare="fifo")
    d = decide(session([node("n1", gpu=2)], AB, [a1, a2, hi], options=options))
    assert [x.job for x in d.started] == ["t/hi", "t/a1"]


def test_an_elastic_job_starts_its_gang_then_extras_as_room_allows() -> None:
    """e: 4 tasks, minAvailable 2; 3 GPUs free: the gang (w-0, w-1) and one extra (w-2)."""
    e = job("t/e", "t/a", tasks=4, min_available=2)
    d = decide(session([node("n1", gpu=3)], AB, [e], options=ONLY))
    assert started(d) == {"t/e": ["w-0", "w-1", "w-2"]}


def test_extras_come_after_every_gang_of_the_pass() -> None:
    """e (first; 4 tasks, minAvailable 1) and g (a 2-GPU gang); 3 GPUs: e's gang (1), g (2),
    then no room for e's extras."""
    e = job("t/e", "t/a", tasks=4, min_available=1)
    g = job("t/g", "t/a", tasks=2)
    d = decide(session([node("n1", gpu=3)], AB, [e, g], options=ONLY))
    assert started(d) == {"t/e": ["w-0"], "t/g": ["w-0", "w-1"]}


def test_extras_stay_within_fair_share_and_never_borrow() -> None:
    """t/a's share is 2 GPUs; e has 4 tasks, minAvailable 1; 8 GPUs idle. Gang w-0, one extra
    w-1 (a holds 2 = its share); the rest would go above the share: they wait though idle."""
    e = job("t/e", "t/a", tasks=4, min_available=1)
    d = decide(session([node("n1")], AB, [e], fair_share=two_queues(2, 2), options=ONLY))
    assert started(d) == {"t/e": ["w-0", "w-1"]}


def test_extras_of_a_running_job_start_one_by_one() -> None:
    """r runs w-0 of 4 (minAvailable 1) on n1; 2 GPUs free: w-1 and w-2 start."""
    r = job("t/r", "t/a", tasks=4, min_available=1)
    s = session([node("n1", gpu=3)], AB, [r], {"t/r": ["n1"]}, options=ONLY)
    assert started(decide(s)) == {"t/r": ["w-1", "w-2"]}


def test_extras_stay_within_quota() -> None:
    """Quota 2 GPUs: the running elastic job's one extra reaches it; the next waits."""
    queues = tree(queue("t"), queue("t/a", quota=gpu_quota(2)))
    r = job("t/r", "t/a", tasks=4, min_available=1)
    s = session([node("n1")], queues, [r], {"t/r": ["n1"]}, options=ONLY)
    assert started(decide(s)) == {"t/r": ["w-1"]}


def test_every_waiting_job_has_a_reason_and_started_jobs_none() -> None:
    jobs = [job(f"t/j{i}", "t/a", tasks=3) for i in range(4)]
    d = decide(session([node("n1")], AB, jobs, options=ONLY))
    assert set(started(d)) == {"t/j0", "t/j1"}
    assert set(d.reasons) == {"t/j2", "t/j3"}
    assert all(message for _, message in d.reasons.values())


def _record_reservations(s: Session) -> list[str]:
    """Replace the session's reservations with one that records who asked."""
    calls: list[str] = []

    class Recording(Reservations):
        def reserve(self, job: Job) -> Reservation | None:
            calls.append(job.key)
            return None

    s.reservations = Recording(s)
    return calls


@pytest.fixture(autouse=True)
def _no_leaks() -> None:
    """Every case builds its own jobs (builders number submissions globally)."""


def test_a_resource_the_cluster_does_not_measure_has_no_fair_share() -> None:
    """The job asks 20 GiB of GPU memory; the engine measures none (capacity 0), so the fair
    share of GPU memory is 0: that must not refuse it (nor make it a borrower)."""
    g = job("t/g", "t/a", tasks=2)
    for task in g.tasks:
        task.gpu_memory_mib = 20 * 1024
    shares = {"t": Resources(8000, 10**6, 10**9), "t/a": Resources(8000, 10**6, 10**9)}
    s = session([node("n1")], AB, [g], fair_share=shares, options=ONLY)
    d = decide(s)
    assert started(d) == {"t/g": ["w-0", "w-1"]}
    assert s.borrowed == set()


# --- with the fair shares the session computes ---------------------------------------------


def test_computed_shares_split_a_full_cluster_evenly_between_equal_queues() -> None:
    """8 GPUs, equal weights; a submitted 8 one-GPU jobs before b's 8. The shares are 4 and 4
    (demand 8 each): a and b alternate, 4 each; the rest wait for fair share."""
    a = [job(f"t/a{i}", "t/a") for i in range(8)]
    b = [job(f"t/b{i}", "t/b") for i in range(8)]
    d = decide(session([node("n1")], AB, a + b, options=ONLY))
    per_queue = {"t/a": 0, "t/b": 0}
    for start in d.started:
        per_queue[start.job[:3]] += 1
    assert per_queue == {"t/a": 4, "t/b": 4}
    assert d.queues["t/a"].fair_share.gpu_milli == 4000
    assert {code for code, _ in d.reasons.values()} == {"FairShare"}


def test_computed_shares_give_what_one_queue_leaves_to_the_other() -> None:
    """b asks only 1 GPU: its share is 1, a's 7 (8 - 1): a starts 7 jobs, b its one; nothing
    borrowed."""
    a = [job(f"t/a{i}", "t/a") for i in range(9)]
    b1 = job("t/b1", "t/b")
    s = session([node("n1")], AB, [*a, b1], options=ONLY)
    d = decide(s)
    assert len(d.started) == 8
    assert "t/b1" in started(d)
    assert s.borrowed == set()
    assert d.queues["t/a"].fair_share.gpu_milli == 7000


def test_no_room_is_remembered_only_until_something_is_given_back() -> None:
    """The placer remembers that a 2-GPU gang found no room; once a running task is evicted
    (its GPU given back), the same shape is tried again and fits."""
    from aipaas.scheduler.batch.actions.allocate import Placer
    from aipaas.scheduler.batch.model import Eviction

    r = job("t/r", "t/a", tasks=2)
    g1 = job("t/g1", "t/a", tasks=2)
    g2 = job("t/g2", "t/a", tasks=2)
    s = session([node("n1", gpu=3)], AB, [r, g1, g2], {"t/r": ["n1", "n1"]})
    placer = Placer(s)
    refused = placer.gang(g1, g1.tasks)
    assert not isinstance(refused, list)
    assert placer.known_no_room(g2, g2.tasks)
    statement = s.statement()
    statement.evict(r, r.tasks[0], Eviction("t/r", "w-0", "t/g2", "Preempted", "test"))
    assert not placer.known_no_room(g2, g2.tasks)
    placed = placer.gang(g2, g2.tasks)
    assert isinstance(placed, list) and len(placed) == 2


def test_resources_of_sums_what_each_task_counts() -> None:
    """The fast sum reads requests directly: it must equal the tasks' own ``resources``,
    including a task whose ``counted`` amount overrides its request (DRA claims)."""
    from aipaas.scheduler.batch.session import resources_of

    j = job("t/j", "t/a", tasks=3, gpu=2, cpu=4)
    j.tasks[1].gpu_memory_mib = 512
    j.tasks[2].counted = Resources(3000, 1000, 10, 7)
    expected = Resources()
    for task in j.tasks:
        expected = expected + task.resources
    assert resources_of(j.tasks) == expected == Resources(7000, 9000, 2058, 519)
    assert resources_of([]) == Resources()


def test_the_order_sees_holdings_fall_in_a_queue_it_does_not_order() -> None:
    """t1/b runs 6 GPUs (tenant t1: 6 of 8, 0.75); t2/c runs 4 of 8 (0.5). Ordering a's and c's
    pending jobs: c1 first. Then b's job is evicted (t1 holds 0): t1's a1 comes next, although
    t1/b has no job in this order."""
    queues = tree(queue("t1"), queue("t1/a"), queue("t1/b"), queue("t2"), queue("t2/c"))
    shares = {"t1": share(8), "t1/a": share(4), "t1/b": share(4), "t2": share(8)}
    shares["t2/c"] = share(8)
    b = job("t1/b", "t1/b", tasks=6)
    c = job("t2/c", "t2/c", tasks=4)
    a1, a2 = job("t1/a1", "t1/a"), job("t1/a2", "t1/a")
    c1, c2 = job("t2/c1", "t2/c"), job("t2/c2", "t2/c")
    running = {"t1/b": ["n1"] * 6, "t2/c": ["n2"] * 4}
    s = session(
        [node("n1"), node("n2")], queues, [b, c, a1, a2, c1, c2], running, fair_share=shares
    )
    order = ordered(s, [a1, a2, c1, c2])
    assert order.pop() is c1
    s.account(b, b.allocated(), sign=-1)
    assert order.pop() is a1


def test_a_job_in_a_queue_that_does_not_exist_waits_and_says_so() -> None:
    lost = job("t/lost", "t/nowhere")
    d = decide(session([node("n1")], AB, [lost], options=ONLY))
    assert d.started == []
    assert d.reasons["t/lost"] == ("Unschedulable", "its queue t/nowhere does not exist")
