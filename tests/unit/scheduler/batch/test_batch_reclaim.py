"""The reclaim action, case by case (in the spirit of Volcano's reclaim action tests, Kueue's
fair-sharing preemption tests and KAI-Scheduler's reclaim tests; each expected decision worked
out by hand in the comments).

Fair shares are set by hand (GPUs) so each case reads on its own; the cycle runs at t=1000."""

from __future__ import annotations

from aipaas.scheduler.batch.actions.preempt import preempt
from aipaas.scheduler.batch.actions.reclaim import reclaim
from aipaas.scheduler.batch.model import Resources, Snapshot
from aipaas.scheduler.batch.run import decide
from aipaas.scheduler.batch.session import Session
from tests.unit.scheduler.batch.test_batch_preempt_builders import (
    NOW,
    World,
    consistent,
    evicted,
    gpu_quota,
    gpus,
    node,
    run,
    started,
)


def shares(**gpu: float) -> dict[str, Resources]:
    """Fair shares by key, "t_a" standing for "t/a" ("t" for the tenant): the GPUs given and
    the CPU and memory that come with them on these nodes (8 cores, 64 GiB per GPU)."""
    return {
        key.replace("_", "/"): Resources(int(n * 1000), int(n * 8000), int(n * 64 * 1024))
        for key, n in gpu.items()
    }


def two_queues(gpu: int = 8, **queue_args: object) -> World:
    return World([node("n1", gpu)]).queue("t").queue("t/a").queue("t/b")


def test_reclaim_from_a_queue_above_its_fair_share() -> None:
    # n1 (8) is full: t/a holds 6 (three 2-GPU jobs) of its share 4, t/b 2 of 4. b1 (2 GPUs)
    # brings t/b to 4: allowed. The most recently started of t/a's jobs goes.
    w = two_queues()
    w.job("t/a1", "t/a", gpu=2, on=["n1"], since=0)
    w.job("t/a2", "t/a", gpu=2, on=["n1"], since=300)
    w.job("t/a3", "t/a", gpu=2, on=["n1"], since=100)
    w.job("t/b0", "t/b", gpu=2, on=["n1"])
    w.job("t/b1", "t/b", gpu=2)
    s = w.session(shares(t=8, t_a=4, t_b=4))
    d = run(reclaim, s)
    assert evicted(d) == ["t/a2/w-0"]
    assert started(d) == ["t/b1/w-0"]
    e = d.evicted[0]
    assert (e.reason, e.by) == ("Reclaimed", "t/b1")
    assert e.message == (
        "reclaimed by t/b1: queue t/b holds 2 of its fair share of 4 GPUs; queue t/a holds 6 of 4"
    )
    assert s.waiting["t/a2"] == ("Reclaimed", e.message)
    assert (s.allocated["t/a"].gpu_milli, s.allocated["t/b"].gpu_milli) == (4000, 4000)
    consistent(s)


def test_priority_across_queues_does_not_protect() -> None:
    # t/a's job has priority 1000, the reclaimer 1: reclaim looks at shares, not priorities.
    w = two_queues(4)
    w.job("t/a1", "t/a", gpu=4, priority=1000, on=["n1"])
    w.job("t/b1", "t/b", gpu=2, priority=1)
    d = run(reclaim, w.session(shares(t=4, t_a=2, t_b=2)))
    assert evicted(d) == ["t/a1/w-0"]
    assert started(d) == ["t/b1/w-0"]


def test_no_reclaim_that_puts_the_reclaimer_above_its_share() -> None:
    # t/b holds 2 of 4; b1 asks 4: t/b would hold 6 > 4.
    w = two_queues()
    w.job("t/a1", "t/a", gpu=6, on=["n1"])
    w.job("t/b0", "t/b", gpu=2, on=["n1"])
    w.job("t/b1", "t/b", gpu=4)
    s = w.session(shares(t=8, t_a=4, t_b=4))
    d = run(reclaim, s)
    assert (evicted(d), started(d)) == ([], [])
    consistent(s)


def test_only_queues_above_their_share_give_back() -> None:
    # t/a holds 4 of 4 (its job the most recent and lowest priority), t/c holds 4 of 2: b1
    # (t/b holds 0 of 2) takes from t/c only.
    w = World([node("n1", 8)]).queue("t").queue("t/a").queue("t/b").queue("t/c")
    w.job("t/a1", "t/a", gpu=4, priority=1, on=["n1"], since=900)
    w.job("t/c1", "t/c", gpu=2, priority=50, on=["n1"], since=0)
    w.job("t/c2", "t/c", gpu=2, priority=50, on=["n1"], since=10)
    w.job("t/b1", "t/b", gpu=2)
    d = run(reclaim, w.session(shares(t=8, t_a=4, t_b=2, t_c=2)))
    assert evicted(d) == ["t/c2/w-0"]


def test_victim_branch_is_checked_before_each_eviction() -> None:
    # t/a holds 6 (three 2-GPU jobs) of 4, n1 has 2 free. b1 needs 6 (t/b share 6): after one
    # eviction t/a holds 4 = its share, so a second may not go: nothing happens.
    w = two_queues()
    for i in range(3):
        w.job(f"t/a{i}", "t/a", gpu=2, on=["n1"])
    w.job("t/b1", "t/b", gpu=6)
    s = w.session(shares(t=8, t_a=4, t_b=6))
    d = run(reclaim, s)
    assert (evicted(d), started(d)) == ([], [])
    assert all(s.jobs[f"t/a{i}"].is_running for i in range(3))
    consistent(s)


def test_queue_below_its_guarantee_reaches_it_by_reclaim() -> None:
    # t/b is guaranteed 4 GPUs (its fair share is at least min(4, demand 4)); t/a (no
    # guarantee) borrowed all 8. b1 (4 GPUs) takes back the 4 it is owed: one 4-GPU job.
    w = World([node("n1", 8)]).queue("t").queue("t/a").queue("t/b", guaranteed=gpus(4))
    w.job("t/a1", "t/a", gpu=4, on=["n1"], since=0)
    w.job("t/a2", "t/a", gpu=4, on=["n1"], since=50)
    w.job("t/b1", "t/b", gpu=4)
    s = w.session(shares(t=8, t_a=4, t_b=4))
    d = run(reclaim, s)
    assert evicted(d) == ["t/a2/w-0"]
    assert s.allocated["t/b"].gpu_milli == s.queues["t/b"].guaranteed.gpu_milli


def test_no_reclaim_loop_next_cycle() -> None:
    # After the first case's reclaim, t/a holds 4 of 4 and t/b 4 of 4; a2 is pending again.
    # Next cycle, with nothing else changed, a2 cannot take its room back: t/a would hold 6.
    w = two_queues()
    w.job("t/a1", "t/a", gpu=2, on=["n1"], since=0)
    w.job("t/a2", "t/a", gpu=2, on=["n1"], since=300)
    w.job("t/a3", "t/a", gpu=2, on=["n1"], since=100)
    w.job("t/b0", "t/b", gpu=2, on=["n1"])
    w.job("t/b1", "t/b", gpu=2)
    fair = shares(t=8, t_a=4, t_b=4)
    s = w.session(fair)
    assert evicted(run(reclaim, s)) == ["t/a2/w-0"]
    following = Session(Snapshot(NOW + 10, s.snapshot.nodes, s.queues, s.snapshot.jobs), s.engine)
    following.fair_share = dict(fair)
    d = run(reclaim, following)
    assert (evicted(d), started(d)) == ([], [])
    assert run(preempt, following).evicted == []
    consistent(following)


def test_sibling_queue_victim_leaves_the_tenant_level_unchecked() -> None:
    # t1/a holds 4 of 2 and t1/b 0 of 2; t1 holds 4 = its share, t2/c 4 of 4. b1 (2 GPUs)
    # takes from its sibling t1/a: the common ancestor is t1, so only t1/b's share bounds it.
    w = World([node("n1", 8)]).queue("t1").queue("t1/a").queue("t1/b").queue("t2").queue("t2/c")
    w.job("t1/a1", "t1/a", gpu=4, on=["n1"])
    w.job("t2/c1", "t2/c", gpu=4, on=["n1"], since=900)
    w.job("t1/b1", "t1/b", gpu=2)
    s = w.session(shares(t1=4, t1_a=2, t1_b=2, t2=4, t2_c=4))
    d = run(reclaim, s)
    assert evicted(d) == ["t1/a1/w-0"]
    assert started(d) == ["t1/b1/w-0"]


def test_across_tenants_the_reclaimer_tenant_must_stay_within_its_share() -> None:
    # t2 holds 6 of 4 (over); t1/b holds 0 of 2 but its tenant t1 holds 2 of 2 (t1/a at its
    # share): taking from t2 would bring t1 to 4 > 2. Nothing happens.
    w = World([node("n1", 8)]).queue("t1").queue("t1/a").queue("t1/b").queue("t2").queue("t2/c")
    w.job("t1/a1", "t1/a", gpu=2, on=["n1"])
    w.job("t2/c1", "t2/c", gpu=6, on=["n1"])
    w.job("t1/b1", "t1/b", gpu=2)
    s = w.session(shares(t1=2, t1_a=2, t1_b=2, t2=4, t2_c=4))
    d = run(reclaim, s)
    assert (evicted(d), started(d)) == ([], [])
    consistent(s)


def test_across_tenants_when_the_reclaimer_tenant_is_below_its_share() -> None:
    # Same, but t1's share is 4: t2 (6 of 4) gives back; the message names the branch t2.
    w = World([node("n1", 8)]).queue("t1").queue("t1/a").queue("t1/b").queue("t2").queue("t2/c")
    w.job("t1/a1", "t1/a", gpu=2, on=["n1"])
    w.job("t2/c1", "t2/c", gpu=2, on=["n1"], since=0)
    w.job("t2/c2", "t2/c", gpu=4, on=["n1"], since=0)
    w.job("t1/b1", "t1/b", gpu=2)
    d = run(reclaim, w.session(shares(t1=4, t1_a=2, t1_b=2, t2=4, t2_c=4)))
    # Equal priority and start: the job listed first by key breaks the tie (c1, 2 GPUs).
    assert evicted(d) == ["t2/c1/w-0"]
    assert d.evicted[0].message == (
        "reclaimed by t1/b1: queue t1/b holds 0 of its fair share of 2 GPUs; tenant t2 holds 6 of 4"
    )


def test_non_preemptible_and_young_jobs_are_not_reclaimed() -> None:
    # t/a holds 8 of 4: one job not preemptible, one younger than t/a's minRuntime (600 s).
    w = World([node("n1", 8)]).queue("t").queue("t/a", min_runtime=600).queue("t/b")
    w.job("t/keep", "t/a", gpu=4, preemptible=False, on=["n1"])
    w.job("t/young", "t/a", gpu=4, on=["n1"], since=NOW - 599)
    w.job("t/b1", "t/b", gpu=4)
    d = run(reclaim, w.session(shares(t=8, t_a=4, t_b=4)))
    assert (evicted(d), started(d)) == ([], [])


def test_reclaimed_gang_goes_whole() -> None:
    # t/a's gang of 4 x 1 GPU (minAvailable 4) holds n1; b1 needs 1 GPU: all four go.
    w = two_queues(4)
    w.job("t/g", "t/a", tasks=4, on=["n1"] * 4)
    w.job("t/b1", "t/b", gpu=1)
    d = run(reclaim, w.session(shares(t=4, t_a=2, t_b=2)))
    assert evicted(d) == [f"t/g/w-{i}" for i in range(4)]
    assert {e.reason for e in d.evicted} == {"Reclaimed"}


def test_reclaim_takes_elastic_extras_first() -> None:
    # t/a's elastic job runs 4 (minAvailable 2) on n1 (4 GPUs), 4 of its share 2; b1 needs 2:
    # the two extras go, newest first, as ElasticShrink; the job keeps running.
    w = two_queues(4)
    w.job("t/el", "t/a", tasks=4, min_available=2, on=["n1"] * 4, since=[0, 0, 10, 20])
    w.job("t/b1", "t/b", gpu=2)
    s = w.session(shares(t=4, t_a=2, t_b=2))
    d = run(reclaim, s)
    assert evicted(d) == ["t/el/w-3", "t/el/w-2"]
    assert [e.reason for e in d.evicted] == ["ElasticShrink", "ElasticShrink"]
    assert d.evicted[0].message == (
        "elastic task w-3 above minAvailable 2 given up for t/b1: queue t/b holds 0 of its "
        "fair share of 2 GPUs; queue t/a holds 4 of 2"
    )
    assert s.jobs["t/el"].is_running


def test_reclaim_discards_when_the_gang_still_cannot_fit() -> None:
    # b1 is a gang of 2 x 4 GPUs on two 4-GPU nodes; only n1's job may go (n2's is not
    # preemptible): the trial eviction is undone.
    w = World([node("n1", 4), node("n2", 4)]).queue("t").queue("t/a").queue("t/b")
    w.job("t/a1", "t/a", gpu=4, on=["n1"])
    w.job("t/a2", "t/a", gpu=4, preemptible=False, on=["n2"])
    w.job("t/b1", "t/b", tasks=2, gpu=4)
    s = w.session(shares(t=8, t_a=0, t_b=8))
    d = run(reclaim, s)
    assert (evicted(d), started(d)) == ([], [])
    assert s.jobs["t/a1"].is_running
    consistent(s)


def test_reclaimer_quota_still_binds() -> None:
    # t/b is below its share but its quota is 1 GPU; b1 asks 2: nothing is evicted.
    w = World([node("n1", 4)]).queue("t").queue("t/a").queue("t/b", quota=gpu_quota(1))
    w.job("t/a1", "t/a", gpu=4, on=["n1"])
    w.job("t/b1", "t/b", gpu=2)
    d = run(reclaim, w.session(shares(t=4, t_a=2, t_b=2)))
    assert (evicted(d), started(d)) == ([], [])


def test_job_evicted_by_preempt_does_not_reclaim_in_the_same_cycle() -> None:
    # In t/a, high (100) preempts low (10) on n1. t/b (share 0) holds n2 and is over its share;
    # low would be a reclaimer (t/a 4 + 4 <= 8) but was evicted this cycle: it stays pending.
    w = World([node("n1", 4), node("n2", 4)]).queue("t").queue("t/a").queue("t/b")
    w.job("t/low", "t/a", gpu=4, priority=10, on=["n1"])
    w.job("t/bb", "t/b", gpu=4, on=["n2"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session(shares(t=8, t_a=8, t_b=0))
    run(preempt, s)
    d = run(reclaim, s)
    assert evicted(d) == ["t/low/w-0"]
    assert started(d) == ["t/high/w-0"]
    assert s.jobs["t/bb"].is_running


def test_reclaimers_share_the_room_without_exceeding_their_shares() -> None:
    # t/a holds 8 of 4 (four 2-GPU jobs); t/b (share 4) has b1 and b2 (2 GPUs each) and a b3:
    # b1 and b2 each reclaim one job; b3 would bring t/b to 6 > 4 and waits.
    w = two_queues()
    for i in range(4):
        w.job(f"t/a{i}", "t/a", gpu=2, on=["n1"], since=float(i))
    for i in range(1, 4):
        w.job(f"t/b{i}", "t/b", gpu=2)
    s = w.session(shares(t=8, t_a=4, t_b=4))
    d = run(reclaim, s)
    assert evicted(d) == ["t/a3/w-0", "t/a2/w-0"]
    assert started(d) == ["t/b1/w-0", "t/b2/w-0"]
    assert (s.allocated["t/a"].gpu_milli, s.allocated["t/b"].gpu_milli) == (4000, 4000)
    consistent(s)


def test_whole_cycle_with_computed_fair_shares_reaches_the_guarantee() -> None:
    # The session computes the shares: t/b is guaranteed 4 GPUs and asks 4, t/a (no
    # guarantee) holds all 8 with two 4-GPU jobs: t/b's share is 4, t/a's the other 4.
    # allocate cannot start b1 (no room), preempt has nothing (one job per queue), reclaim
    # takes t/a's most recent job. A second cycle with nothing else changed evicts nothing.
    w = World([node("n1", 8)]).queue("t").queue("t/a").queue("t/b", guaranteed=gpus(4))
    w.job("t/a1", "t/a", gpu=4, on=["n1"], since=0)
    w.job("t/a2", "t/a", gpu=4, on=["n1"], since=50)
    w.job("t/b1", "t/b", gpu=4)
    s = w.session()
    d = decide(s)
    assert (s.fair_share["t/a"].gpu_milli, s.fair_share["t/b"].gpu_milli) == (4000, 4000)
    assert evicted(d) == ["t/a2/w-0"]
    assert started(d) == ["t/b1/w-0"]
    assert d.reasons["t/a2"][0] == "Reclaimed"
    following = Session(Snapshot(NOW + 10, s.snapshot.nodes, s.queues, s.snapshot.jobs), s.engine)
    again = decide(following)
    assert (evicted(again), started(again)) == ([], [])


def test_victim_must_hold_what_its_queue_is_over_in() -> None:
    # n1: 8 GPUs, 64 cores. t/a holds 6 GPUs of its share 4 (a non-preemptible job) and 61
    # cores of 64 (ca, CPU only, 60 cores). b1 (t/b) needs 2 GPUs and 10 cores: only CPU is
    # short, and t/a is not over its CPU share; ca holds no GPU, the resource t/a is over in,
    # so evicting it would not lower t/a's excess: nothing happens.
    w = two_queues()
    w.job("t/ga", "t/a", gpu=6, preemptible=False, on=["n1"])
    w.job("t/ca", "t/a", gpu=0, cpu=60, on=["n1"])
    w.job("t/b1", "t/b", gpu=2, cpu=10)
    s = w.session(
        {
            "t": Resources(8000, 64_000, 512 * 1024),
            "t/a": Resources(4000, 64_000, 256 * 1024),
            "t/b": Resources(4000, 32_000, 256 * 1024),
        }
    )
    d = run(reclaim, s)
    assert (evicted(d), started(d)) == ([], [])
