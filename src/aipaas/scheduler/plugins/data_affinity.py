"""DataAffinity: prefer nodes, and groups of nodes, that hold more of the pod's job's data.

The score of a node is ``100 * ((1 - groupShare) * node + groupShare * group)``: ``node`` is
the share of the job's bytes on the node itself, ``group`` the share found anywhere among the
nodes that carry the same value of ``groupLabel`` (a rack: a peer serves the data faster than
the source does, and a gang placed in one group shares its copies). Without ``groupLabel`` the
node's own share decides alone. A job that reads no dataset scores 0 everywhere, so the other
scores of the profile decide for it.

How much data counts against fragmentation is the plugin's weight in the profile: FGD's score
moves in whole steps of 0..100 at weight 101 in ``default``, so DataAffinity at weight ``w``
makes a fully warm node worth ``100 * w / 101`` FGD steps. Fair share is not the plugin's to
weigh: it orders jobs (the batch session), the plugin only ranks nodes for the job admitted.

The scores depend on cache contents, not on the node's resources alone, so they are not
cached by the framework (``cacheable`` False). The caller keeps :attr:`view` current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from pydantic import Field

from aipaas.data.affinity import DataView, group_fraction, node_fraction
from aipaas.scheduler.framework.cluster import ClusterState, IntArray
from aipaas.scheduler.framework.interfaces import MAX_NODE_SCORE, ScorePlugin
from aipaas.scheduler.framework.registry import PluginArgs, PluginContext
from aipaas.scheduler.framework.types import PodRequest


class WithScorers(Protocol):
    """What ``data_affinity_of`` reads of a scheduler (framework/runtime.py ``Scheduler``,
    which imports the plugins: a Protocol here, not an import back)."""

    @property
    def scorers(self) -> Sequence[tuple[ScorePlugin, int, object]]: ...


NAME = "DataAffinity"


class DataAffinityArgs(PluginArgs):
    """DataAffinity's arguments."""

    #: Node label whose value groups nodes (e.g. topology.aipaas.dev/rack); "": no groups.
    groupLabel: str = ""
    #: Weight of the group's share against the node's own, 0..1 (used with groupLabel).
    groupShare: float = Field(default=0.3, ge=0, le=1)
    #: How much of a dataset being loaded onto a node counts as there already, 0..1.
    loadingCredit: float = Field(default=0.5, ge=0, le=1)


class DataAffinityScore(ScorePlugin):
    name = NAME
    cacheable = False

    def __init__(self, args: DataAffinityArgs, view: DataView | None = None) -> None:
        self.args = args
        self.view = view if view is not None else DataView()

    def score(self, state: ClusterState, pod: PodRequest, nodes: IntArray) -> IntArray:
        scores = np.zeros(nodes.size, dtype=np.int64)
        needs = self.view.needs_of_pod(pod.name)
        if not needs:
            return scores
        credit = self.args.loadingCredit
        label = self.args.groupLabel
        share = self.args.groupShare if label else 0.0
        groups: dict[str, list[str]] = {}
        if share:
            for spec in state.nodes:
                value = spec.labels.get(label)
                if value is not None:
                    groups.setdefault(value, []).append(spec.name)
        by_group: dict[str, float] = {}  # each group's share, computed once per call
        for k, index in enumerate(nodes):
            spec = state.nodes[int(index)]
            own = node_fraction(self.view, spec.name, needs, credit)
            value = spec.labels.get(label) if share else None
            group = own
            if value is not None:
                if value not in by_group:
                    by_group[value] = group_fraction(self.view, groups[value], needs, credit)
                group = by_group[value]
            scores[k] = int(MAX_NODE_SCORE * ((1.0 - share) * own + share * group))
        return scores


def new_data_affinity(context: PluginContext) -> DataAffinityScore:
    return DataAffinityScore(context.typed(DataAffinityArgs))


def data_affinity_of(scheduler: WithScorers) -> DataAffinityScore | None:
    """The scheduler's DataAffinity scorer (to give it a view), or None when its profile has
    none."""
    for plugin, _, _ in scheduler.scorers:
        if isinstance(plugin, DataAffinityScore):
            return plugin
    return None
