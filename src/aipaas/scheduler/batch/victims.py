"""Victims for preempt and reclaim: who may be taken, and in what steps and order.

Candidates come as ``Unit``s (victim_units.py): an elastic task above minAvailable, or a whole
job; the session's victim order (``Session.policy.victim_order``, batch/policy_rules.py) says
in which order they are tried. Never a job that is not preemptible, that ran less than its
queue's minRuntime, or that was started or evicted this cycle (``eligible``).
``victim_search.Search`` finds the fewest, cheapest of them that let a preemptor's gang start.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from aipaas.scheduler.batch.model import Eviction, Job, Task
from aipaas.scheduler.batch.victim_units import Unit as Unit
from aipaas.scheduler.batch.victim_units import biggest_first as biggest_first
from aipaas.scheduler.batch.victim_units import task_started as task_started
from aipaas.scheduler.batch.victim_units import units_of as units_of

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


#: builds the Eviction of one task of a unit, with the state just before it is evicted
EvictionMaker = Callable[[Unit, Task], Eviction]


def eligible(session: Session, job: Job, protected: Collection[str]) -> bool:
    """A job preempt or reclaim may take from: preemptible, running, not started or touched
    this cycle (``protected``), and running for at least its queue's minRuntime."""
    if not job.preemptible or not job.is_running or job.key in protected:
        return False
    queue = session.queues.get(job.queue)
    min_runtime = queue.min_runtime if queue is not None else 0.0
    started = job.started if job.started is not None else session.now
    return session.now - started >= min_runtime


def domains_for(session: Session, job: Job) -> list[frozenset[str]] | None:
    """The topology domains of the level the gang requires (None: it requires none)."""
    label = job.topology_required
    if not label:
        return None
    memo = session.memos.domains
    if label not in memo:
        domains: dict[str, set[str]] = {}
        for node in session.engine.nodes:
            value = node.labels.get(label)
            if value is not None:
                domains.setdefault(value, set()).add(node.name)
        memo[label] = [frozenset(d) for _, d in sorted(domains.items())]
    return memo[label]


_NOT_PREEMPTORS = frozenset({"WaitingForDependencies", "HeldForHead"})


def preemptor_jobs(
    session: Session,
    protected: Collection[str],
    may: Callable[[Job], bool] | None = None,
    *,
    above: Mapping[str, int] | None = None,
) -> list[Job]:
    """Pending jobs that may take room from others (in the snapshot's order): let in by
    enqueue, not running, not started or evicted this cycle, not waiting for dependencies,
    not held back for its queue's head, and passing the action's own first look ``may``
    (asked before ordering: a big backlog with nothing to take costs one pass); ``above``:
    only jobs of a queue it names, of a priority above the number it gives (a look without
    a call). ``may`` must answer alike for jobs alike (one leaf, priority, level and gang
    request): with a backlog book it is asked once per group, and the jobs come in the book's
    order (callers order them)."""
    enqueued = session.enqueued
    waiting = session.waiting
    jobs = []
    everyone = session.jobs
    # Running now: since the cycle began (what started in it is protected).
    running = {job.key for job in session.running}
    # Only jobs with a gang to start can take room (the others are passed over by every
    # action that asks): the session keeps them, a backlog is not walked twice.
    gangs = session.pending_gangs()
    book = session.book  # a backlog kept across cycles: a look per group (backlog_book.py)
    for key in gangs if book is None else book.candidates(gangs, may, above):
        if key in protected or key in running or (enqueued is not None and key not in enqueued):
            continue
        if key not in gangs:
            continue  # a job of the book's backlog that started in this cycle
        why = waiting.get(key)
        # Held back for its queue's head (head_hold.py): taking room for it would take what
        # the head waits for, as starting it would.
        if why is not None and why[0] in _NOT_PREEMPTORS:
            continue
        job = everyone[key]
        if above is not None and job.priority <= above.get(job.queue, _NO_PRIORITY):
            continue
        if may is not None and not may(job):
            continue
        jobs.append(job)
    return jobs


#: above every priority: a queue ``above`` does not name lets no job through
_NO_PRIORITY: Final = 2**63


def shape_of(job: Job, gang: Sequence[Task], *, priority: bool = True) -> tuple[object, ...] | None:
    """What makes two preemptors equal for the search (None when claims make it unsafe to
    say): one that failed tells that an equal one fails too, until something changes."""
    from aipaas.scheduler.batch.session import gang_shape

    shapes = gang_shape(job, gang)
    if shapes is None:
        return None
    return (job.queue, job.priority if priority else None, job.topology_required, shapes)
