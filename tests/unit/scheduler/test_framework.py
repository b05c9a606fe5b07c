"""The framework: registry, profiles, the Scheduler's decisions, gangs and the score cache."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.profile import builtin_profile_names, load_profile
from aipaas.scheduler.framework.registry import PluginContext, Registry
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable
from aipaas.scheduler.plugins import default_registry
from aipaas.scheduler.plugins.fit import GpuFit, NodeResourcesFit

BUILTIN = ["bestfit", "clustering", "dotprod", "fgd", "fgdx", "packing", "random"]
BUILTIN_SCORES = {
    "bestfit": ["BestFit"],
    "clustering": ["GpuClustering"],
    "dotprod": ["DotProduct"],
    "fgd": ["FGD"],
    "fgdx": ["FGDStranding"],
    "packing": ["GpuPacking"],
    "random": ["Random"],
    # the live controller's and the batch baselines': FGD-class, ties to best fit, DRA claims
    "default": ["FGDStranding", "DeviceTopology", "BestFit"],
    "fifo": ["FGDStranding", "DeviceTopology", "BestFit"],
    "volcano": ["FGDStranding", "DeviceTopology", "BestFit"],
}
BUILTIN_FILTERS = {
    name: ["NodeResourcesFit", "GpuFit", "DeviceClaims"] for name in ("default", "fifo", "volcano")
}


def context() -> PluginContext:
    return PluginContext({}, np.random.default_rng(0))


# --------------------------------------------------------------------------------------------
# Registry


class TestRegistry:
    def test_duplicate_name(self) -> None:
        registry = Registry()
        registry.register("A", lambda _: NodeResourcesFit())
        with pytest.raises(ValueError) as error:
            registry.register("A", lambda _: GpuFit())
        assert str(error.value) == "plugin 'A' is already registered"

    def test_merge_refuses_duplicates(self) -> None:
        registry = default_registry()
        other = Registry()
        other.register("Extra", lambda _: GpuFit())
        other.register("BestFit", lambda _: GpuFit())
        with pytest.raises(ValueError) as error:
            registry.merge(other)
        assert str(error.value) == "plugin 'BestFit' is already registered"

    def test_unknown_plugin_lists_known(self) -> None:
        registry = Registry()
        registry.register("Zeta", lambda _: NodeResourcesFit())
        registry.register("Alpha", lambda _: GpuFit())
        with pytest.raises(ValueError) as error:
            registry.build("Nope", context())
        assert str(error.value) == "unknown plugin 'Nope'; known plugins: Alpha, Zeta"
        assert isinstance(registry.build("Alpha", context()), GpuFit)

    def test_default_registry_names(self) -> None:
        names = default_registry().names()
        assert names == sorted(names)
        assert set(names) >= {
            "BestFit",
            "BestFitGpus",
            "DotProduct",
            "FGD",
            "GpuClustering",
            "GpuFit",
            "GpuPacking",
            "NodeResourcesFit",
            "Random",
            "RandomGpus",
        }


# --------------------------------------------------------------------------------------------
# Profiles


def profile_dict(**spec_changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "filters": [{"name": "NodeResourcesFit"}, {"name": "GpuFit"}],
        "scores": [{"name": "BestFit", "weight": 2}],
        "gpuPicker": {"name": "BestFitGpus"},
    }
    spec.update(spec_changes)
    return {
        "apiVersion": "aipaas/v1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "mine"},
        "spec": spec,
    }


def write_profile(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


class TestProfiles:
    def test_builtin_names(self) -> None:
        names = builtin_profile_names()
        assert names == sorted(names)
        assert set(names) >= set(BUILTIN)

    @pytest.mark.parametrize("name", builtin_profile_names())
    def test_load_every_builtin(self, name: str) -> None:
        profile = load_profile(name)
        assert profile.metadata.name == name
        filters = BUILTIN_FILTERS.get(name, ["NodeResourcesFit", "GpuFit"])
        assert [f.name for f in profile.spec.filters] == filters
        if name in BUILTIN_SCORES:
            assert [s.name for s in profile.spec.scores] == BUILTIN_SCORES[name]
        # Every built-in profile builds.
        state = ClusterState([NodeSpec("n", 1000, 1000, 1, "T4")])
        Scheduler(state, profile, workload=[PodRequest("w", 1, 1, 1, 500)])

    def test_alias_best(self) -> None:
        profile = load_profile("best")
        assert profile.metadata.name == "fgdx"
        args = {"weight": 1.5, "reserve": 2}
        assert [(s.name, s.args) for s in profile.spec.scores] == [("FGDStranding", args)]
        assert profile.spec.gpuPicker.name == "FGDStranding"

    def test_pickers(self) -> None:
        pickers = {name: load_profile(name).spec.gpuPicker.name for name in BUILTIN}
        assert pickers == {
            "bestfit": "BestFitGpus",
            "clustering": "BestFitGpus",
            "dotprod": "BestFitGpus",
            "fgd": "FGD",
            "fgdx": "FGDStranding",
            "packing": "BestFitGpus",
            "random": "RandomGpus",
        }

    def test_file(self, tmp_path: Path) -> None:
        profile = load_profile(write_profile(tmp_path, profile_dict()))
        assert profile.metadata.name == "mine"
        assert profile.spec.scores[0].weight == 2
        assert profile.spec.filters[0].weight == 1

    def test_unknown_policy(self) -> None:
        with pytest.raises(ValueError) as error:
            load_profile("nope")
        assert str(error.value) == (
            f"unknown policy 'nope'; choose one of: {', '.join(builtin_profile_names())}, "
            "best, or a file"
        )
        assert "bestfit, clustering, default, dotprod, fgd, fgdx" in str(error.value)

    def test_unknown_field(self, tmp_path: Path) -> None:
        data = profile_dict(colour="red")
        path = write_profile(tmp_path, data)
        with pytest.raises(ValueError) as error:
            load_profile(path)
        message = str(error.value)
        assert message.startswith(f"{path}: invalid scheduler profile:")
        assert "spec.colour" in message
        assert "Extra inputs are not permitted" in message

    def test_missing_gpu_picker(self, tmp_path: Path) -> None:
        data = profile_dict()
        del data["spec"]["gpuPicker"]
        path = write_profile(tmp_path, data)
        with pytest.raises(ValueError) as error:
            load_profile(path)
        assert "spec.gpuPicker" in str(error.value)
        assert "Field required" in str(error.value)

    def test_weight_zero(self, tmp_path: Path) -> None:
        path = write_profile(tmp_path, profile_dict(scores=[{"name": "BestFit", "weight": 0}]))
        with pytest.raises(ValueError) as error:
            load_profile(path)
        assert "spec.scores[0].weight: " in str(error.value)
        assert "greater than or equal to 1" in str(error.value)

    def test_bad_metadata_name_and_kind(self, tmp_path: Path) -> None:
        data = profile_dict()
        data["metadata"]["name"] = "Bad_Name"
        data["kind"] = "Profile"
        with pytest.raises(ValueError) as error:
            load_profile(write_profile(tmp_path, data))
        assert "metadata.name" in str(error.value)
        assert "kind" in str(error.value)

    def test_not_yaml(self, tmp_path: Path) -> None:
        path = tmp_path / "broken.yaml"
        path.write_text("spec: [unclosed\n")
        with pytest.raises(ValueError, match=r"broken\.yaml: invalid scheduler profile"):
            load_profile(str(path))

    def test_unknown_plugin_in_profile(self, tmp_path: Path) -> None:
        path = write_profile(tmp_path, profile_dict(scores=[{"name": "Magic"}]))
        state = ClusterState([NodeSpec("n", 1, 1)])
        with pytest.raises(
            ValueError,
            match=r"spec\.scores\[0\]\.name: unknown plugin 'Magic' \(known plugins: BestFit,",
        ):
            Scheduler(state, path)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"filters": [{"name": "BestFit"}]}, "profile mine: BestFit is no filter"),
            ({"scores": [{"name": "GpuFit"}]}, "profile mine: GpuFit is no score"),
            ({"gpuPicker": {"name": "GpuFit"}}, "profile mine: GpuFit picks no GPUs"),
        ],
    )
    def test_plugin_in_wrong_place(
        self, tmp_path: Path, change: dict[str, Any], message: str
    ) -> None:
        path = write_profile(tmp_path, profile_dict(**change))
        with pytest.raises(ValueError) as error:
            Scheduler(ClusterState([NodeSpec("n", 1, 1)]), path)
        assert str(error.value) == message

    def test_tiebreak_rank_length(self) -> None:
        state = ClusterState([NodeSpec("a", 1, 1), NodeSpec("b", 1, 1)])
        with pytest.raises(ValueError) as error:
            Scheduler(state, "bestfit", tiebreak_rank=[0, 1, 2])
        assert str(error.value) == "tiebreak_rank: need one rank per node (2), got 3"

    def test_default_tiebreak_rank_is_a_seeded_permutation(self) -> None:
        def rank(seed: int) -> list[int]:
            nodes = [NodeSpec(f"n{i}", 1, 1) for i in range(20)]
            ranks = Scheduler(ClusterState(nodes), "bestfit", seed).tiebreak_rank
            return [int(r) for r in ranks]

        assert sorted(rank(1)) == list(range(20))
        assert rank(1) == rank(1)
        assert rank(1) != rank(2)


# --------------------------------------------------------------------------------------------
# Decisions and Unschedulable reasons


def reasons_cluster() -> ClusterState:
    """Each node fails a V100 pod of 2 cores / 2 GiB / 1 GPU for a different reason."""
    state = ClusterState(
        [
            NodeSpec("a", 1_000, 10_000, 2, "V100"),  # too little CPU; its GPUs are busy
            NodeSpec("b", 10_000, 1_000, 2, "V100"),  # too little memory
            NodeSpec("c", 10_000, 10_000, 2, "T4"),  # wrong GPU model
        ]
    )
    state.allocate(Placement("busy", "a", 0, (0, 1), 1000, 0, 0))
    return state


class TestUnschedulable:
    def test_every_reason_counted(self) -> None:
        s = Scheduler(reasons_cluster(), "bestfit")
        result = s.schedule(PodRequest("p", 2_000, 2_000, 1, 1000, ("V100",)))
        assert result == Unschedulable(
            "p",
            (
                "0/3 nodes are available: 1 GPU model not in V100, 1 fewer than 1 idle GPUs, "
                "1 insufficient cpu, 1 insufficient memory",
            ),
        )

    def test_counts_add_up_per_reason(self) -> None:
        state = ClusterState(
            [
                NodeSpec("a", 500, 100, 4, "T4"),
                NodeSpec("b", 500, 10_000, 4, "T4"),
                NodeSpec("c", 8_000, 100, 4, "A10"),
            ]
        )
        for i in range(3):
            state.allocate(Placement("x", state.nodes[i].name, i, (0, 1, 2), 1000, 0, 0))
        s = Scheduler(state, "fgd", workload=[PodRequest("w", 1, 1, 1, 500)])
        result = s.schedule(PodRequest("p", 1_000, 1_000, 2, 1000, ("T4", "V100")))
        assert isinstance(result, Unschedulable)
        # Only a and b have the model; each has one idle GPU, 2 wanted.
        assert result.reasons == (
            "0/3 nodes are available: 1 GPU model not in T4|V100, 2 fewer than 2 idle GPUs, "
            "2 insufficient cpu, 2 insufficient memory",
        )

    def test_shared_pod_reason(self) -> None:
        state = ClusterState([NodeSpec("a", 8_000, 8_000, 2, "T4"), NodeSpec("b", 100, 8_000)])
        state.allocate(Placement("x", "a", 0, (0,), 500, 0, 0))
        state.allocate(Placement("y", "a", 0, (1,), 700, 0, 0))
        result = Scheduler(state, "bestfit").schedule(PodRequest("p", 1_000, 1, 1, 600))
        assert isinstance(result, Unschedulable)
        # b has no GPU at all: it lacks the GPU too (and CPU).
        assert result.reasons == (
            "0/2 nodes are available: 1 insufficient cpu, 2 no GPU with 600 milli free",
        )

    def test_reasons_without_nodes_are_left_out(self) -> None:
        state = ClusterState([NodeSpec("a", 1_000, 8_000), NodeSpec("b", 1_000, 8_000)])
        result = Scheduler(state, "bestfit").schedule(PodRequest("p", 2_000, 1))
        assert isinstance(result, Unschedulable)
        assert result.reasons == ("0/2 nodes are available: 2 insufficient cpu",)

    def test_select_node_none(self) -> None:
        s = Scheduler(reasons_cluster(), "packing")
        assert s.select_node(PodRequest("p", 2_000, 2_000, 1, 1000, ("V100",))) is None
        assert s.feasible_nodes(PodRequest("p", 2_000, 2_000, 1, 1000, ("V100",))).size == 0
        # Dropping the model constraint and the memory: only c is left.
        assert s.feasible_nodes(PodRequest("p", 2_000, 500, 1, 1000)).tolist() == [1, 2]
        assert s.feasible_nodes(PodRequest("p", 2_000, 2_000, 1, 1000)).tolist() == [2]

    def test_placement_carries_the_pod(self) -> None:
        state = ClusterState([NodeSpec("a", 8_000, 8_000, 2, "T4")])
        result = Scheduler(state, "bestfit").schedule(PodRequest("p", 1_500, 700, 1, 250))
        assert result == Placement("p", "a", 0, (0,), 250, 1_500, 700)
        assert state.cpu_free.tolist() == [6_500]
        assert state.memory_free.tolist() == [7_300]
        assert state.gpu_free.tolist() == [[750, 1000]]


# --------------------------------------------------------------------------------------------
# Gangs


ARRAYS = (
    "cpu_free",
    "memory_free",
    "gpu_free",
    "gpu_free_total",
    "gpu_free_max",
    "whole_gpus_free",
    "pod_count",
)


def snapshot(state: ClusterState) -> dict[str, np.ndarray]:
    return {name: getattr(state, name).copy() for name in ARRAYS}


def gang_cluster() -> ClusterState:
    return ClusterState(
        [NodeSpec("a", 8_000, 8_000, 2, "T4"), NodeSpec("b", 8_000, 8_000, 2, "T4")]
    )


GANG = [PodRequest(f"w{i}", 3_000, 1_000, 1, 1000) for i in range(3)]


class TestGang:
    def test_all_placed(self) -> None:
        state = gang_cluster()
        result = Scheduler(state, "bestfit", tiebreak_rank=[0, 1]).schedule_gang(GANG)
        assert isinstance(result, list)
        assert [p.pod for p in result] == ["w0", "w1", "w2"]
        # BestFit fills a first (least left over), then b.
        assert [(p.node, p.gpus) for p in result] == [("a", (0,)), ("a", (1,)), ("b", (0,))]
        assert state.whole_gpus_free.tolist() == [0, 1]

    @pytest.mark.parametrize("policy", BUILTIN)
    def test_all_or_nothing(self, policy: str) -> None:
        state = gang_cluster()
        state.allocate(Placement("x", "b", 1, (1,), 400, 2_000, 0))
        s = Scheduler(state, policy, workload=GANG)
        before = snapshot(state)
        gang = [*GANG, PodRequest("w3", 3_000, 1_000, 1, 1000)]  # 4 whole GPUs, 3 idle
        result = s.schedule_gang(gang)
        assert result == Unschedulable(
            "w3",
            (
                "gang: 3 of 4 pods fit",
                # a holds two of the gang: 2,000 CPU left, 3,000 wanted.
                "0/2 nodes are available: 2 fewer than 1 idle GPUs, 1 insufficient cpu",
            ),
        )
        after = snapshot(state)
        for name in ARRAYS:
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)
        # What the gang held is free again: the same gang minus one pod fits now.
        assert isinstance(s.schedule_gang(GANG), list)

    def test_failed_gang_leaves_no_gpu_tags(self) -> None:
        state = gang_cluster()
        result = Scheduler(state, "bestfit").schedule_gang(
            [PodRequest("s", 100, 1, 1, 500), PodRequest("big", 100, 1, 8, 1000)]
        )
        assert isinstance(result, Unschedulable)
        assert state.gpu_tags == [Counter(), Counter()]


# --------------------------------------------------------------------------------------------
# Score cache


class Recorder:
    """Wraps a plugin's score method and records the node indices it is asked about."""

    def __init__(self, plugin: Any) -> None:
        self.calls: list[list[int]] = []
        self.original = plugin.score

        def score(state: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
            self.calls.append(nodes.tolist())
            scores: np.ndarray = self.original(state, pod, nodes)
            return scores

        plugin.score = score


def four_nodes() -> ClusterState:
    return ClusterState([NodeSpec(f"n{i}", 64_000, 64_000, 4, "T4") for i in range(4)])


class TestScoreCache:
    @pytest.mark.parametrize("policy", ["bestfit", "dotprod", "packing", "clustering", "fgd"])
    def test_only_the_touched_node_is_rescored(self, policy: str) -> None:
        state = four_nodes()
        s = Scheduler(state, policy, tiebreak_rank=[2, 0, 3, 1], workload=GANG)
        recorder = Recorder(s.scorers[0][0])
        first = s.schedule(PodRequest("p0", 1_000, 1, 1, 1000))
        assert isinstance(first, Placement)
        assert first.node_index == 1  # all tie: lowest rank
        second = s.schedule(PodRequest("p1", 1_000, 1, 1, 1000))
        assert isinstance(second, Placement)
        assert recorder.calls == [[0, 1, 2, 3], [1]]
        # Another shape has its own cache: every node once, then only the changed one.
        third = s.schedule(PodRequest("q0", 500, 1, 1, 300))
        assert isinstance(third, Placement)
        assert recorder.calls[2] == [0, 1, 2, 3]
        touched = s.schedule(PodRequest("q1", 500, 1, 1, 300))
        assert isinstance(touched, Placement)
        assert recorder.calls[3] == [third.node_index]
        # Memory is not part of the shape: no new scoring for a pod that differs only there.
        s.schedule(PodRequest("q2", 500, 999, 1, 300))
        assert recorder.calls[4] == [touched.node_index]

    def test_change_outside_the_scheduler_is_seen(self) -> None:
        state = four_nodes()
        s = Scheduler(state, "bestfit", tiebreak_rank=[0, 1, 2, 3])
        recorder = Recorder(s.scorers[0][0])
        pod = PodRequest("p", 1_000, 1, 2, 1000)
        assert s.select_node(pod) == 0
        state.allocate(Placement("x", "n3", 3, (0,), 1000, 0, 0))
        # n3 now has the least left over: it must be re-scored and win.
        assert s.select_node(pod) == 3
        assert recorder.calls == [[0, 1, 2, 3], [3]]

    def test_infeasible_nodes_are_not_scored(self) -> None:
        state = four_nodes()
        state.allocate(Placement("x", "n2", 2, (0, 1, 2, 3), 1000, 0, 0))
        s = Scheduler(state, "bestfit")
        recorder = Recorder(s.scorers[0][0])
        s.select_node(PodRequest("p", 1_000, 1, 1, 1000))
        assert recorder.calls == [[0, 1, 3]]

    def test_single_feasible_node_needs_no_score(self) -> None:
        state = four_nodes()
        s = Scheduler(state, "bestfit")
        recorder = Recorder(s.scorers[0][0])
        assert s.select_node(PodRequest("p", 1_000, 1, 1, 1000, ("A100",))) is None
        for i in range(3):
            state.allocate(Placement("x", f"n{i}", i, (0, 1, 2, 3), 1000, 0, 0))
        assert s.select_node(PodRequest("p", 1_000, 1, 1, 1000)) == 3
        assert recorder.calls == []

    def test_random_is_not_cached(self) -> None:
        state = four_nodes()
        s = Scheduler(state, "random")
        recorder = Recorder(s.scorers[0][0])
        s.schedule(PodRequest("p0", 1_000, 1))
        s.schedule(PodRequest("p1", 1_000, 1))
        assert recorder.calls == [[0, 1, 2, 3], [0, 1, 2, 3]]

    @pytest.mark.parametrize(
        "policy", ["bestfit", "dotprod", "packing", "clustering", "fgd", "fgdx", "fgd-one-plugin"]
    )
    def test_cached_decisions_equal_fresh_ones(self, policy: str) -> None:
        """A long-lived scheduler (caches warm) places every pod as a fresh one would.

        80 nodes of few shapes: enough for FGD to score equal nodes once (from 64 nodes on).
        'fgd-one-plugin' makes the FGD score plugin its own GPU picker, so the reserve step
        reuses the GPU chosen while scoring.
        """
        rng = np.random.default_rng(7)
        nodes = [
            NodeSpec(f"n{i:02d}", (16_000, 32_000)[i % 2], 64_000, (4, 8)[i % 3 == 0], "T4")
            for i in range(80)
        ]
        state = ClusterState(nodes)
        rank = rng.permutation(len(nodes))
        workload = [
            PodRequest("w", 1_000, 1, 1, 500),
            PodRequest("v", 2_000, 1, 1, 1000),
            PodRequest("u", 4_000, 1),
        ]
        profile = load_profile(policy.removesuffix("-one-plugin"))
        cached = Scheduler(state, profile, workload=workload, tiebreak_rank=rank)
        if policy == "fgd-one-plugin":
            cached.picker = cached.scorers[0][0]  # type: ignore[assignment]
        for i in range(160):
            kind = int(rng.integers(4))
            pod = PodRequest(
                f"p{i}",
                int(rng.integers(1, 4)) * 1_000,
                1,
                (0, 1, 1, 2)[kind],
                (0, int(rng.choice([200, 300, 500, 700])), 900, 1000)[kind],
            )
            fresh_state = copy.deepcopy(state)
            fresh = Scheduler(fresh_state, profile, workload=workload, tiebreak_rank=rank)
            expected = fresh.schedule(pod)
            actual = cached.schedule(pod)
            assert actual == expected, (i, pod)
            for name in ARRAYS:
                np.testing.assert_array_equal(getattr(state, name), getattr(fresh_state, name))
