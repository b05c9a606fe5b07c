"""The batch session's placement engine in the live controller: the cycle's ``Placer``.

The session (scheduler/batch) places gangs through a ``PlacementEngine``; here that engine is
the controller's ``Placer``, so the session sees exactly what runs (the placements held at the
start of step 4), places with the controller's profile and its DRA device ledger, and keeps
the on-request rule: a gang whose every pod asks for simulated nodes goes to the on-request
pool where there is one, every other gang to the ordinary nodes. A job's nodeSelector, node
affinity and tolerations travel on its pods (``PodRequest.constraints``) and are the
framework's filter here as in ``aipaas simulate``: one path.

Who calls it: controller/batch_cycle.py. Imports the scheduler only through the Placer's
module (controller/placement.py).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence

import numpy as np

from aipaas.api.devices import ResourceClaim
from aipaas.controller.placement import NO_NODE, Placer
from aipaas.scheduler.batch.cluster import fit_counts, held_again
from aipaas.scheduler.batch.model import Node, Resources
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable

#: a gang limited to nodes of which none is in its pools (every node it could use is held by
#: a reservation, or outside the topology domain or the nodes a victim search tries)
NO_NODE_ALLOWED = "no node is left that it may use now (reservations or its domain hold them back)"


class PlacerEngine:
    """A ``PlacementEngine`` over the cycle's Placer. ``on_request``: the names of the pods
    whose job asks for simulated nodes; ``claims``: pod name -> its explicit DRA claims, whose
    whole GPUs count against quotas once the devices are chosen (``claimed_gpus``)."""

    def __init__(
        self,
        placer: Placer,
        on_request: Collection[str] = (),
        claims: Mapping[str, Sequence[ResourceClaim]] | None = None,
    ) -> None:
        self.placer = placer
        self.on_request = set(on_request)
        self.claims = claims or {}
        # the pools' scheduler specs (placement.py ``node_spec``): their taints parsed once
        self.nodes: Sequence[Node] = [
            Node(
                name=n.name,
                gpu_count=n.gpu_count,
                cpu_milli=n.cpu_milli,
                memory_mib=n.memory_mib,
                gpu_model=n.gpu_model,
                labels=dict(n.labels),
                taints=n.taints,
            )
            for pool in placer.pools
            for n in pool.state.nodes
        ]

    def constraint(self, pods: Sequence[PodRequest]) -> Hashable:
        """What besides their shapes decides where ``pods`` (one gang) may go: whether it
        asks for simulated nodes (the allocate action keys its memo of gangs that found no
        room on it; node constraints are part of the shapes, ``PodRequest.fit_key``)."""
        return all(p.name in self.on_request for p in pods)

    def claimed_gpus(self, placement: Placement) -> int:
        """How many whole GPUs the explicit DRA claims of a placed pod were given (what it
        counts against quotas besides its resources; MIG partitions and other devices are
        not GPUs)."""
        claims = self.claims.get(placement.pod)
        if not claims or placement.devices is None:
            return 0
        # The slot lists the GPUs asked by count too (the placement's own): not claimed ones.
        return len(self.placer.slot(placement, claims).gpus) - len(placement.gpus)

    def place(
        self, pods: Sequence[PodRequest], nodes: Collection[str] | None = None
    ) -> list[Placement] | Unschedulable:
        if not pods:
            return []
        refused = Unschedulable(pods[0].name, (NO_NODE,))
        for pool in self.placer.pools_for(all(p.name in self.on_request for p in pods)):
            if not pool.nodes:
                continue
            mask = None
            if nodes is not None:
                mask = np.zeros(len(pool.state), dtype=np.bool_)
                for name in nodes:
                    index = pool.state.index_of.get(name)
                    if index is not None:
                        mask[index] = True
                if not mask.any():
                    if refused.reasons == (NO_NODE,):  # not that no node takes the job at all
                        refused = Unschedulable(pods[0].name, (NO_NODE_ALLOWED,))
                    continue
            result = pool.scheduler.schedule_gang(pods, mask)
            if not isinstance(result, Unschedulable):
                return result
            refused = result
        return refused

    def fit_counts(self, pod: PodRequest, nodes: Collection[str] | None = None) -> dict[str, int]:
        """How many copies of ``pod`` each node it may use could take now (topology packing)."""
        counts: dict[str, int] = {}
        for pool in self.placer.pools_for(pod.name in self.on_request):
            if not pool.nodes:
                continue
            mask = np.array(
                [nodes is None or n.name in nodes for n in pool.state.nodes],
                dtype=np.bool_,
            )
            found = fit_counts(pool.state, pool.scheduler, pod, mask)
            counts.update(
                {pool.state.nodes[int(i)].name: int(found[i]) for i in found.nonzero()[0]}
            )
        return counts

    def release(self, placement: Placement) -> None:
        pool = self.placer.pool_of(placement.node)
        if pool is not None:
            pool.state.release(placement)

    def hold(self, placement: Placement) -> None:
        pool = self.placer.pool_of(placement.node)
        if pool is not None:
            # The very devices its claims gave back (the ledger kept them), not a new choice:
            # an undone eviction, or a victim that keeps them until its stop is confirmed.
            pool.state.allocate(held_again(pool.state, placement))

    def free(self, node: str) -> Resources:
        pool = self.placer.pool_of(node)
        if pool is None:
            return Resources()
        i = pool.state.index_of[node]
        return Resources(
            int(pool.state.gpu_free_total[i]),
            int(pool.state.cpu_free[i]),
            int(pool.state.memory_free[i]),
        )

    def gpus_free(self, node: str) -> tuple[int, ...]:
        """Free milli per GPU of the node."""
        pool = self.placer.pool_of(node)
        if pool is None:
            return ()
        i = pool.state.index_of[node]
        return tuple(int(v) for v in pool.state.gpu_free[i, : int(pool.state.gpu_count[i])])

    def capacity(self) -> Resources:
        return self.placer.capacity()
