"""A queue's head keeps its place (batch/head_hold.py): a job that cannot start but could by
preemption holds back the lower-priority jobs of its queue. Every expected decision is worked
out by hand in the test's docstring."""

from __future__ import annotations

from aipaas.scheduler.batch.model import Decisions, Job, Resources
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.run import decide
from tests.unit.scheduler.batch.batch_alloc_builders import job, node, queue, session, started, tree

HOLD = BatchOptions(actions=("enqueue", "allocate", "preempt"))
NO_HOLD = BatchOptions(actions=("enqueue", "allocate", "preempt"), holdForHead=False)
Q = tree(queue("t"), queue("t/q"))


def _three(r_priority: int, *, preemptible: bool = True) -> tuple[list[Job], dict[str, list[str]]]:
    """4 GPUs; r (3 GPUs, priority ``r_priority``) runs; big (4 GPUs, priority 100) and small
    (1 GPU, priority 50) wait in the same queue."""
    r = job("t/r", "t/q", tasks=3, priority=r_priority)
    r.preemptible = preemptible
    big = job("t/big", "t/q", tasks=4, priority=100)
    small = job("t/small", "t/q", priority=50)
    return [r, big, small], {"t/r": ["n1"] * 3}


def test_a_head_that_can_preempt_holds_back_lower_priority_jobs() -> None:
    """big cannot start (1 GPU free) but may evict r (priority 10 < 100). Held back, small does
    not take the free GPU, so preempt evicts r and big starts on all 4; small waits, saying
    for whom."""
    jobs, running = _three(10)
    d = decide(session([node("n1", gpu=4)], Q, jobs, running, options=HOLD))
    assert started(d) == {"t/big": ["w-0", "w-1", "w-2", "w-3"]}
    assert {e.job for e in d.evicted} == {"t/r"}
    reason, message = d.reasons["t/small"]
    assert reason == "HeldForHead"
    assert "t/big (priority 100 > 50)" in message


def test_without_the_hold_the_small_job_takes_the_gap_and_the_head_starves() -> None:
    """Same cluster, holdForHead off: small starts on the free GPU (started this cycle, it
    may not be a victim) and r's 3 GPUs are not enough for big: nothing is evicted."""
    jobs, running = _three(10)
    d = decide(session([node("n1", gpu=4)], Q, jobs, running, options=NO_HOLD))
    assert started(d) == {"t/small": ["w-0"]}
    assert d.evicted == []
    assert d.reasons["t/big"][0] == "Unschedulable"


def test_no_hold_where_no_preemption_could_make_room() -> None:
    """r has big's priority (equal priority never preempts), or is not preemptible: big can
    only wait for r to end, so holding small would leave the free GPU idle: small starts."""
    for r_priority, preemptible in ((100, True), (10, False)):
        jobs, running = _three(r_priority, preemptible=preemptible)
        d = decide(session([node("n1", gpu=4)], Q, jobs, running, options=HOLD))
        assert started(d) == {"t/small": ["w-0"]}, (r_priority, preemptible)
        assert d.evicted == []


def test_jobs_of_equal_priority_and_other_queues_are_not_held() -> None:
    """big (priority 100) is the head of t/q; same (priority 100, 1 GPU) is not held (equal
    priority: best-effort FIFO) and other (priority 0) in t/o is not held (another queue):
    both start on the free GPUs (2 free: r holds 2 of 4). r (priority 10) stays: big needs 4
    and r's 2 + 0 left are not enough."""
    queues = tree(queue("t"), queue("t/q"), queue("t/o"))
    r = job("t/r", "t/q", tasks=2, priority=10)
    big = job("t/big", "t/q", tasks=4, priority=100)
    same = job("t/same", "t/q", priority=100)
    other = job("t/other", "t/o", priority=0)
    d = decide(
        session(
            [node("n1", gpu=4)], queues, [r, big, same, other], {"t/r": ["n1"] * 2}, options=HOLD
        )
    )
    assert set(started(d)) == {"t/same", "t/other"}
    assert d.evicted == []


def _fragmented(options: BatchOptions) -> Decisions:
    """Two nodes of 4 GPUs, each running a job of priority 10 (2 GPUs: r1, r2) and one of
    priority 200 that is not preemptible (2 GPUs: k1, k2); big (priority 100, one 4-GPU task)
    and mid (priority 50, 1 GPU) wait. r1 and r2 hold 4 GPUs together, so big could start by
    preemption as far as the cluster-wide counters tell, but no node can free 4."""
    r1 = job("t/r1", "t/q", tasks=2, priority=10)
    r2 = job("t/r2", "t/q", tasks=2, priority=10)
    k1 = job("t/k1", "t/q", tasks=2, priority=200)
    k2 = job("t/k2", "t/q", tasks=2, priority=200)
    k1.preemptible = k2.preemptible = False
    big = job("t/big", "t/q", gpu=4, priority=100)
    mid = job("t/mid", "t/q", priority=50)
    running = {"t/r1": ["n1"] * 2, "t/k1": ["n1"] * 2, "t/r2": ["n2"] * 2, "t/k2": ["n2"] * 2}
    return decide(
        session(
            [node("n1", gpu=4), node("n2", gpu=4)],
            Q,
            [r1, r2, k1, k2, big, mid],
            running,
            options=options,
        )
    )


def test_no_hold_where_no_node_could_give_the_largest_task_its_room() -> None:
    """_fragmented: each node could give at most 2 GPUs (r's) to big's 4-GPU task, so no
    preemption can make its room and big holds nothing back: mid (priority 50 > 10) does what
    it does without the hold, evicting one whole 2-GPU job of priority 10 for its one GPU."""
    for options in (HOLD, NO_HOLD):
        d = _fragmented(options)
        assert started(d) == {"t/mid": ["w-0"]}
        assert len({e.job for e in d.evicted}) == 1
        assert {e.job for e in d.evicted} <= {"t/r1", "t/r2"}
        assert d.reasons["t/big"][0] == "Unschedulable"


def _blocked(options: BatchOptions) -> Decisions:
    """n1: 4 GPUs, 8 CPUs, running r1 (priority 10, 4 GPUs, 1 CPU) and k1 (priority 200, not
    preemptible, no GPU, 6 CPUs); n2: no GPU, 64 CPUs, idle. big (priority 100, 4 GPUs and 4
    CPUs) and mid (priority 50, 1 GPU, 1 CPU) wait. As far as the bounds tell, big could start
    by preemption (n1 could give 4 GPUs by taking r1; some node has 4 CPUs free), but no node
    can give both: evicting r1 leaves n1 2 CPUs."""
    r1 = job("t/r1", "t/q", gpu=4, priority=10)
    k1 = job("t/k1", "t/q", gpu=0, cpu=6, priority=200)
    k1.preemptible = False
    big = job("t/big", "t/q", gpu=4, cpu=4, priority=100)
    mid = job("t/mid", "t/q", priority=50)
    return decide(
        session(
            [node("n1", gpu=4, cpu=8), node("n2", gpu=0, cpu=64)],
            Q,
            [r1, k1, big, mid],
            {"t/r1": ["n1"], "t/k1": ["n1"]},
            options=options,
        )
    )


def test_a_held_job_does_not_preempt_for_itself() -> None:
    """_blocked: big's preemption fails (n1 freed of r1 has 4 GPUs but 2 CPUs): it stays. mid
    is held behind it and does not evict r1 for itself either; without the hold it does (a
    whole 4-GPU job for its one GPU)."""
    d = _blocked(HOLD)
    assert started(d) == {}
    assert d.evicted == []
    assert d.reasons["t/mid"][0] == "HeldForHead"
    d = _blocked(NO_HOLD)
    assert started(d) == {"t/mid": ["w-0"]}
    assert {e.job for e in d.evicted} == {"t/r1"}


def _share(gpu: int) -> Resources:
    return Resources(gpu * 1000, 10**9, 10**9)


def test_borrowers_leave_alone_what_a_waiting_head_asks_for() -> None:
    """n1 (4 GPUs) runs r (t/q, priority 10, 2 GPUs); n2 (4 GPUs) runs o (t/o, 1 GPU): 5 GPUs
    idle. t/q's fair share is 2 and it holds 2: big (priority 100, one 4-GPU task) is refused
    for fair share and finds no node with 4 free when it borrows; it becomes t/q's head and 4
    GPUs are set aside. s1 and s2 (priority 50, 1 GPU) may borrow only the 5 - 4 = 1 beyond:
    s1 starts, s2 waits held. Without the hold both start."""
    queues = tree(queue("t"), queue("t/q"), queue("t/o"))
    shares = {"t": _share(8), "t/q": _share(2), "t/o": _share(6)}

    def run(options: BatchOptions) -> Decisions:
        jobs = [
            job("t/r", "t/q", tasks=2, priority=10),
            job("t/o1", "t/o"),
            job("t/big", "t/q", gpu=4, priority=100),
            job("t/s1", "t/q", priority=50),
            job("t/s2", "t/q", priority=50),
        ]
        nodes = [node("n1", gpu=4), node("n2", gpu=4)]
        running = {"t/r": ["n1", "n1"], "t/o1": ["n2"]}
        return decide(session(nodes, queues, jobs, running, fair_share=shares, options=options))

    d = run(BatchOptions(actions=("enqueue", "allocate")))
    assert d.reasons["t/big"][0] == "FairShare"  # no preempt: nothing holds
    assert set(started(d)) == {"t/s1", "t/s2"}
    d = run(HOLD)
    assert "t/big" not in started(d)
    assert set(started(d)) == {"t/s1"}
    assert d.reasons["t/s2"][0] == "HeldForHead"


def test_no_hold_where_the_victims_and_idle_room_are_too_small() -> None:
    """4 GPUs: r (priority 10, 1 GPU) may be taken, keep (priority 200, 2 GPUs) may not; 1 GPU
    is idle. big (priority 100) asks for 4: r's 1 + 1 idle = 2 could never be enough, so big
    holds nothing back and small takes the idle GPU; nothing is evicted."""
    r = job("t/r", "t/q", priority=10)
    keep = job("t/keep", "t/q", tasks=2, priority=200)
    keep.preemptible = False
    big = job("t/big", "t/q", tasks=4, priority=100)
    small = job("t/small", "t/q", priority=50)
    running = {"t/r": ["n1"], "t/keep": ["n1", "n1"]}
    d = decide(session([node("n1", gpu=4)], Q, [r, keep, big, small], running, options=HOLD))
    assert started(d) == {"t/small": ["w-0"]}
    assert d.evicted == []
