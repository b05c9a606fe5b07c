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

Last, under DRF fair share, capacity stranded in the idle slivers of shared GPUs (where no
queue is above its share and so nothing above is reclaimable): slivers.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions.slivers import reclaim_slivers
from aipaas.scheduler.batch.explain import amount
from aipaas.scheduler.batch.model import Eviction, Job, Resources, Task
from aipaas.scheduler.batch.ordering import JobOrder, ordered
from aipaas.scheduler.batch.session import gang_tasks, resources_of
from aipaas.scheduler.batch.statement import touched_jobs
from aipaas.scheduler.batch.victim_search import Search
from aipaas.scheduler.batch.victims import (
    Unit,
    domains_for,
    eligible,
    preemptor_jobs,
    shape_of,
    units_of,
)

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

_UNITS = (
    ("gpu", 1000, "GPUs"),
    ("cpu", 1000, "CPUs"),
    ("memory", 1, "MiB"),
    ("gpuMemory", 1, "MiB"),
)


class _Tree:
    """The reclaimer's lineage and, per victim queue, the lowest common ancestor's place in it
    and the victim's branch (the common ancestor's child on the victim's side)."""

    def __init__(self, session: Session, leaf: str) -> None:
        self.session = session
        self.lineage = list(session.lineage(leaf))
        self.depth = {key: i for i, key in enumerate(self.lineage)}
        self._memo: dict[str, tuple[int, str]] = {}

    def split(self, queue: str) -> tuple[int, str]:
        """(index of the common ancestor in the reclaimer's lineage, the victim's branch)."""
        found = self._memo.get(queue)
        if found is None:
            branch = queue
            for key in self.session.lineage(queue):
                if key in self.depth:
                    found = (self.depth[key], branch)
                    break
                branch = key
            else:  # separate trees: the whole lineage is the reclaimer's side
                found = (len(self.lineage), branch)
            self._memo[queue] = found
        return found


def _share(session: Session, key: str) -> Resources:
    return session.fair_share.get(key, Resources())


def _over(
    session: Session, key: str, need: Resources, holds: Resources | None = None
) -> int | None:
    """The first resource ``need`` asks for (and ``holds``, the victim's, has some of) of which
    ``key`` holds more than its fair share."""
    held = session.allocated[key].as_tuple()
    share = _share(session, key).as_tuple()
    victim = None if holds is None else holds.as_tuple()
    for i, want in enumerate(need.as_tuple()):
        if want > 0 and held[i] > share[i] and (victim is None or victim[i] > 0):
            return i
    return None


def _holds(unit: Unit) -> Resources:
    total = Resources()
    for task in unit.tasks():
        total = total + task.resources
    return total


def _guaranteed(session: Session, key: str) -> Resources:
    queue = session.queues.get(key)
    return queue.guaranteed if queue is not None else Resources()


def _guaranteed_mask(session: Session, keys: Sequence[str], need: Resources) -> tuple[bool, ...]:
    """The resources ``need`` asks for of which the reclaimer's queue (``keys[0]``) has a
    guarantee and every node of ``keys`` stays within its guarantee with ``need`` added (all
    False when one of them would go above: the guarantee rule does not apply)."""
    own = _guaranteed(session, keys[0]).as_tuple()
    mask = tuple(w > 0 and g > 0 for w, g in zip(need.as_tuple(), own, strict=True))
    for key in keys:
        after = (session.allocated[key] + need).as_tuple()
        guaranteed = _guaranteed(session, key).as_tuple()
        if any(m and a > g for m, a, g in zip(mask, after, guaranteed, strict=True)):
            return tuple(False for _ in mask)
    return mask


def _over_guarantee(session: Session, key: str, mask: Sequence[bool], holds: Resources) -> bool:
    """``key`` holds more than its guarantee of a resource of ``mask`` that the victim
    (``holds``) has some of."""
    held = session.allocated[key].as_tuple()
    guaranteed = _guaranteed(session, key).as_tuple()
    victim = holds.as_tuple()
    return any(
        m and h > g and v > 0 for m, h, g, v in zip(mask, held, guaranteed, victim, strict=True)
    )


def _below_guarantee_after(session: Session, leaf: str, branch: str, holds: Resources) -> bool:
    """Whether a queue node between the victim's leaf and its ``branch`` (both included) holds
    no more than its guarantee in every guaranteed resource the victim holds: taking from it
    would break the guarantee's promise (and it could reclaim the job back by the guarantee
    rule, which asks the same of every guaranteed resource: a loop). A node above its
    guarantee in one of them is not shielded by the others (a CPU guarantee larger than its
    jobs' CPU use does not keep a queue far over its GPU share), and may lose a whole gang even
    if that takes it below (a gang is not divisible)."""
    taken = holds.as_tuple()
    for key in session.lineage(leaf):
        held = session.allocated[key].as_tuple()
        guaranteed = _guaranteed(session, key).as_tuple()
        mask = [t > 0 and g > 0 for t, g in zip(taken, guaranteed, strict=True)]
        if any(mask) and all(h <= g for m, h, g in zip(mask, held, guaranteed, strict=True) if m):
            return True
        if key == branch:
            break
    return False


def _within(session: Session, keys: Sequence[str], need: Resources) -> bool:
    """Every node of ``keys`` holds at most its fair share of what ``need`` asks for, with
    ``need`` added."""
    for key in keys:
        after = (session.allocated[key] + need).as_tuple()
        share = _share(session, key).as_tuple()
        for i, want in enumerate(need.as_tuple()):
            if want > 0 and after[i] > share[i]:
                return False
    return True


def _label(key: str) -> str:
    return "tenant" if "/" not in key else "queue"


class _Index:
    """Per action: the jobs that may be taken, by leaf; each queue node's leaves that hold such
    jobs; and which of those nodes hold more than their fair share (per resource), refreshed
    after each reclaim. A reclaimer looks only at over-share nodes whose parent is in its
    lineage (its branches), not at every running job."""

    def __init__(self, session: Session, protected: set[str]) -> None:
        self.session = session
        self.protected = protected
        self.by_leaf: dict[str, list[Job]] = {}
        for job in session.running:  # nothing started this cycle may be taken
            if eligible(session, job, protected):
                self.by_leaf.setdefault(job.queue, []).append(job)
        self.leaves_under: dict[str, list[str]] = {}
        for leaf in self.by_leaf:
            for key in session.lineage(leaf):
                if key:
                    self.leaves_under.setdefault(key, []).append(leaf)
        self.over: dict[str, tuple[bool, ...]] = {}
        #: nodes above their guarantee, not above their share: only a job within its own
        #: guarantee may take from these
        self.over_guarantee: dict[str, tuple[bool, ...]] = {}
        self.refresh()

    def refresh(self) -> None:
        self.over.clear()
        self.over_guarantee.clear()
        for key in self.leaves_under:
            held = self.session.allocated[key].as_tuple()
            share = _share(self.session, key).as_tuple()
            flags = tuple(h > f for h, f in zip(held, share, strict=True))
            if any(flags):
                self.over[key] = flags
                continue
            guaranteed = _guaranteed(self.session, key).as_tuple()
            flags = tuple(h > g for h, g in zip(held, guaranteed, strict=True))
            if any(flags):
                self.over_guarantee[key] = flags

    def victims(self, tree: _Tree, need: Resources, guaranteed: bool = False) -> list[Job]:
        """Jobs in branches beside ``tree``'s lineage above their fair share (``guaranteed``:
        or above their guarantee) in a resource ``need`` asks for."""
        asked = [want > 0 for want in need.as_tuple()]
        out: list[Job] = []
        over = list(self.over.items())
        if guaranteed:
            over += self.over_guarantee.items()
        for key, flags in over:
            queue = self.session.queues.get(key)
            if queue is None or key in tree.depth or queue.parent not in tree.depth:
                continue  # not a branch beside the reclaimer's lineage
            if not any(f and a for f, a in zip(flags, asked, strict=True)):
                continue
            for leaf in self.leaves_under[key]:
                out.extend(
                    j for j in self.by_leaf[leaf] if j.is_running and j.key not in self.protected
                )
        return out


def _need(gang: Sequence[Task]) -> Resources:
    need = Resources()
    for task in gang:
        need = need + task.resources
    return need


def _holds_any(held: Resources, over: Sequence[bool], asked: Sequence[bool]) -> bool:
    return any(h > 0 and o and a for h, o, a in zip(held.as_tuple(), over, asked, strict=True))


def _may_reclaim(
    session: Session,
    job: Job,
    memo: dict[tuple[str, Resources], bool],
    gang: Sequence[Task] | None = None,
    need: Resources | None = None,
) -> bool:
    """The job has a gang and its queue stays within its fair share with it (``_within``,
    remembered per (queue, gang request) in ``memo`` while nothing changes)."""
    if gang is None:
        gang = gang_tasks(job)
    if not gang:
        return False
    if need is None:
        need = resources_of(gang)
    ok = memo.get((job.queue, need))
    if ok is None:
        ok = memo[(job.queue, need)] = _within(session, [job.queue], need)
    return ok


def reclaim(session: Session) -> None:
    """Reclaim from queues above their share (or guarantee); then, under DRF fair share, from
    the sharers of GPUs whose idle slivers strand the reclaimers' shares (slivers.py; the
    volcano baseline's proportion plugin knows no GPU shares and keeps Volcano's rule)."""
    _reclaim_over_share(session)
    if session.options.fairShare == "drf":
        reclaim_slivers(session)


def _reclaim_over_share(session: Session) -> None:
    protected = touched_jobs(session)
    index = _Index(session, protected)
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
                    _guaranteed(session, queue).as_tuple(),
                    strict=True,
                )
            )
        if not has:
            return False  # cheap: most have none, or hold all of it
        entry = gangs.get(job.key)
        need = entry[1] if entry is not None else Resources()
        found = answers.get((job.queue, need))
        if found is None:
            found = answers[(job.queue, need)] = any(_guaranteed_mask(session, [job.queue], need))
        return found

    gangs = session.pending_gangs()
    trees: dict[str, _Tree] = {}
    failed: set[tuple[object, ...]] = set()
    #: ``_within`` of (queue, gang request) while nothing changes (a backlog asks it often)
    within: dict[tuple[str, Resources], bool] = {}
    seen = len(session.account_log)
    # With a queue above its share any job may try (no look at each).
    jobs = preemptor_jobs(session, protected, None if index.over else may)
    if not any(_may_reclaim(session, job, within, *gangs.get(job.key, ((), None))) for job in jobs):
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
        if not _may_reclaim(session, job, within, gang, need):
            _pass_alike(order, job, shape)
            continue  # its queue would go above its fair share: not a reclaimer
        if shape is not None and shape in failed:
            _pass_alike(order, job, shape)
            continue
        tree = trees.get(job.queue)
        if tree is None:
            tree = trees[job.queue] = _Tree(session, job.queue)
        guaranteed = any(_guaranteed_mask(session, [job.queue], need))
        victims = index.victims(tree, need, guaranteed)
        if not victims:
            _pass_alike(order, job, shape)
            continue
        before = len(session.decisions.evicted)
        if _try(session, job, gang, need, tree, victims):
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
    tree: _Tree,
    victims: Sequence[Job],
) -> bool:
    def may_evict(unit: Unit) -> bool:
        # The victim must hold some of what its branch is over in: evicting it lowers the
        # excess. This is also what rules out a loop: a job that reclaimed last cycle left
        # its side at or below its share in everything it holds.
        top, branch = tree.split(unit.job.queue)
        holds = _holds(unit)
        if _below_guarantee_after(session, unit.job.queue, branch, holds):
            return False  # a guarantee is always reachable: never taken below it by reclaim
        if _over(session, branch, need, holds) is not None:
            return True
        # Reaching a guarantee: the reclaimer's side stays within its guarantee, the
        # victim's branch holds more than its own (in the resources guaranteed).
        mask = _guaranteed_mask(session, tree.lineage[:top], need)
        return _over_guarantee(session, branch, mask, holds)

    def may_start(units: Sequence[Unit]) -> bool:
        if session.quota_problem(job, need) is not None:
            return False
        top = max((tree.split(u.job.queue)[0] for u in units), default=1)
        return _within(session, tree.lineage[:top], need)

    search = Search(session, job, gang, may_evict, may_start)
    plan = search.best(units_of(victims), domains_for(session, job))
    if plan is None:
        return False

    said: dict[int, str] = {}

    def why(unit: Unit) -> str:
        # Said once per victim, with the numbers as they stand before its first eviction.
        if id(unit) not in said:
            top, branch = tree.split(unit.job.queue)
            over = _over(session, branch, need, _holds(unit))
            if over is None:  # taken by the guarantee rule
                mask = _guaranteed_mask(session, tree.lineage[:top], need)
                index = next((i for i, m in enumerate(mask) if m), 0)
                mine_of, theirs_of, what = _guaranteed, _guaranteed, "guarantee"
            else:
                index, mine_of, theirs_of, what = over, _share, _share, "fair share"
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

    before = len(session.decisions.evicted)
    if not search.carry_out(plan, make):
        return False
    for eviction in session.decisions.evicted[before:]:
        session.wait(session.jobs[eviction.job], eviction.reason, eviction.message)
    return True
