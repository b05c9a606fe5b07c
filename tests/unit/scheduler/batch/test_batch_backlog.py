"""Long backlogs: what the session keeps per job and across its actions (the pending gangs,
pending work per queue) must always equal what a fresh walk over the jobs finds, and jobs
alike behind a refused one are refused with the same words (docs/scheduling.md, One cycle)."""

from __future__ import annotations

from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import UNBOUNDED, Job, Resources, Snapshot
from aipaas.scheduler.batch.run import decide
from aipaas.scheduler.batch.session import Session, gang_tasks, resources_of
from tests.unit.scheduler.batch.batch_alloc_builders import (
    gpu_quota,
    job,
    node,
    queue,
    session,
    started,
    tree,
)


def _fresh_gangs(jobs: dict[str, Job]) -> list[tuple[str, list[str], Resources]]:
    out = []
    for key, one in jobs.items():
        gang = gang_tasks(one)
        if gang:
            out.append((key, [t.name for t in gang], resources_of(gang)))
    return out


def _kept_gangs(s: Session) -> list[tuple[str, list[str], Resources]]:
    return [(k, [t.name for t in g], want) for k, (g, want) in s.pending_gangs().items()]


def _fresh_pending(jobs: dict[str, Job]) -> dict[str, Resources]:
    out: dict[str, Resources] = {}
    for one in jobs.values():
        waiting = [t for t in one.tasks if t.placement is None]
        if waiting:
            out[one.queue] = out.get(one.queue, Resources()) + resources_of(waiting)
    return out


def test_kept_gangs_and_pending_match_a_fresh_walk_after_preemption() -> None:
    queues = tree(queue("t"), queue("t/a"))
    low = job("t/low", "t/a", tasks=4, gpu=2, priority=1)
    jobs = [
        low,
        job("t/high", "t/a", tasks=2, gpu=4, priority=9),
        job("t/small-1", "t/a", gpu=2, priority=1),
        job("t/small-2", "t/a", gpu=2, priority=1),
        job("t/elastic", "t/a", tasks=3, gpu=1, min_available=1),
    ]
    s = session([node("n1", gpu=8)], queues, jobs, {"t/low": ["n1"] * 4})
    decisions = decide(s)
    assert "t/high" in started(decisions)  # it took the node from t/low
    assert {e.job for e in decisions.evicted} == {"t/low"}
    assert _kept_gangs(s) == _fresh_gangs(s.jobs)  # t/low's gang back, in the jobs' order
    pending = _fresh_pending(s.jobs)
    assert s.report()["t/a"].pending == pending["t/a"]


def test_a_job_seen_by_an_earlier_session_is_judged_as_it_is_now() -> None:
    queues = tree(queue("t"), queue("t/a"))
    jobs = [job("t/x", "t/a", tasks=2, gpu=2), job("t/y", "t/a", gpu=2)]
    first = session([node("n1", gpu=8)], queues, jobs)
    assert started(decide(first)) == {"t/x": ["w-0", "w-1"], "t/y": ["w-0"]}
    # The next cycle: t/x still runs, t/y ended and is submitted again (its task free).
    engine = SnapshotCluster([node("n1", gpu=8)], "bestfit")
    for task in jobs[0].tasks:
        assert task.placement is not None
        engine.hold(task.placement)
    jobs[1].tasks[0].placement = None
    jobs[1].started = None
    second = Session(Snapshot(200.0, [node("n1", gpu=8)], queues, jobs), engine)
    assert [k for k, _, _ in _kept_gangs(second)] == ["t/y"]
    assert second.running == [jobs[0]]
    assert started(decide(second)) == {"t/y": ["w-0"]}


def test_jobs_alike_behind_a_refused_one_get_its_reason() -> None:
    queues = tree(queue("t"), queue("t/a", quota=gpu_quota(2)))
    jobs = [job(f"t/j{i}", "t/a", gpu=1) for i in range(5)]
    jobs.insert(3, job("t/big", "t/a", gpu=2))
    decisions = decide(session([node("n1", gpu=8)], queues, jobs))
    assert started(decisions) == {"t/j0": ["w-0"], "t/j1": ["w-0"]}
    refused = {k: decisions.reasons[k] for k in ("t/j2", "t/j3", "t/j4")}
    assert {code for code, _ in refused.values()} == {"QuotaExceeded"}
    assert len(set(refused.values())) == 1  # the same words for each
    code, message = decisions.reasons["t/big"]
    assert code == "QuotaExceeded" and message != refused["t/j2"][1]  # its own numbers


def test_a_job_without_room_is_not_given_another_queues_refusal() -> None:
    # t/a and t/b are both at their CPU quota (so t/a, created first, comes first): t/a's
    # second job is refused for quota; then t/b's 7-GPU job finds no room (6 GPUs idle at
    # most). The identical job behind it must be judged on its own, not told t/a's quota (a
    # found bug: it was, and backfill then never tried it).
    one_cpu = Resources(UNBOUNDED, 1000, UNBOUNDED, UNBOUNDED)
    queues = tree(
        queue("t"), queue("t/a", quota=one_cpu), queue("t/b", quota=one_cpu), queue("t/c")
    )
    jobs = [
        job("t/c0", "t/c", gpu=4, cpu=0),
        job("t/b0", "t/b", gpu=2),
        job("t/a1", "t/a", gpu=0),
        job("t/a2", "t/a", gpu=0),
        job("t/b1", "t/b", gpu=7, cpu=0),
        job("t/b2", "t/b", gpu=7, cpu=0),
    ]
    nodes = [node("n1", gpu=8), node("n2", gpu=8)]
    decisions = decide(session(nodes, queues, jobs, {"t/b0": ["n1"], "t/c0": ["n2"]}))
    assert started(decisions) == {"t/a1": ["w-0"]}
    assert decisions.reasons["t/a2"][0] == "QuotaExceeded"
    for name in ("t/b1", "t/b2"):
        code, message = decisions.reasons[name]
        assert code == "Unschedulable" and "t/a" not in message, (name, code, message)
