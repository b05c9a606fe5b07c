"""The preempt action, case by case (in the spirit of Volcano's preempt action tests and
Kueue's preemption tests; each expected decision worked out by hand in the docstring).

Every cycle runs at t=1000; jobs run since 0 unless told; nodes have 8 GPUs unless told."""

from __future__ import annotations

import pytest

from aipaas.scheduler.batch.actions.preempt import preempt
from aipaas.scheduler.batch.model import Eviction
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
    nodes_of,
    run,
    started,
)


def one_queue(*nodes: tuple[str, int], min_runtime: float = 0.0) -> World:
    return (
        World([node(name, gpu) for name, gpu in nodes])
        .queue("t")
        .queue("t/a", min_runtime=min_runtime)
    )


def test_higher_priority_evicts_the_whole_lower_gang_and_starts_in_the_same_statement() -> None:
    # n1 is full with low's 8-task gang (priority 50); high (100) needs 4 GPUs: the gang goes
    # whole (8 tasks, below minAvailable otherwise) and high starts on n1.
    w = one_queue(("n1", 8))
    w.job("t/low", "t/a", tasks=8, priority=50, on=["n1"] * 8)
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert evicted(d) == [f"t/low/w-{i}" for i in range(8)]
    assert started(d) == ["t/high/w-0"]
    assert {e.reason for e in d.evicted} == {"Preempted"}
    assert {e.by for e in d.evicted} == {"t/high"}
    assert d.evicted[0].message == "preempted by t/high (priority 100 > 50) in queue t/a"
    assert s.waiting["t/low"] == ("Preempted", d.evicted[0].message)
    assert s.allocated["t/a"].gpu_milli == gpus(4).gpu_milli
    consistent(s)


def test_equal_priority_never_preempts() -> None:
    w = one_queue(("n1", 8))
    w.job("t/low", "t/a", gpu=8, priority=50, on=["n1"])
    w.job("t/same", "t/a", gpu=4, priority=50)
    s = w.session()
    d = run(preempt, s)
    assert (evicted(d), started(d)) == ([], [])
    consistent(s)


def test_non_preemptible_job_is_never_a_victim() -> None:
    # The only lower-priority job is not preemptible; the preemptible one left is not enough.
    w = one_queue(("n1", 8))
    w.job("t/keep", "t/a", gpu=6, priority=10, preemptible=False, on=["n1"])
    w.job("t/low", "t/a", gpu=2, priority=10, on=["n1"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert (evicted(d), started(d)) == ([], [])
    assert s.jobs["t/low"].is_running and s.jobs["t/keep"].is_running
    consistent(s)


@pytest.mark.parametrize(
    ("since", "preempted"),
    [(500.0, False), (400.0, True)],  # ran 500 s < minRuntime 600; ran exactly 600 s
)
def test_min_runtime_protects_a_young_job(since: float, preempted: bool) -> None:
    w = one_queue(("n1", 8), min_runtime=600)
    w.job("t/low", "t/a", gpu=8, priority=10, on=["n1"], since=since)
    w.job("t/high", "t/a", gpu=8, priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == (["t/low/w-0"] if preempted else [])
    assert started(d) == (["t/high/w-0"] if preempted else [])


def test_other_queues_are_not_preempted() -> None:
    # Preemption stays inside the leaf queue: t/b's low job is reclaim's business.
    w = one_queue(("n1", 8)).queue("t/b")
    w.job("t/other", "t/b", gpu=8, priority=1, on=["n1"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    d = run(preempt, w.session())
    assert (evicted(d), started(d)) == ([], [])


def test_gang_victim_goes_whole_even_when_one_task_would_do() -> None:
    # low is a 4-task gang (minAvailable 4) on n1 (4 GPUs); high needs 1 GPU: all 4 go.
    w = one_queue(("n1", 4))
    w.job("t/low", "t/a", tasks=4, priority=10, on=["n1"] * 4)
    w.job("t/high", "t/a", priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/low/w-0", "t/low/w-1", "t/low/w-2", "t/low/w-3"]
    assert started(d) == ["t/high/w-0"]


def test_elastic_extra_goes_alone_newest_first() -> None:
    # el runs 4 tasks (minAvailable 2) on n1 (4 GPUs), its extras w-2 since 100 and w-3 since
    # 200; high needs 1 GPU: only w-3 goes, as ElasticShrink; el keeps running 3 tasks.
    w = one_queue(("n1", 4))
    w.job(
        "t/el", "t/a", tasks=4, min_available=2, priority=10, on=["n1"] * 4, since=[0, 0, 100, 200]
    )
    w.job("t/high", "t/a", priority=100)
    s = w.session()
    d = run(preempt, s)
    assert evicted(d) == ["t/el/w-3"]
    assert d.evicted[0].reason == "ElasticShrink"
    assert d.evicted[0].message == (
        "elastic task w-3 above minAvailable 2 given up for t/high (priority 100 > 10) in queue t/a"
    )
    assert len(s.jobs["t/el"].running_tasks) == 3
    consistent(s)


def test_elastic_extras_go_one_by_one_until_the_gang_fits() -> None:
    # high needs 2 GPUs: both extras go (w-3 then w-2), the job keeps its minAvailable 2.
    w = one_queue(("n1", 4))
    w.job(
        "t/el", "t/a", tasks=4, min_available=2, priority=10, on=["n1"] * 4, since=[0, 0, 100, 200]
    )
    w.job("t/high", "t/a", gpu=2, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert evicted(d) == ["t/el/w-3", "t/el/w-2"]
    assert [e.reason for e in d.evicted] == ["ElasticShrink", "ElasticShrink"]
    assert [t.name for t in s.jobs["t/el"].running_tasks] == ["w-0", "w-1"]


def test_elastic_extra_goes_before_a_lower_priority_whole_job() -> None:
    # n1 (4 GPUs): el (priority 40, minAvailable 1) runs 2 tasks; plain (priority 10) runs 2
    # GPUs. high needs 1 GPU: extras go first, so el/w-1 goes, not plain.
    w = one_queue(("n1", 4))
    w.job("t/el", "t/a", tasks=2, min_available=1, priority=40, on=["n1", "n1"])
    w.job("t/plain", "t/a", gpu=2, priority=10, on=["n1"], since=900)
    w.job("t/high", "t/a", priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/el/w-1"]


def test_lowest_priority_goes_first() -> None:
    w = one_queue(("n1", 8))
    w.job("t/p20", "t/a", gpu=4, priority=20, on=["n1"], since=900)
    w.job("t/p10", "t/a", gpu=4, priority=10, on=["n1"], since=0)
    w.job("t/high", "t/a", gpu=4, priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/p10/w-0"]


def test_most_recently_started_goes_first_among_equal_priority() -> None:
    # Both 4 GPUs, priority 10; b started at 500 (loses 4 x 500 GPU-s) and a at 100 (4 x 900).
    w = one_queue(("n1", 8))
    w.job("t/a1", "t/a", gpu=4, priority=10, on=["n1"], since=100)
    w.job("t/b1", "t/a", gpu=4, priority=10, on=["n1"], since=500)
    w.job("t/high", "t/a", gpu=4, priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/b1/w-0"]


def test_fewest_victims_wins_over_less_gpu_time() -> None:
    # n1 (4): two 2-GPU jobs since 900 (the most recent: greedy takes both, 400 GPU-s lost);
    # n2 (4): one 4-GPU job since 100 (3600 GPU-s). high needs 4 GPUs on one node: the plan on
    # n2 has one victim, the one on n1 two: n2's job goes.
    w = one_queue(("n1", 4), ("n2", 4))
    w.job("t/x", "t/a", gpu=2, priority=10, on=["n1"], since=900)
    w.job("t/y", "t/a", gpu=2, priority=10, on=["n1"], since=900)
    w.job("t/z", "t/a", gpu=4, priority=10, on=["n2"], since=100)
    w.job("t/high", "t/a", gpu=4, priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/z/w-0"]
    assert nodes_of(d, "t/high") == {"w-0": "n2"}


def test_least_gpu_time_lost_among_single_victims() -> None:
    # n1 (4): a 4-GPU job since 500 (most recent, 4 x 500 = 2000 GPU-s lost); n2 (4): a 1-GPU
    # job since 100 (900 GPU-s) beside a non-preemptible 3-GPU job. high needs 1 GPU: the
    # plan on n2 loses less, so the older, smaller job goes.
    w = one_queue(("n1", 4), ("n2", 4))
    w.job("t/big", "t/a", gpu=4, priority=10, on=["n1"], since=500)
    w.job("t/small", "t/a", gpu=1, priority=10, on=["n2"], since=100)
    w.job("t/keep", "t/a", gpu=3, priority=10, preemptible=False, on=["n2"])
    w.job("t/high", "t/a", priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/small/w-0"]
    assert nodes_of(d, "t/high") == {"w-0": "n2"}


def test_needless_victim_is_reprieved() -> None:
    # n1 (4): x (1 GPU, priority 10) comes first, y (3 GPUs, priority 20) second. high needs 3:
    # greedy takes x then y; without x, y's 3 GPUs suffice, so x is reprieved.
    w = one_queue(("n1", 4))
    w.job("t/x", "t/a", gpu=1, priority=10, on=["n1"])
    w.job("t/y", "t/a", gpu=3, priority=20, on=["n1"])
    w.job("t/high", "t/a", gpu=3, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert evicted(d) == ["t/y/w-0"]
    assert s.jobs["t/x"].is_running


def test_nothing_is_evicted_when_the_preemptor_still_cannot_fit() -> None:
    # n1 (4): low 2 GPUs, keep 2 GPUs (not preemptible); high needs 4: no plan; the trial
    # evictions were all undone.
    w = one_queue(("n1", 4))
    w.job("t/low", "t/a", gpu=2, priority=10, on=["n1"])
    w.job("t/keep", "t/a", gpu=2, priority=10, preemptible=False, on=["n1"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert (evicted(d), started(d)) == ([], [])
    assert s.jobs["t/low"].is_running and s.jobs["t/low"].started == 0.0
    assert s.engine.free("n1").gpu_milli == 0
    consistent(s)


def test_eviction_frees_the_queue_quota() -> None:
    # t/a's quota is 4 GPUs and low holds them (n1); n2 is empty but high (4 GPUs) is over the
    # quota until low goes: preempt evicts low and high starts.
    w = World([node("n1", 4), node("n2", 4)]).queue("t").queue("t/a", quota=gpu_quota(4))
    w.job("t/low", "t/a", gpu=4, priority=10, on=["n1"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert evicted(d) == ["t/low/w-0"]
    assert started(d) == ["t/high/w-0"]
    assert s.allocated["t/a"].gpu_milli == gpus(4).gpu_milli


def test_quota_of_the_tenant_held_by_another_queue_is_not_freed_by_preempt() -> None:
    w = World([node("n1", 8)]).queue("t", quota=gpu_quota(4)).queue("t/a").queue("t/b")
    w.job("t/other", "t/b", gpu=4, priority=1, on=["n1"])
    w.job("t/low", "t/a", gpu=1, priority=1, on=["n1"])
    w.job("t/high", "t/a", gpu=4, priority=100)
    d = run(preempt, w.session())
    assert (evicted(d), started(d)) == ([], [])


def test_gang_preemptor_over_two_nodes() -> None:
    # high is a 2-task gang of 4 GPUs each; n1 and n2 (4 GPUs each) each run a low job.
    w = one_queue(("n1", 4), ("n2", 4))
    w.job("t/l1", "t/a", gpu=4, priority=10, on=["n1"])
    w.job("t/l2", "t/a", gpu=4, priority=10, on=["n2"])
    w.job("t/high", "t/a", tasks=2, gpu=4, priority=100)
    d = run(preempt, w.session())
    assert sorted(evicted(d)) == ["t/l1/w-0", "t/l2/w-0"]
    assert sorted(started(d)) == ["t/high/w-0", "t/high/w-1"]


def test_topology_required_preemptor_takes_victims_in_one_rack() -> None:
    # Racks r1 = n1, n2 and r2 = n3, n4 (2 GPUs each), each node full with a 2-GPU job; on r2
    # one is not preemptible. high needs 2 x 2 GPUs inside one rack: r1's jobs go.
    w = (
        World(
            [
                node("n1", 2, rack="r1"),
                node("n2", 2, rack="r1"),
                node("n3", 2, rack="r2"),
                node("n4", 2, rack="r2"),
            ]
        )
        .queue("t")
        .queue("t/a")
    )
    w.job("t/j1", "t/a", gpu=2, priority=10, on=["n1"], since=0)
    w.job("t/j2", "t/a", gpu=2, priority=10, on=["n2"], since=0)
    w.job("t/j3", "t/a", gpu=2, priority=10, on=["n3"], since=900)
    w.job("t/j4", "t/a", gpu=2, priority=10, preemptible=False, on=["n4"])
    w.job("t/high", "t/a", tasks=2, gpu=2, priority=100, required="rack")
    d = run(preempt, w.session())
    assert sorted(evicted(d)) == ["t/j1/w-0", "t/j2/w-0"]
    assert sorted(nodes_of(d, "t/high").values()) == ["n1", "n2"]


def test_job_started_this_cycle_is_not_a_victim() -> None:
    # An earlier action started low at t=1000 (committed); minRuntime 0 would allow it, but a
    # job is never started and evicted in the same cycle.
    w = one_queue(("n1", 4))
    w.job("t/low", "t/a", gpu=4, priority=10)
    w.job("t/high", "t/a", gpu=4, priority=100)
    s = w.session()
    low = s.jobs["t/low"]
    placed = s.engine.place([low.tasks[0].request])
    assert isinstance(placed, list)
    st = s.statement()
    st.allocate(low, low.tasks[0], placed[0])
    st.commit()
    d = run(preempt, s)
    assert evicted(d) == []
    assert started(d) == ["t/low/w-0"]


def test_each_victim_serves_one_preemptor_and_no_loop_next_cycle() -> None:
    # h1 and h2 (priority 100, 4 GPUs each) and low (priority 10, 8 GPUs on n1): h1 evicts low
    # and starts; h2 needs no victim (the room left is allocate's, next cycle) and there is
    # none left to take. Next cycle, with nothing else changed, low cannot preempt back.
    w = one_queue(("n1", 8))
    w.job("t/low", "t/a", gpu=8, priority=10, on=["n1"])
    w.job("t/h1", "t/a", gpu=4, priority=100)
    w.job("t/h2", "t/a", gpu=4, priority=100)
    s = w.session()
    d = run(preempt, s)
    assert evicted(d) == ["t/low/w-0"]
    assert started(d) == ["t/h1/w-0"]
    following = Session(
        s.snapshot.__class__(NOW + 10, s.snapshot.nodes, s.queues, s.snapshot.jobs), s.engine
    )
    assert run(preempt, following).evicted == []
    consistent(following)


def test_eviction_record_shape() -> None:
    w = one_queue(("n1", 1))
    w.job("t/low", "t/a", priority=1, on=["n1"])
    w.job("t/high", "t/a", priority=2)
    d = run(preempt, w.session())
    assert d.evicted == [
        Eviction(
            "t/low",
            "w-0",
            "t/high",
            "Preempted",
            "preempted by t/high (priority 2 > 1) in queue t/a",
        )
    ]


def test_whole_cycle_does_not_restart_the_victim_elsewhere() -> None:
    # n1 (2 GPUs) runs low's gang of 2 x 1 GPU; n2 and n3 have 1 GPU each, free. high needs 2
    # GPUs on one node: allocate cannot start it, preempt evicts low and starts high on n1.
    # low would fit on n2 + n3, but a job evicted for a preemptor is not started again in the
    # same cycle (backfill leaves it be): it waits, saying who evicted it.
    w = one_queue(("n1", 2), ("n2", 1), ("n3", 1))
    w.job("t/low", "t/a", tasks=2, priority=10, on=["n1", "n1"])
    w.job("t/high", "t/a", gpu=2, priority=100)
    d = decide(w.session())
    assert evicted(d) == ["t/low/w-0", "t/low/w-1"]
    assert started(d) == ["t/high/w-0"]
    assert d.reasons["t/low"] == (
        "Preempted",
        "preempted by t/high (priority 100 > 10) in queue t/a",
    )


def test_one_bigger_victim_rather_than_two_recent_small_ones() -> None:
    # n1 (4): a (2 GPUs, since 100), b (1 GPU, since 200), c (1 GPU, since 300), priority 10.
    # high needs 2: by recency c then b would go (2 victims); a alone frees 2: a goes.
    w = one_queue(("n1", 4))
    w.job("t/a1", "t/a", gpu=2, priority=10, on=["n1"], since=100)
    w.job("t/b1", "t/a", gpu=1, priority=10, on=["n1"], since=200)
    w.job("t/c1", "t/a", gpu=1, priority=10, on=["n1"], since=300)
    w.job("t/high", "t/a", gpu=2, priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/a1/w-0"]


def test_two_low_priority_victims_rather_than_one_of_higher_priority() -> None:
    # Same, but a has priority 20: lowest priority first outranks fewest victims: c and b go.
    w = one_queue(("n1", 4))
    w.job("t/a1", "t/a", gpu=2, priority=20, on=["n1"], since=100)
    w.job("t/b1", "t/a", gpu=1, priority=10, on=["n1"], since=200)
    w.job("t/c1", "t/a", gpu=1, priority=10, on=["n1"], since=300)
    w.job("t/high", "t/a", gpu=2, priority=100)
    d = run(preempt, w.session())
    assert evicted(d) == ["t/c1/w-0", "t/b1/w-0"]
