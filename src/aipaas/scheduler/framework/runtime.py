"""The framework runtime: filter, score (cached per node), normalise, pick a node, reserve GPUs.

One call places one pod against the current ClusterState and returns a decision; it does no
I/O, so the live controller and the trace simulator run exactly this code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from aipaas.scheduler.framework.cluster import BoolArray, ClusterState, IntArray
from aipaas.scheduler.framework.constraints import ConstraintCache
from aipaas.scheduler.framework.gpu_share import node_use, pick_share_gpus, share_memory
from aipaas.scheduler.framework.interfaces import (
    FilterPlugin,
    GpuPickerPlugin,
    NormalizeScorePlugin,
    ScorePlugin,
)
from aipaas.scheduler.framework.profile import SchedulerProfile, check_profile, load_profile
from aipaas.scheduler.framework.registry import PluginContext, Registry
from aipaas.scheduler.framework.types import (
    NodeConstraints,
    Placement,
    PodRequest,
    Unschedulable,
)

NO_CONSTRAINTS = NodeConstraints()


class _ScoreCache:
    """Scores of one (plugin, pod shape) for every node, with the node version they saw."""

    __slots__ = ("scores", "seen")

    def __init__(self, node_count: int) -> None:
        self.scores: IntArray = np.zeros(node_count, dtype=np.int64)
        self.seen: IntArray = np.full(node_count, -1, dtype=np.int64)


class Scheduler:
    """Places pods on a ClusterState according to a profile.

    ``tiebreak_rank[i]`` orders node i among equally scored nodes (lowest rank wins); by default
    it is a random permutation drawn from ``seed``, so ties do not always favour the same nodes.
    """

    def __init__(
        self,
        state: ClusterState,
        policy: str | SchedulerProfile = "bestfit",
        seed: int = 0,
        *,
        registry: Registry | None = None,
        workload: Sequence[PodRequest] = (),
        tiebreak_rank: Sequence[int] | IntArray | None = None,
    ) -> None:
        from aipaas.scheduler.plugins import default_registry

        self.state = state
        if isinstance(policy, SchedulerProfile):
            # A profile made in code has been checked for shape only: check its plugins too.
            self.profile = policy
            check_profile(policy, registry or default_registry(), f"profile {policy.metadata.name}")
        else:
            # Without a registry of its own, a policy is checked against the built-in plugins
            # when it is loaded (once for a built-in profile).
            self.profile = load_profile(policy, registry)
        self.rng = np.random.default_rng(seed)
        registry = registry or default_registry()

        def build(ref_name: str, args: dict[str, object]) -> object:
            return registry.build(ref_name, PluginContext(args, self.rng, tuple(workload)))

        spec = self.profile.spec
        self.filters: list[FilterPlugin] = []
        for ref in spec.filters:
            plugin = build(ref.name, ref.args)
            if not isinstance(plugin, FilterPlugin):
                raise ValueError(f"profile {self.profile.metadata.name}: {ref.name} is no filter")
            self.filters.append(plugin)
        # (plugin, weight, its normaliser or None), resolved once: Protocol checks are slow.
        self.scorers: list[tuple[ScorePlugin, int, NormalizeScorePlugin | None]] = []
        for ref in spec.scores:
            plugin = build(ref.name, ref.args)
            if not isinstance(plugin, ScorePlugin):
                raise ValueError(f"profile {self.profile.metadata.name}: {ref.name} is no score")
            normalizer = plugin if isinstance(plugin, NormalizeScorePlugin) else None
            self.scorers.append((plugin, ref.weight, normalizer))
        # A picker configured exactly like a scorer is that scorer: it can reuse what scoring
        # learned (FGD remembers each node's best GPU).
        same = [
            p
            for (p, _, _), ref in zip(self.scorers, spec.scores, strict=True)
            if (ref.name, ref.args) == (spec.gpuPicker.name, spec.gpuPicker.args)
        ]
        picker = same[0] if same else build(spec.gpuPicker.name, spec.gpuPicker.args)
        if not isinstance(picker, GpuPickerPlugin):
            raise ValueError(
                f"profile {self.profile.metadata.name}: {spec.gpuPicker.name} picks no GPUs"
            )
        self.picker = picker
        self.share_policy = spec.gpuShare

        if tiebreak_rank is None:
            self.tiebreak_rank: IntArray = self.rng.permutation(len(state)).astype(np.int64)
        else:
            self.tiebreak_rank = np.asarray(tiebreak_rank, dtype=np.int64)
            if self.tiebreak_rank.shape != (len(state),):
                raise ValueError(
                    f"tiebreak_rank: need one rank per node ({len(state)}), "
                    f"got {self.tiebreak_rank.shape[0]}"
                )
        self._caches: dict[tuple[int, tuple[object, ...]], _ScoreCache] = {}
        self._constraints = ConstraintCache(state)
        # Taints bind every pod (one without tolerations too); a cluster without any costs
        # nothing for pods without constraints.
        self._tainted = any(node.taints for node in state.nodes)

    def _node_constraints(self, pod: PodRequest) -> NodeConstraints | None:
        if pod.constraints is not None:
            return pod.constraints
        return NO_CONSTRAINTS if self._tainted else None

    def feasible_nodes(self, pod: PodRequest, allowed: BoolArray | None = None) -> IntArray:
        mask = self.filters[0].filter(self.state, pod)
        for plugin in self.filters[1:]:
            mask = mask & plugin.filter(self.state, pod)
        constraints = self._node_constraints(pod)
        if constraints is not None:
            mask = mask & self._constraints.mask(constraints)
        if allowed is not None:
            mask = mask & allowed
        return np.flatnonzero(mask)

    def select_node(self, pod: PodRequest, allowed: BoolArray | None = None) -> int | None:
        """The node the profile prefers for ``pod`` (among ``allowed`` nodes, when given), or
        None when no node is feasible."""
        nodes = self.feasible_nodes(pod, allowed)
        if nodes.size == 0:
            return None
        constraints = self._node_constraints(pod)
        if constraints is not None and nodes.size > 1:
            # Preferred affinity and PreferNoSchedule taints choose first; scores among equals.
            rank = self._constraints.rank(constraints)
            if rank is not None:
                ranks = rank[nodes]
                nodes = nodes[ranks == ranks.max()]
        if nodes.size == 1:
            return int(nodes[0])
        if pod.share is not None:
            # Shares go by the profile's node policy (HAMi's), not by the placement scores.
            use = node_use(self.state, nodes)
            best = nodes[
                use == (use.max() if self.share_policy.nodePolicy == "binpack" else use.min())
            ]
            return int(best[np.argmin(self.tiebreak_rank[best])])
        total: IntArray | None = None
        for index, (plugin, weight, normalizer) in enumerate(self.scorers):
            scores = self._scores(index, plugin, pod, nodes)
            if normalizer is not None:
                scores = normalizer.normalize(scores)
            weighted = scores * weight if weight != 1 else scores
            total = weighted if total is None else total + weighted
        assert total is not None
        best = nodes[total == total.max()]
        if best.size == 1:
            return int(best[0])
        return int(best[np.argmin(self.tiebreak_rank[best])])

    def schedule(
        self, pod: PodRequest, allowed: BoolArray | None = None
    ) -> Placement | Unschedulable:
        """Place one pod (on one of the ``allowed`` nodes, when given) and take its resources
        in the state, or say why it cannot run."""
        node = self.select_node(pod, allowed)
        if node is None:
            if allowed is not None and self.select_node(pod) is not None:
                kept = int(allowed.sum())
                return Unschedulable(pod.name, (f"0/{kept} of the nodes it may use fit it",))
            return Unschedulable(pod.name, self.diagnose(pod))
        devices = None
        if pod.claims:
            if self.state.devices is None:
                return Unschedulable(pod.name, ("no devices are published for claims",))
            reserved = self.state.devices.reserve(pod.name, pod.claims, self.state.nodes[node].name)
            if isinstance(reserved, str):
                return Unschedulable(pod.name, (reserved,))
            devices = reserved
        placement = Placement(
            pod=pod.name,
            node=self.state.nodes[node].name,
            node_index=node,
            gpus=self._gpus(pod, node),
            gpu_milli=pod.gpu_milli,
            cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib,
            devices=devices,
            share=pod.share is not None,
            gpu_memory_mib=share_memory(self.state, pod.share, node) if pod.share else 0,
        )
        try:
            self.state.allocate(placement)
        except ValueError as err:  # the device ledger refused the GPUs the picker chose
            if devices is not None and self.state.devices is not None:
                self.state.devices.unreserve(pod.name)
            return Unschedulable(pod.name, (str(err),))
        return placement

    def _gpus(self, pod: PodRequest, node: int) -> tuple[int, ...]:
        if not pod.gpu_count:
            return ()
        if pod.share is not None:
            return pick_share_gpus(self.state, pod, node, self.share_policy.gpuPolicy)
        return self.picker.pick_gpus(self.state, pod, node)

    def schedule_gang(
        self, pods: Sequence[PodRequest], allowed: BoolArray | None = None
    ) -> list[Placement] | Unschedulable:
        """Place every pod or none: on the first failure, what was taken is given back."""
        placed: list[Placement] = []
        for pod in pods:
            result = self.schedule(pod, allowed)
            if isinstance(result, Unschedulable):
                for placement in reversed(placed):
                    self.state.release(placement)
                reasons = (f"gang: {len(placed)} of {len(pods)} pods fit", *result.reasons)
                return Unschedulable(result.pod, reasons)
            placed.append(result)
        return placed

    def diagnose(self, pod: PodRequest) -> tuple[str, ...]:
        """'0/N nodes are available: k reason, ...' in the manner of kube-scheduler."""
        counts: Counter[str] = Counter()
        for plugin in self.filters:
            counts.update(plugin.explain(self.state, pod))
        constraints = self._node_constraints(pod)
        if constraints is not None:
            counts.update(self._constraints.explain(constraints))
        detail = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()) if n)
        return (f"0/{len(self.state)} nodes are available: {detail}",)

    def _scores(
        self, index: int, plugin: ScorePlugin, pod: PodRequest, nodes: IntArray
    ) -> IntArray:
        if not plugin.cacheable:
            return plugin.score(self.state, pod, nodes)
        key = (index, pod.shape)
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = _ScoreCache(len(self.state))
        versions = self.state.version[nodes]
        stale = cache.seen[nodes] != versions
        if stale.any():
            dirty = nodes[stale]
            cache.scores[dirty] = plugin.score(self.state, pod, dirty)
            cache.seen[dirty] = versions[stale]
        return cache.scores[nodes]
