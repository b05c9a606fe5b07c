"""DataAffinity: placement prefers nodes, and groups of nodes, that hold the job's data."""

from __future__ import annotations

import numpy as np
import pytest

from aipaas.data.affinity import DataNeed, DataView, group_fraction, node_fraction, rank_domains
from aipaas.data.affinity_profile import with_data_affinity
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest
from aipaas.scheduler.plugins import default_registry
from aipaas.scheduler.plugins.data_affinity import (
    DataAffinityArgs,
    DataAffinityScore,
    data_affinity_of,
)

G = 1 << 30
RACK = "topology.aipaas.dev/rack"


def nodes(count: int, racks: int = 1) -> list[NodeSpec]:
    return [
        NodeSpec(f"n{i}", 64_000, 512_000, 8, "A100", labels={RACK: f"r{i % racks}"})
        for i in range(count)
    ]


def pod(job: str, gpus: int = 8, index: int = 0) -> PodRequest:
    return PodRequest(f"t/{job}/w-{index}", gpus * 4000, gpus * 32_000, gpus, 1000)


def view(cached: dict[str, dict[str, int]], **needs: tuple[DataNeed, ...]) -> DataView:
    return DataView(cached=cached, needs={f"t/{job}": n for job, n in needs.items()})


IMAGENET = (DataNeed("imagenet", 100 * G),)


class TestFractions:
    def test_node_share_counts_bytes_present_and_loads_at_their_credit(self) -> None:
        v = view({"a": {"imagenet": 100 * G}, "b": {"imagenet": 40 * G}})
        v.loading = {"b": {"imagenet"}}
        assert node_fraction(v, "a", IMAGENET) == 1.0
        assert node_fraction(v, "b", IMAGENET, loading_credit=0.5) == pytest.approx(0.7)
        assert node_fraction(v, "b", IMAGENET, loading_credit=0.0) == pytest.approx(0.4)
        assert node_fraction(v, "c", IMAGENET) == 0.0
        assert node_fraction(v, "a", ()) == 0.0

    def test_group_share_takes_each_dataset_at_its_best_copy(self) -> None:
        needs = (DataNeed("x", 10 * G), DataNeed("y", 30 * G))
        v = view({"a": {"x": 10 * G}, "b": {"y": 15 * G, "x": 5 * G}})
        assert group_fraction(v, ["a", "b"], needs) == pytest.approx(25 / 40)
        assert group_fraction(v, [], needs) == 0.0

    def test_gang_domains_ranked_by_data_held(self) -> None:
        v = view({"n1": {"imagenet": 100 * G}, "n2": {"imagenet": 100 * G}}, j=IMAGENET)
        domains = {"r0": ["n0", "n3"], "r1": ["n1", "n2"], "r2": ["n4"]}
        assert rank_domains(v, "t/j", domains) == ["r1", "r0", "r2"]


class TestPlugin:
    def score(self, plugin: DataAffinityScore, state: ClusterState, p: PodRequest) -> list[int]:
        return [int(s) for s in plugin.score(state, p, np.arange(len(state)))]

    def test_warm_nodes_score_higher(self) -> None:
        state = ClusterState(nodes(3))
        plugin = DataAffinityScore(DataAffinityArgs())
        plugin.view = view({"n1": {"imagenet": 100 * G}, "n2": {"imagenet": 50 * G}}, j=IMAGENET)
        assert self.score(plugin, state, pod("j")) == [0, 100, 50]

    def test_a_job_without_data_scores_zero_everywhere(self) -> None:
        state = ClusterState(nodes(3))
        plugin = DataAffinityScore(DataAffinityArgs(), view({"n1": {"imagenet": 100 * G}}))
        assert self.score(plugin, state, pod("other")) == [0, 0, 0]

    def test_group_label_credits_nodes_whose_rack_holds_the_data(self) -> None:
        state = ClusterState(nodes(4, racks=2))  # r0: n0, n2; r1: n1, n3
        plugin = DataAffinityScore(DataAffinityArgs(groupLabel=RACK, groupShare=0.5))
        plugin.view = view({"n2": {"imagenet": 100 * G}}, j=IMAGENET)
        assert self.score(plugin, state, pod("j")) == [50, 0, 100, 0]

    def test_arguments_are_checked_by_the_registry(self) -> None:
        context = PluginContext({"groupShare": 2.0}, np.random.default_rng(0))
        with pytest.raises(ValueError, match="groupShare"):
            default_registry().build("DataAffinity", context)


class TestPlacement:
    def scheduler(self, count: int, weight: int = 30, racks: int = 1) -> Scheduler:
        args = {"groupLabel": RACK} if racks > 1 else {}
        profile = with_data_affinity("default", weight, args)
        return Scheduler(ClusterState(nodes(count, racks)), profile, seed=1)

    def test_profile_adds_the_plugin_once_with_its_weight(self) -> None:
        profile = with_data_affinity(with_data_affinity("default", 5), 7)
        refs = [(ref.name, ref.weight) for ref in profile.spec.scores]
        assert refs.count(("DataAffinity", 7)) == 1 and ("DataAffinity", 5) not in refs
        assert profile.metadata.name == "default-data"

    def test_the_job_lands_on_the_node_holding_its_data(self) -> None:
        for warm in ("n0", "n3", "n5"):
            scheduler = self.scheduler(6)
            plugin = data_affinity_of(scheduler)
            assert plugin is not None
            plugin.view = view({warm: {"imagenet": 100 * G}}, j=IMAGENET)
            placed = scheduler.schedule(pod("j", gpus=4))
            assert isinstance(placed, Placement) and placed.node == warm

    def test_a_gang_takes_the_warm_nodes(self) -> None:
        scheduler = self.scheduler(8)
        plugin = data_affinity_of(scheduler)
        assert plugin is not None
        plugin.view = view({"n2": {"imagenet": 100 * G}, "n6": {"imagenet": 100 * G}}, g=IMAGENET)
        placed = scheduler.schedule_gang([pod("g", 8, i) for i in range(2)])
        assert isinstance(placed, list) and {p.node for p in placed} == {"n2", "n6"}

    def test_a_gang_prefers_the_rack_that_holds_its_data(self) -> None:
        scheduler = self.scheduler(8, racks=2)  # r1: n1, n3, n5, n7
        plugin = data_affinity_of(scheduler)
        assert plugin is not None
        plugin.view = view({"n3": {"imagenet": 100 * G}}, g=IMAGENET)
        placed = scheduler.schedule_gang([pod("g", 8, i) for i in range(3)])
        assert isinstance(placed, list)
        assert {p.node for p in placed} <= {"n1", "n3", "n5", "n7"} and "n3" in {
            p.node for p in placed
        }

    @pytest.mark.parametrize(("weight", "goes_warm"), [(1, False), (1000, True)])
    def test_weight_sets_data_against_fragmentation(self, weight: int, goes_warm: bool) -> None:
        # FGD packs a 4-GPU pod onto the half-used node; the idle warm node wins only when
        # data weighs more than FGD's difference (at weight 1 it is worth one step at most).
        scheduler = self.scheduler(3, weight=weight)
        first = scheduler.schedule(pod("filler", gpus=4))
        assert isinstance(first, Placement)
        warm = next(n.name for n in scheduler.state.nodes if n.name != first.node)
        plugin = data_affinity_of(scheduler)
        assert plugin is not None
        plugin.view = view({warm: {"imagenet": 100 * G}}, j=IMAGENET)
        placed = scheduler.schedule(pod("j", gpus=4))
        assert isinstance(placed, Placement)
        assert placed.node == (warm if goes_warm else first.node)
