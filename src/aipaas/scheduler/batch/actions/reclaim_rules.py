"""The tests reclaim asks of the queue tree (actions/reclaim.py): where a reclaimer stands
against a victim (the lowest common ancestor and the victim's branch), whether a node is above
its fair share or its guarantee in the resources that matter, and whether a start keeps the
reclaimer's side within its fair share or its guarantee."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Job, Resources, Task
from aipaas.scheduler.batch.session import gang_tasks, resources_of
from aipaas.scheduler.batch.victims import Unit

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session

_NOTHING = Resources()


class Tree:
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


def share_of(session: Session, key: str) -> Resources:
    return session.fair_share.get(key, Resources())


def borrowed_holdings(session: Session) -> dict[str, Resources]:
    """Per queue node: what the jobs started in this cycle by borrowing (allocate's last pass:
    idle capacity beyond their fair share, ``session.borrowed``) hold under it."""
    out: dict[str, Resources] = {}
    for key in session.borrowed:
        job = session.jobs[key]
        held = job.allocated()
        for node in session.lineage(job.queue):
            out[node] = out.get(node, Resources()) + held
    return out


def over_share(
    session: Session,
    key: str,
    need: Resources,
    holds: Resources | None = None,
    borrowed: Mapping[str, Resources] | None = None,
) -> int | None:
    """The first resource ``need`` asks for (and ``holds``, the victim's, has some of) of which
    ``key`` holds more than its fair share, not counting what it borrowed in this cycle
    (``borrowed``, by ``borrowed_holdings``): those jobs cannot be taken in the cycle they
    started, and taking another job of the branch for their excess would leave it below its
    share, from where it takes the room back next cycle (a reclaim loop)."""
    counted = session.allocated[key]
    if borrowed:
        counted = counted - borrowed.get(key, _NOTHING)
    held = counted.as_tuple()
    share = share_of(session, key).as_tuple()
    victim = None if holds is None else holds.as_tuple()
    for i, want in enumerate(need.as_tuple()):
        if want > 0 and held[i] > share[i] and (victim is None or victim[i] > 0):
            return i
    return None


def holds_of(unit: Unit) -> Resources:
    total = Resources()
    for task in unit.tasks():
        total = total + task.resources
    return total


def guaranteed_of(session: Session, key: str) -> Resources:
    queue = session.queues.get(key)
    return queue.guaranteed if queue is not None else Resources()


def guaranteed_mask(session: Session, keys: Sequence[str], need: Resources) -> tuple[bool, ...]:
    """The resources ``need`` asks for of which the reclaimer's queue (``keys[0]``) has a
    guarantee and every node of ``keys`` stays within its guarantee with ``need`` added (all
    False when one of them would go above: the guarantee rule does not apply)."""
    own = guaranteed_of(session, keys[0]).as_tuple()
    mask = tuple(w > 0 and g > 0 for w, g in zip(need.as_tuple(), own, strict=True))
    for key in keys:
        after = (session.allocated[key] + need).as_tuple()
        guaranteed = guaranteed_of(session, key).as_tuple()
        if any(m and a > g for m, a, g in zip(mask, after, guaranteed, strict=True)):
            return tuple(False for _ in mask)
    return mask


def over_guarantee(session: Session, key: str, mask: Sequence[bool], holds: Resources) -> bool:
    """``key`` holds more than its guarantee of a resource of ``mask`` that the victim
    (``holds``) has some of."""
    held = session.allocated[key].as_tuple()
    guaranteed = guaranteed_of(session, key).as_tuple()
    victim = holds.as_tuple()
    return any(
        m and h > g and v > 0 for m, h, g, v in zip(mask, held, guaranteed, victim, strict=True)
    )


def below_guarantee_after(session: Session, leaf: str, branch: str, holds: Resources) -> bool:
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
        guaranteed = guaranteed_of(session, key).as_tuple()
        mask = [t > 0 and g > 0 for t, g in zip(taken, guaranteed, strict=True)]
        if any(mask) and all(h <= g for m, h, g in zip(mask, held, guaranteed, strict=True) if m):
            return True
        if key == branch:
            break
    return False


def within_share(session: Session, keys: Sequence[str], need: Resources) -> bool:
    """Every node of ``keys`` holds at most its fair share of what ``need`` asks for, with
    ``need`` added."""
    for key in keys:
        after = (session.allocated[key] + need).as_tuple()
        share = share_of(session, key).as_tuple()
        for i, want in enumerate(need.as_tuple()):
            if want > 0 and after[i] > share[i]:
                return False
    return True


def may_reclaim(
    session: Session,
    job: Job,
    memo: dict[tuple[str, Resources], bool],
    gang: Sequence[Task] | None = None,
    need: Resources | None = None,
) -> bool:
    """The job has a gang and its queue stays within its fair share with it (``within_share``,
    remembered per (queue, gang request) in ``memo`` while nothing changes)."""
    if gang is None:
        gang = gang_tasks(job)
    if not gang:
        return False
    if need is None:
        need = resources_of(gang)
    ok = memo.get((job.queue, need))
    if ok is None:
        ok = memo[(job.queue, need)] = within_share(session, [job.queue], need)
    return ok
