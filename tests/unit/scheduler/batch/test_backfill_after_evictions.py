"""Backfill after preempt and reclaim (batch/actions/backfill.py): evictions lower what queues
hold, so refusals for fair share or quota made earlier in the cycle are asked again, and a job
held back for its queue's head (head_hold.py) is held no longer once that head has started.
Expected decisions worked out by hand in each docstring."""

from __future__ import annotations

from aipaas.scheduler.batch.model import Decisions
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.run import decide
from tests.unit.scheduler.batch.batch_alloc_builders import job, node, queue, session, started, tree

ALL = BatchOptions(actions=("enqueue", "allocate", "preempt", "reclaim", "backfill"))
NO_BACKFILL = BatchOptions(actions=("enqueue", "allocate", "preempt", "reclaim"))
Q = tree(queue("t"), queue("t/a"), queue("t/b"))


def _refused_then_freed(options: BatchOptions) -> Decisions:
    """One 8-GPU node: t/a runs a1 (2 GPUs), t/b runs bl (priority 10, 6 GPUs); bh (priority
    100, 2 GPUs) and b2 (priority 100, 1 GPU) wait in t/b. Shares a 2, b 6."""
    jobs = [
        job("t/a1", "t/a", gpu=2),
        job("t/bl", "t/b", gpu=6, priority=10),
        job("t/bh", "t/b", gpu=2, priority=100),
        job("t/b2", "t/b", gpu=1, priority=100),
    ]
    running = {"t/a1": ["n1"], "t/bl": ["n1"]}
    return decide(session([node("n1", gpu=8)], Q, jobs, running, options=options))


def test_a_fair_share_refusal_is_asked_again_after_evictions() -> None:
    """bh and b2 are refused for fair share in allocate (b holds 6); bh evicts bl and starts
    (b holds 2); backfill finds b2 within the share now (3 <= 6) and starts it. Without backfill
    b2 keeps the refusal of the start of the cycle."""
    d = _refused_then_freed(ALL)
    assert started(d) == {"t/bh": ["w-0"], "t/b2": ["w-0"]}
    assert {e.job for e in d.evicted} == {"t/bl"}
    d = _refused_then_freed(NO_BACKFILL)
    assert started(d) == {"t/bh": ["w-0"]}
    assert d.reasons["t/b2"][0] == "FairShare"


def test_a_refusal_that_still_stands_gets_todays_numbers() -> None:
    """As above, but b2 asks for 5 GPUs: after the preemption b would hold 2 + 5 = 7 > 6. It
    still waits for fair share, and the words say what b holds now (2), not 6."""
    jobs = [
        job("t/a1", "t/a", gpu=2),
        job("t/bl", "t/b", gpu=6, priority=10),
        job("t/bh", "t/b", gpu=2, priority=100),
        job("t/b2", "t/b", gpu=5, priority=100),
    ]
    running = {"t/a1": ["n1"], "t/bl": ["n1"]}
    d = decide(session([node("n1", gpu=8)], Q, jobs, running, options=ALL))
    assert started(d) == {"t/bh": ["w-0"]}
    reason, message = d.reasons["t/b2"]
    assert reason == "FairShare"
    assert "holds 2" in message, message


def _held(options: BatchOptions) -> Decisions:
    """One 8-GPU node: t/a runs big (priority 10, 8 GPUs); hi (priority 100, 1 GPU) and a2
    (priority 50, 2 GPUs) wait in t/a, b1 (2 GPUs) in t/b. Shares a 6, b 2."""
    jobs = [
        job("t/big", "t/a", gpu=8, priority=10),
        job("t/hi", "t/a", priority=100),
        job("t/a2", "t/a", gpu=2, priority=50),
        job("t/b1", "t/b", gpu=2),
    ]
    return decide(session([node("n1", gpu=8)], Q, jobs, {"t/big": ["n1"]}, options=options))


def test_a_job_held_for_a_head_that_started_is_held_no_longer() -> None:
    """hi is refused (a above its share) and holds a2 back; preempt: hi evicts big and starts.
    Backfill: a2 (a holds 1 + 2 <= 6) and b1 start. Without backfill a2 stays HeldForHead."""
    d = _held(ALL)
    assert started(d) == {"t/hi": ["w-0"], "t/a2": ["w-0"], "t/b1": ["w-0"]}
    assert {e.job for e in d.evicted} == {"t/big"}
    d = _held(NO_BACKFILL)
    assert "t/a2" not in started(d)
    assert d.reasons["t/a2"][0] == "HeldForHead"
