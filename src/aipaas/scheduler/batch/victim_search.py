"""The victim search shared by preempt and reclaim: the fewest, cheapest evictions that let a
preemptor's gang start.

A ``Search`` evicts candidates (``victims.Unit``s) in their order inside a Statement until
the gang places, then reprieves each victim (last chosen first) whose eviction proves
needless, and undoes it all: the action replays the best plan found in a fresh Statement and
commits it. Plans are tried over the whole cluster and per node (per topology domain for a
gang that needs one), and the cheapest wins: a plan of extras only before any that takes whole
jobs; then the lowest priority among the whole jobs taken, the fewest whole jobs, the lowest
priority and fewest among extras, and the least GPU-time lost (GPU-milli x seconds run). When
the first greedy takes several jobs, a second one takes bigger jobs first (same priority).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aipaas.scheduler.batch.model import Eviction, Job, Resources, Task
from aipaas.scheduler.batch.statement import claims_over_quota
from aipaas.scheduler.batch.victims import EvictionMaker, Unit, task_started
from aipaas.scheduler.framework.types import Placement, Unschedulable

if TYPE_CHECKING:
    from aipaas.scheduler.batch.session import Session
    from aipaas.scheduler.batch.statement import Statement

#: per-node (per-domain) plans evaluated with real placements, the best estimates first
NODE_PLANS = 8

#: (highest priority among whole-job victims, whole jobs, highest priority among extras,
#: extras, GPU-time lost): lower is better, compared in that order
Cost = tuple[int, int, int, int, int]
_NONE = -(2**62)  # the "highest priority" of no victim at all


def _first3(r: Resources) -> tuple[int, int, int]:
    # What engine.free reports: GPU memory is checked by placement, not by these sums.
    return (r.gpu_milli, r.cpu_milli, r.memory_mib)


def covers(have: Resources, need: Resources) -> bool:
    return all(h >= n for h, n in zip(_first3(have), _first3(need), strict=True))


@dataclass(slots=True)
class Plan:
    units: list[Unit]
    nodes: frozenset[str] | None
    cost: Cost


class Search:
    """Victim search for one preemptor's gang.

    ``may_evict(unit)`` is asked before each eviction with the state as it is then (reclaim:
    the victim's branch still holds more than its fair share); ``may_start(units)`` after the
    evictions, before placing (quota, and reclaim's fair-share bound on the reclaimer)."""

    def __init__(
        self,
        session: Session,
        job: Job,
        gang: Sequence[Task],
        may_evict: Callable[[Unit], bool],
        may_start: Callable[[Sequence[Unit]], bool],
        allowed: frozenset[str] | None = None,
    ) -> None:
        self.session = session
        #: the nodes the gang may start on (None: any), as backfill reservations allow
        self.allowed = allowed
        self.job = job
        self.gang = list(gang)
        self.pods = [t.request for t in self.gang]
        self.need = Resources()
        for task in self.gang:
            self.need = self.need + task.resources
        self.may_evict = may_evict
        self.may_start = may_start

    # --- trials (always undone) ------------------------------------------------------

    def _place(self, nodes: frozenset[str] | None) -> list[Placement] | None:
        if self.allowed is not None:
            nodes = self.allowed if nodes is None else nodes & self.allowed
        placed = self.session.engine.place(self.pods, nodes)
        return None if isinstance(placed, Unschedulable) else placed

    def _fits(self, units: Sequence[Unit], nodes: frozenset[str] | None) -> bool:
        if not self.may_start(units):
            return False
        placed = self._place(nodes)
        if placed is None:
            return False
        for placement in placed:
            self.session.engine.release(placement)
        return True

    def _evict(self, statement: Statement, unit: Unit, make: EvictionMaker | None) -> None:
        for task in unit.tasks():
            eviction = (
                make(unit, task)
                if make is not None
                else Eviction(self.job.key, task.name, self.job.key, "Trial", "")
            )
            statement.evict(unit.job, task, eviction)

    def _free(self, nodes: frozenset[str] | None) -> Resources:
        if nodes is None:
            # An upper bound when the engine holds more than the snapshot's jobs: it only
            # decides when placement is worth trying.
            return self.session.capacity - self.session.allocated[""]
        total = Resources()
        for name in nodes:
            total = total + self.session.engine.free(name)
        return total

    def greedy(self, units: Sequence[Unit], nodes: frozenset[str] | None) -> list[Unit] | None:
        """Evict in order until the gang places; the units taken, or None."""
        statement = self.session.statement()
        chosen: list[Unit] = []
        try:
            have = self._free(nodes)
            for unit in units:
                tasks = unit.tasks()
                if not tasks or not self.may_evict(unit):
                    continue
                for task in tasks:
                    if task.placement is not None and (
                        nodes is None or task.placement.node in nodes
                    ):
                        have = have + task.resources
                self._evict(statement, unit, None)
                chosen.append(unit)
                if covers(have, self.need) and self._fits(chosen, nodes):
                    return chosen
            return None
        finally:
            statement.discard()

    def trial(self, units: Sequence[Unit], nodes: frozenset[str] | None) -> bool:
        statement = self.session.statement()
        try:
            for unit in units:
                if not unit.tasks() or not self.may_evict(unit):
                    return False
                self._evict(statement, unit, None)
            return self._fits(units, nodes)
        finally:
            statement.discard()

    def reprieve(self, chosen: list[Unit], nodes: frozenset[str] | None) -> list[Unit]:
        """Hold back each victim, last chosen first, when the gang still fits without it."""
        for i in range(len(chosen) - 1, -1, -1):
            unit = chosen[i]
            if unit.extra and any(u.job is unit.job and not u.extra for u in chosen):
                continue  # the whole job goes anyway, and this extra with it
            rest = chosen[:i] + chosen[i + 1 :]
            if self.trial(rest, nodes):
                chosen = rest
        return chosen

    # --- plans -----------------------------------------------------------------------

    def cost(self, units: Sequence[Unit]) -> Cost:
        now = self.session.now
        wholes = [u.job.priority for u in units if not u.extra]
        extras = [u.job.priority for u in units if u.extra]
        lost = 0.0
        for unit in units:
            for task in unit.tasks():
                lost += task.resources.gpu_milli * max(now - task_started(unit.job, task), 0.0)
        return (
            max(wholes, default=_NONE),
            len(wholes),
            max(extras, default=_NONE),
            len(extras),
            int(lost),
        )

    def plan(self, units: Sequence[Unit], nodes: frozenset[str] | None) -> Plan | None:
        """Greedy then reprieve over ``units`` (already limited to ``nodes``' victims); when
        that takes several whole jobs, the same in the victim order's second order (bigger jobs
        first), and the cheaper."""
        found = self._plan(units, nodes)
        if found is not None and found.cost[1] > 1:
            other = self._plan(self.session.policy.victim_order.second(units), nodes)
            if other is not None and other.cost < found.cost:
                found = other
        return found

    def _plan(self, units: Sequence[Unit], nodes: frozenset[str] | None) -> Plan | None:
        chosen = self.greedy(units, nodes)
        if chosen is None:
            return None
        chosen = self.reprieve(chosen, nodes)
        if not chosen:
            # It fits in room that is free now (an earlier preemption left it): a start
            # without victims is allocate's and backfill's, with their fair-share checks.
            return None
        return Plan(chosen, nodes, self.cost(chosen))

    def estimate(self, units: Sequence[Unit], nodes: frozenset[str]) -> Cost | None:
        """Without placing: the victims on ``nodes`` whose sum first covers the gang."""
        have = self._free(nodes)
        taken: list[Unit] = []
        for unit in units:
            taken.append(unit)
            for task in unit.tasks():
                if task.placement is not None and task.placement.node in nodes:
                    have = have + task.resources
            if covers(have, self.need):
                return self.cost(taken)
        return None

    def best(self, units: Sequence[Unit], domains: Sequence[frozenset[str]] | None) -> Plan | None:
        """The cheapest plan: over the whole cluster and on each node that holds a candidate
        (``domains`` None), or in each topology domain; only the most promising
        ``NODE_PLANS`` scopes (by an estimate without placing) are tried for real."""
        plans: list[Plan] = []
        if domains is None:
            found = self.plan(units, None)
            if found is not None:
                plans.append(found)
        rank = {id(u): i for i, u in enumerate(units)}
        by_node: dict[str, list[Unit]] = {}
        for unit in units:
            for task in unit.tasks():
                if task.placement is not None:
                    listed = by_node.setdefault(task.placement.node, [])
                    if not listed or listed[-1] is not unit:
                        listed.append(unit)
        ranked: list[tuple[Cost, int, frozenset[str], list[Unit]]] = []
        if domains is None:
            for index, (name, scoped) in enumerate(by_node.items()):
                scope = frozenset((name,))
                guess = self.estimate(scoped, scope)
                if guess is not None:
                    ranked.append((guess, index, scope, scoped))
        else:
            for index, scope in enumerate(domains):
                merged = {id(u): u for name in scope for u in by_node.get(name, [])}
                scoped = sorted(merged.values(), key=lambda u: rank[id(u)])
                guess = self.estimate(scoped, scope) if scoped else None
                if guess is not None:
                    ranked.append((guess, index, scope, scoped))
        ranked.sort(key=lambda r: (r[0], r[1]))
        for _, _, scope, scoped in ranked[:NODE_PLANS]:
            found = self.plan(scoped, scope)
            if found is not None:
                plans.append(found)
        if not plans:
            return None
        return min(plans, key=lambda p: p.cost)  # min keeps the first of equal costs

    def carry_out(self, plan: Plan, make: EvictionMaker) -> bool:
        """Evict the plan's victims and start the gang in one committed statement; nothing
        changes when the gang does not place after all. Each evicted job waits again with its
        eviction's reason and words."""
        before = len(self.session.decisions.evicted)
        if not self._commit(plan, make):
            return False
        for eviction in self.session.decisions.evicted[before:]:
            self.session.wait(self.session.jobs[eviction.job], eviction.reason, eviction.message)
        return True

    def _commit(self, plan: Plan, make: EvictionMaker) -> bool:
        statement = self.session.statement()
        for unit in plan.units:
            if not unit.tasks() or not self.may_evict(unit):
                statement.discard()
                return False
            self._evict(statement, unit, make)
        placed = self._place(plan.nodes) if self.may_start(plan.units) else None
        if placed is None:
            statement.discard()
            return False
        for task, placement in zip(self.gang, placed, strict=True):
            statement.allocate(self.job, task, placement)
        if claims_over_quota(statement, self.job, self.gang) is not None:
            return False  # its claims' GPUs break a quota: no victim evicted for nothing
        statement.commit()
        return True
