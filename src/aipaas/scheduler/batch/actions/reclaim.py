"""The reclaim action: a queue below its fair share takes capacity back from queues above
theirs, across the tree.

A pending job may reclaim only while its queue, and every ancestor below the lowest common
ancestor with a victim, stays at or below its fair share after the start (in each resource the
job asks for); a victim's branch (the child of that common ancestor that holds the victim) must
hold more than its fair share of such a resource right before each eviction. Priority across
queues does not decide who may be taken. Since the reclaimer ends at or below its share, the
victim's queue cannot take the room back next cycle: no reclaim loop. A queue below its
guarantee reclaims the same way (its fair share is at least min(guaranteed, demand)).

Guaranteed is "always reachable, by reclaim if need be" (issue 11), also where no queue is
above its fair share (a share made of demand can leave a guarantee unplaceable when the free
room is fragmented): a job that keeps its side (its queue up to the common ancestor) within
its guarantee may also take from a branch that holds more than that branch's guarantee. No
loop either: the reclaimer's side ends within its guarantee and its fair share, so neither
rule lets the victim's side take the room back.

What a branch borrowed in this cycle (allocate's last pass: idle capacity beyond its fair
share) does not count above its share: those jobs cannot be taken in the cycle they started,
and taking another of the branch's jobs for their excess would leave it below its share, from
where it reclaims the room back in the next cycle (a loop Hypothesis found:
tests/unit/scheduler/batch/test_reclaim_borrowed_loop.py).

Last, where the queue order says so (DRF fair share), capacity stranded in the idle slivers of
shared GPUs (where no queue is above its share and so nothing above is reclaimable):
slivers.py.

The tests on the tree (fair share, guarantee, common ancestor): reclaim_rules.py; which running
jobs may be taken, by queue node: reclaim_index.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions.reclaim_index import VictimIndex
from aipaas.scheduler.batch.actions.reclaim_rules import (
    Tree,
    below_guarantee_after,
    guaranteed_mask,
    guaranteed_of,
    holds_of,
    may_reclaim,
    over_guarantee,
    over_share,
    share_of,
    within_share,
)
from aipaas.scheduler.batch.actions.slivers import reclaim_slivers
from aipaas.scheduler.batch.explain import amount
from aipaas.scheduler.batch.model import Eviction, Job, Resources, Task
from aipaas.scheduler.batch.ordering import JobOrder, ordered
from aipaas.scheduler.batch.statement import touched_jobs
from aipaas.scheduler.batch.victim_search import Search
from aipaas.scheduler.batch.victims import (
    Unit,
    domains_for,
    preemptor_jobs,
    shape_of,
)

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

_UNITS = (
    ("gpu", 1000, "GPUs"),
    ("cpu", 1000, "CPUs"),
    ("memory", 1, "MiB"),
    ("gpuMemory", 1, "MiB"),
)


def _label(key: str) -> str:
    return "tenant" if "/" not in key else "queue"


def reclaim(session: Session) -> None:
    """Reclaim from queues above their share (or guarantee); then, where the queue order says
    so (DRF fair share), from the sharers of GPUs whose idle slivers strand the reclaimers'
    shares (slivers.py; the volcano baseline's proportion plugin knows no GPU shares and
    keeps Volcano's rule)."""
    _reclaim_over_share(session)
    if session.policy.queue_order.reclaims_slivers:
        reclaim_slivers(session)


def _reclaim_over_share(session: Session) -> None:
    protected = touched_jobs(session)
    index = VictimIndex(session, protected)
    if not index.over and not index.over_guarantee:
        return  # no queue holds more than its share or guarantee: nothing to take back

    #: may's answers by (queue, gang request): asked for every waiting job before any change
    answers: dict[tuple[str, Resources], bool] = {}

    #: per queue: it exists, has a guarantee and holds less than it of some guaranteed
    #: resource (else no gang keeps it within: every job of it is refused alike)
    guarded: dict[str, bool] = {}

    def may(job: Job) -> bool:
        # With no queue above its share, only a job within its queue's guarantee reclaims.
        queue = job.queue
        has = guarded.get(queue)
        if has is None:
            has = guarded[queue] = queue in session.queues and any(
                g > 0 and a < g
                for a, g in zip(
                    session.allocated[queue].as_tuple(),
                    guaranteed_of(session, queue).as_tuple(),
                    strict=True,
                )
            )
        if not has:
            return False  # cheap: most have none, or hold all of it
        entry = gangs.get(job.key)
        need = entry[1] if entry is not None else Resources()
        found = answers.get((job.queue, need))
        if found is None:
            found = answers[(job.queue, need)] = any(guaranteed_mask(session, [job.queue], need))
        return found

    gangs = session.pending_gangs()
    trees: dict[str, Tree] = {}
    failed: set[tuple[object, ...]] = set()
    #: ``within_share`` of (queue, gang request) while nothing changes (a backlog asks it often)
    within: dict[tuple[str, Resources], bool] = {}
    seen = len(session.account_log)
    # With a queue above its share any job may try (no look at each).
    jobs = preemptor_jobs(session, protected, None if index.over else may)
    if not any(may_reclaim(session, job, within, *gangs.get(job.key, ((), None))) for job in jobs):
        # Not one of them keeps its queue within its fair share: none reclaims, and since
        # nothing changes without a reclaim, that stays so all through the action.
        return
    order = ordered(session, jobs)
    for job in order:
        if not index.over and not index.over_guarantee:
            break  # no queue holds more than its share or guarantee: nothing to take back
        if seen != len(session.account_log):
            within.clear()
            seen = len(session.account_log)
        entry = gangs.get(job.key)
        if entry is None:
            continue  # no gang to start
        gang, need = entry
        # Priority does not decide reclaim: equal shapes of one queue fail alike (and
        # equal requests are refused alike below: the jobs right behind with the same
        # shape and request are passed over with the first, nothing changing between).
        shape = shape_of(job, gang, priority=False)
        if not may_reclaim(session, job, within, gang, need):
            _pass_alike(order, job, shape)
            continue  # its queue would go above its fair share: not a reclaimer
        if shape is not None and shape in failed:
            _pass_alike(order, job, shape)
            continue
        tree = trees.get(job.queue)
        if tree is None:
            tree = trees[job.queue] = Tree(session, job.queue)
        guaranteed = any(guaranteed_mask(session, [job.queue], need))
        victims = index.victims(tree, need, guaranteed)
        if not victims:
            _pass_alike(order, job, shape)
            continue
        before = len(session.decisions.evicted)
        if _try(session, job, gang, need, tree, victims, index.borrowed):
            protected.add(job.key)
            protected.update(e.job for e in session.decisions.evicted[before:])
            index.refresh()
            failed.clear()
        elif shape is not None:
            failed.add(shape)


def _pass_alike(order: JobOrder, job: Job, shape: tuple[object, ...] | None) -> None:
    """Pass over the jobs that come next in ``job``'s queue with its gang's shape and request
    (any priority): with nothing changed since ``job`` was passed over, each would be too."""
    if shape is None:
        return
    # Same kind: the same gang request and shapes, as told by identity.
    order.take_alike(job, priority=False, level=True)


def _try(
    session: Session,
    job: Job,
    gang: Sequence[Task],
    need: Resources,
    tree: Tree,
    victims: Sequence[Job],
    borrowed: Mapping[str, Resources],
) -> bool:
    def may_evict(unit: Unit) -> bool:
        # The victim must hold some of what its branch is over in: evicting it lowers the
        # excess. This is also what rules out a loop: a job that reclaimed last cycle left
        # its side at or below its share in everything it holds.
        top, branch = tree.split(unit.job.queue)
        holds = holds_of(unit)
        if below_guarantee_after(session, unit.job.queue, branch, holds):
            return False  # a guarantee is always reachable: never taken below it by reclaim
        if over_share(session, branch, need, holds, borrowed) is not None:
            return True
        # Reaching a guarantee: the reclaimer's side stays within its guarantee, the
        # victim's branch holds more than its own (in the resources guaranteed).
        mask = guaranteed_mask(session, tree.lineage[:top], need)
        return over_guarantee(session, branch, mask, holds)

    def may_start(units: Sequence[Unit]) -> bool:
        if session.quota_problem(job, need) is not None:
            return False
        top = max((tree.split(u.job.queue)[0] for u in units), default=1)
        return within_share(session, tree.lineage[:top], need)

    search = Search(session, job, gang, may_evict, may_start)
    plan = search.best(session.policy.victim_order.units(victims), domains_for(session, job))
    if plan is None:
        return False

    said: dict[int, str] = {}

    def why(unit: Unit) -> str:
        # Said once per victim, with the numbers as they stand before its first eviction.
        if id(unit) not in said:
            top, branch = tree.split(unit.job.queue)
            over = over_share(session, branch, need, holds_of(unit), borrowed)
            if over is None:  # taken by the guarantee rule
                mask = guaranteed_mask(session, tree.lineage[:top], need)
                index = next((i for i, m in enumerate(mask) if m), 0)
                mine_of, theirs_of, what = guaranteed_of, guaranteed_of, "guarantee"
            else:
                index, mine_of, theirs_of, what = over, share_of, share_of, "fair share"
            _, per, label = _UNITS[index]
            mine = session.allocated[job.queue].as_tuple()[index]
            my_share = mine_of(session, job.queue).as_tuple()[index]
            theirs = session.allocated[branch].as_tuple()[index]
            their_share = theirs_of(session, branch).as_tuple()[index]
            said[id(unit)] = (
                f"{_label(job.queue)} {job.queue} holds {amount(mine, per)} of its {what} "
                f"of {amount(my_share, per)} {label}; {_label(branch)} {branch} holds "
                f"{amount(theirs, per)} of {amount(their_share, per)}"
            )
        return said[id(unit)]

    def make(unit: Unit, task: Task) -> Eviction:
        victim = unit.job
        if unit.extra:
            message = (
                f"elastic task {task.name} above minAvailable {victim.min_available} "
                f"given up for {job.key}: {why(unit)}"
            )
            return Eviction(victim.key, task.name, job.key, "ElasticShrink", message)
        message = f"reclaimed by {job.key}: {why(unit)}"
        return Eviction(victim.key, task.name, job.key, "Reclaimed", message)

    return search.carry_out(plan, make)
