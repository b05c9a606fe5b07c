"""Per reclaim action: which running jobs may be taken, from which queue nodes (those above
their fair share or their guarantee), kept up to date after each reclaim (actions/reclaim.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aipaas.scheduler.batch.actions.reclaim_rules import (
    Tree,
    borrowed_holdings,
    guaranteed_of,
    share_of,
)
from aipaas.scheduler.batch.model import Job, Resources
from aipaas.scheduler.batch.victims import eligible

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session


class VictimIndex:
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
        #: what each node's jobs borrowed in this cycle hold: not counted above its share
        #: (reclaim_rules.over_share)
        self.borrowed = borrowed_holdings(session)
        self.over: dict[str, tuple[bool, ...]] = {}
        #: nodes above their guarantee, not above their share: only a job within its own
        #: guarantee may take from these
        self.over_guarantee: dict[str, tuple[bool, ...]] = {}
        self.refresh()

    def refresh(self) -> None:
        self.over.clear()
        self.over_guarantee.clear()
        for key in self.leaves_under:
            allocated = self.session.allocated[key]
            lent = self.borrowed.get(key)
            held = (allocated if lent is None else allocated - lent).as_tuple()
            share = share_of(self.session, key).as_tuple()
            flags = tuple(h > f for h, f in zip(held, share, strict=True))
            if any(flags):
                self.over[key] = flags
                continue
            held = allocated.as_tuple()
            guaranteed = guaranteed_of(self.session, key).as_tuple()
            flags = tuple(h > g for h, g in zip(held, guaranteed, strict=True))
            if any(flags):
                self.over_guarantee[key] = flags

    def victims(self, tree: Tree, need: Resources, guaranteed: bool = False) -> list[Job]:
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
