"""Preemption within a queue when a QUOTA (of the leaf or an ancestor) or the queue's fair
share blocks the preemptor, not only the room (Kueue's withinClusterQueue: LowerPriority;
issue 11 item 3). Each expected decision worked out by hand in the comment; every cycle runs
at t=1000, jobs run since 0 and ask whole GPUs."""

from __future__ import annotations

from aipaas.scheduler.batch.actions.allocate import allocate
from aipaas.scheduler.batch.actions.preempt import preempt
from aipaas.scheduler.batch.session import Session
from tests.unit.scheduler.batch.test_batch_preempt_builders import (
    World,
    evicted,
    gpu_quota,
    gpus,
    node,
    run,
    started,
)


def both(session: Session) -> None:
    allocate(session)
    preempt(session)


def test_the_tenant_quota_held_by_the_same_leaf_is_freed_by_its_lower_priority_jobs() -> None:
    # Tenant t has a quota of 4 GPUs; t/a runs low1 and low2 (2 GPUs each, priority 10) on n1;
    # n2 is empty. high (4 GPUs, priority 100) is blocked by the tenant's quota (4 + 4 > 4),
    # not by room: both low jobs go (each frees 2 of the 4 it needs) and high starts.
    w = World([node("n1", 4), node("n2", 4)]).queue("t", quota=gpu_quota(4)).queue("t/a")
    w.job("t/low1", "t/a", gpu=2, priority=10, on=["n1"])
    w.job("t/low2", "t/a", gpu=2, priority=10, on=["n1"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(both, s)
    assert sorted(evicted(d)) == ["t/low1/w-0", "t/low2/w-0"]
    assert started(d) == ["t/high/w-0"]
    assert s.allocated["t"].gpu_milli == gpus(4).gpu_milli


def test_only_as_many_lower_priority_jobs_go_as_the_ancestor_quota_needs() -> None:
    # Tenant quota 6 GPUs: t/b's other holds 2 (priority 1, another queue: never preempt's),
    # t/a's low1 and low2 hold 2 each (priority 10, low2 started later). high needs 2 GPUs:
    # 6 + 2 > 6, one low job must go; the most recently started, low2. n1..n3 have room.
    w = (
        World([node("n1", 4), node("n2", 4), node("n3", 4)])
        .queue("t", quota=gpu_quota(6))
        .queue("t/a")
        .queue("t/b")
    )
    w.job("t/other", "t/b", gpu=2, priority=1, on=["n1"])
    w.job("t/low1", "t/a", gpu=2, priority=10, on=["n2"], since=0.0)
    w.job("t/low2", "t/a", gpu=2, priority=10, on=["n3"], since=500.0)
    w.job("t/high", "t/a", gpu=2, priority=100)
    s = w.session()
    d = run(both, s)
    assert evicted(d) == ["t/low2/w-0"]
    assert started(d) == ["t/high/w-0"]
    assert s.jobs["t/other"].is_running and s.jobs["t/low1"].is_running


def test_quota_blocked_preemptor_never_takes_an_equal_priority_job() -> None:
    # The leaf's quota is 2 GPUs, held by same (priority 50); eq (priority 50) waits: equal
    # priority never preempts, whatever blocks it.
    w = World([node("n1", 4)]).queue("t").queue("t/a", quota=gpu_quota(2))
    w.job("t/same", "t/a", gpu=2, priority=50, on=["n1"])
    w.job("t/eq", "t/a", gpu=2, priority=50)
    s = w.session()
    d = run(both, s)
    assert (evicted(d), started(d)) == ([], [])
    assert s.waiting["t/eq"][0] == "QuotaExceeded"


def test_quota_freed_but_no_room_without_more_victims_evicts_nothing() -> None:
    # Leaf quota 4 GPUs; low (2 GPUs, priority 10) runs on n1 (2 GPUs) and another queue's
    # job fills n2 (2 GPUs). high needs 4 GPUs on one node: evicting low frees the quota but
    # no node can hold 4 GPUs: nothing is evicted (the statement is discarded).
    w = World([node("n1", 2), node("n2", 2)]).queue("t").queue("t/a", quota=gpu_quota(4))
    w.queue("t/b")
    w.job("t/low", "t/a", gpu=2, priority=10, on=["n1"])
    w.job("t/full", "t/b", gpu=2, priority=0, on=["n2"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(both, s)
    assert (evicted(d), started(d)) == ([], [])
    assert s.jobs["t/low"].is_running


def test_fair_share_held_by_lower_priority_jobs_of_the_same_leaf_is_taken_by_preempt() -> None:
    # t/a's fair share is 4 GPUs, held by low (4 GPUs, priority 10) on n1; n2 (4 GPUs) is
    # full with t/b's job. high (t/a, 4 GPUs, priority 100) is refused for fair share
    # (4 + 4 > 4) and there is no idle room to borrow: preempt evicts low, t/a ends at its
    # share (4) and high starts on n1. t/b's job (another queue) stays.
    w = World([node("n1", 4), node("n2", 4)]).queue("t").queue("t/a").queue("t/b")
    w.job("t/low", "t/a", gpu=4, priority=10, on=["n1"])
    w.job("t/bjob", "t/b", gpu=4, priority=0, on=["n2"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    share = {"t": gpus(8), "t/a": gpus(4), "t/b": gpus(4)}
    s = w.session(fair_share=share)
    d = run(both, s)
    assert evicted(d) == ["t/low/w-0"]
    assert started(d) == ["t/high/w-0"]
    assert s.allocated["t/a"].gpu_milli == gpus(4).gpu_milli
    assert s.jobs["t/bjob"].is_running
