"""The Statement preempt and reclaim build on: evictions and starts applied at once (later
checks see them), committed whole as decisions or discarded without a trace."""

from __future__ import annotations

import pytest

from aipaas.scheduler.batch.model import Eviction
from aipaas.scheduler.batch.session import Session
from aipaas.scheduler.batch.statement import Statement, evicted_jobs, touched_jobs
from tests.unit.scheduler.batch.test_batch_preempt_builders import World, consistent, node


def _world() -> Session:
    w = World([node("n1", 4)]).queue("t").queue("t/a")
    w.job("t/low", "t/a", tasks=2, gpu=2, on=["n1", "n1"], since=[10.0, 20.0])
    w.job("t/high", "t/a", gpu=4)
    return w.session()


def _swap(session: Session) -> Statement:
    """Evict low's two tasks and start high on the room they free (not committed)."""
    st = session.statement()
    low, high = session.jobs["t/low"], session.jobs["t/high"]
    for task in list(low.running_tasks):
        st.evict(low, task, Eviction(low.key, task.name, high.key, "Preempted", "m"))
    placed = session.engine.place([high.tasks[0].request])
    assert isinstance(placed, list)
    st.allocate(high, high.tasks[0], placed[0])
    return st


def test_changes_apply_at_once_and_discard_restores_everything() -> None:
    s = _world()
    st = _swap(s)
    low, high = s.jobs["t/low"], s.jobs["t/high"]
    assert not low.is_running and low.started is None
    assert high.is_running and high.started == s.now
    assert s.allocated["t/a"].gpu_milli == 4000
    consistent(s)
    st.discard()
    assert [t.since for t in low.tasks] == [10.0, 20.0] and low.started == 10.0
    assert not high.is_running and high.started is None and high.tasks[0].since is None
    assert s.allocated["t/a"].gpu_milli == 4000
    assert (s.decisions.started, s.decisions.evicted) == ([], [])
    consistent(s)


def test_commit_makes_decisions_and_marks_the_jobs_touched() -> None:
    s = _world()
    st = _swap(s)
    st.commit()
    assert [(e.job, e.task) for e in s.decisions.evicted] == [("t/low", "w-0"), ("t/low", "w-1")]
    assert [(x.job, x.task) for x in s.decisions.started] == [("t/high", "w-0")]
    assert evicted_jobs(s) == {"t/low"}
    assert touched_jobs(s) == {"t/low", "t/high"}
    with pytest.raises(RuntimeError, match="already committed"):
        st.discard()


def test_evicting_a_task_that_does_not_run_is_refused() -> None:
    s = _world()
    high = s.jobs["t/high"]
    st = s.statement()
    with pytest.raises(ValueError, match="does not run"):
        st.evict(high, high.tasks[0], Eviction(high.key, "w-0", "x", "Preempted", "m"))
