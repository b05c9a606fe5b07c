"""Step 6 extension: node pools grow when pending work cannot fit and shrink when nodes stay
idle (issue 14). Each cycle, per NodePool: ask its backend's provider which nodes exist, see
what runs on them (the Node statuses this cycle wrote) and which jobs wait for room, let the
pure planner (autoscale/pool_plan.py) decide, carry the plan out through the provider, and
write the pool's status and an event per change.

Who calls it: controller/extension_set.py. The pending work is read after this cycle's
scheduling, so work that could not be placed asks for nodes in the cycle it was seen.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aipaas.api.duration import seconds
from aipaas.api.job import CANCEL_ANNOTATION, Job, JobPhase
from aipaas.api.node import Node
from aipaas.api.pool import NodePool, NodePoolStatus, PoolNodeStatus
from aipaas.api.resources import cpu_milli, memory_mib
from aipaas.autoscale.lending import reclaim_problem, terms_of
from aipaas.autoscale.pool_plan import (
    Demand,
    NodeUse,
    PendingJob,
    PoolLimits,
    PoolPlan,
    PoolShape,
    plan_pool,
)
from aipaas.autoscale.pool_provider import NodeState, NodeTemplate, PoolNode, pool_provider
from aipaas.clock import isoformat
from aipaas.controller.extensions import CycleContext, CycleExtension
from aipaas.settings import Settings

log = logging.getLogger("aipaas.controller")

#: pending reasons more nodes would not cure
NOT_FOR_LACK_OF_NODES = frozenset({"QuotaExceeded", "WaitingForDependencies", "Waiting"})


@dataclass
class PoolController:
    name: str = "pools"
    #: node -> since when nothing runs there, as this process saw it (a restart counts anew:
    #: nodes live longer, never shorter)
    idle_since: dict[str, float] = field(default_factory=dict)
    #: the controller's cycle and stop grace: how soon lent GPUs can come back
    cycle_seconds: float = 1.0
    stop_grace_seconds: float = 5.0

    def run(self, context: CycleContext) -> None:
        pools = [p for p in context.store.list_objects("NodePool", "") if isinstance(p, NodePool)]
        if not pools:
            return
        pending = pending_jobs(context.store.list_objects("Job", None, phases=[JobPhase.PENDING]))
        usage = {n.name: n for n in context.store.list_objects("Node", "") if isinstance(n, Node)}
        now = context.clock.now().timestamp()
        for pool in pools:
            provider = pool_provider(context.backend, pool.spec.backend)
            if provider is None:
                self._status(context, pool, [], None, f"backend {pool.spec.backend} has no pools")
                continue
            nodes = provider.list_nodes(pool.name)
            lending = terms_of(pool)
            late = (
                reclaim_problem(lending, self.cycle_seconds, self.stop_grace_seconds)
                if lending is not None
                else None
            )
            uses = [self._use(node, usage.get(node.name), now) for node in nodes]
            plan = plan_pool(shape_of(pool), limits_of(pool), uses, pending, now)
            if plan.changes:
                if plan.create:
                    provider.create_nodes(template_of(pool), plan.create)
                if plan.undrain:
                    provider.undrain_nodes(pool.name, plan.undrain)
                if plan.drain:
                    provider.drain_nodes(pool.name, plan.drain)
                if plan.delete:
                    removed = provider.delete_nodes(pool.name, plan.delete)
                    for name in removed:
                        self.idle_since.pop(name, None)
                for reason in plan.reasons:
                    context.store.record_event(pool, "Scaled", reason)
                nodes = provider.list_nodes(pool.name)
            self._status(
                context, pool, nodes, plan, "; ".join([*plan.reasons, *filter(None, [late])])
            )

    def _use(self, node: PoolNode, stored: Node | None, now: float) -> NodeUse:
        status = stored.status if stored is not None else None
        used = Demand(
            cpu_milli(status.allocated_cpu) if status else 0,
            memory_mib(status.allocated_memory) if status else 0,
            int(-(-status.allocated_gpus // 1)) if status else 0,
        )
        busy = bool(used.cpu_milli or used.memory_mib or used.gpus)
        if busy or node.state != NodeState.READY:
            self.idle_since.pop(node.name, None)
            idle_since = None
        else:
            idle_since = self.idle_since.setdefault(node.name, max(now, node.since))
        return NodeUse(node.name, node.state, used, 1 if busy else 0, idle_since)

    def _status(
        self,
        context: CycleContext,
        pool: NodePool,
        nodes: list[PoolNode],
        plan: PoolPlan | None,
        message: str,
    ) -> None:
        previous = pool.status or NodePoolStatus()
        status = NodePoolStatus(
            size=len(nodes),
            ready=sum(n.state == NodeState.READY for n in nodes),
            provisioning=sum(n.state == NodeState.PROVISIONING for n in nodes),
            draining=sum(n.state == NodeState.DRAINING for n in nodes),
            target=plan.target if plan is not None else 0,
            nodes=[
                PoolNodeStatus(name=n.name, state=n.state.value, since=_iso(n.since)) for n in nodes
            ],
            last_scale_time=(
                isoformat(context.clock.now())
                if plan is not None and plan.changes
                else previous.last_scale_time
            ),
            message=message or previous.message,
        )
        if status != previous:
            with context.transaction() as tx:
                context.store.write_status(pool, status, conn=tx)


def _iso(timestamp: float) -> str:
    return isoformat(datetime.fromtimestamp(timestamp, UTC))


def pending_jobs(jobs: Sequence[object]) -> list[PendingJob]:
    """Jobs that wait for room, as pods, highest priority first then oldest."""
    waiting = []
    for job in jobs:
        if not isinstance(job, Job) or CANCEL_ANNOTATION in job.metadata.annotations:
            continue
        status = job.status
        if status is not None and (
            status.phase != JobPhase.PENDING or status.reason in NOT_FOR_LACK_OF_NODES
        ):
            continue
        pods: list[Demand] = []
        for task in job.spec.tasks:
            amounts = task.resources.amounts()
            gpu = task.resources.gpu
            pod = Demand(
                amounts.cpu_milli,
                amounts.memory_mib,
                amounts.gpu_count,
                gpu.model if gpu is not None else None,
            )
            pods.extend([pod] * task.replicas)
        created = job.metadata.creation_timestamp or ""
        waiting.append((-job.spec.priority, created, job.name, pods))
    waiting.sort(key=lambda item: (item[0], item[1], item[2]))
    return [PendingJob(name, tuple(pods)) for _, _, name, pods in waiting]


def shape_of(pool: NodePool) -> PoolShape:
    node = pool.spec.node
    return PoolShape(node.cpu_milli, node.memory_mib, node.gpus.count, node.gpus.model)


def limits_of(pool: NodePool) -> PoolLimits:
    spec = pool.spec
    return PoolLimits(spec.min_size, spec.max_size, spec.size, seconds(spec.idle_threshold))


def template_of(pool: NodePool) -> NodeTemplate:
    node = pool.spec.node
    return NodeTemplate(
        pool=pool.name,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpu_count=node.gpus.count,
        gpu_model=node.gpus.model,
        gpu_memory_mib=node.gpu_memory_mib,
        labels=dict(node.labels),
        provisioning_seconds=seconds(pool.spec.provisioning_delay),
    )


def pools_extension(settings: Settings) -> CycleExtension | None:
    """Always on: a server with no NodePool pays one list per cycle."""
    return PoolController(cycle_seconds=settings.tick_seconds)
