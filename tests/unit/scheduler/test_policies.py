"""Every placement policy on small hand-built clusters, scores worked out by hand.

The definitions are those of /work/shared/design/openb-experiment.md section 7. Each expected
score is a literal with the arithmetic beside it; MaxCPU = 128,000 milli, MaxGPU = 8,000 milli.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.profile import SchedulerProfile, load_profile
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable
from aipaas.scheduler.plugins import default_registry
from aipaas.scheduler.plugins.fgd import NO_ROOM, FgdScore, TypicalPod, new_fgd, typical_pods
from aipaas.scheduler.plugins.gpu_pickers import BestFitGpus, RandomGpus
from aipaas.scheduler.plugins.simple_scores import (
    BestFitScore,
    DotProductScore,
    GpuClusteringScore,
    GpuPackingScore,
    RandomScore,
)

DETERMINISTIC = ("dotprod", "bestfit", "clustering", "packing", "fgd", "fgdx")


def node(name: str, cpu: int, gpus: int, model: str = "T4", memory: int = 1 << 20) -> NodeSpec:
    return NodeSpec(name, cpu, memory, gpus, model if gpus else "")


def pod(
    cpu: int = 1000,
    count: int = 0,
    milli: int = 0,
    models: tuple[str, ...] = (),
    name: str = "p",
    memory: int = 0,
) -> PodRequest:
    return PodRequest(name, cpu, memory, count, milli, models)


def used(state: ClusterState, index: int, *gpu_milli: int, cpu: int = 0) -> None:
    """Allocate on node ``index``: GPU g gets ``gpu_milli[g]`` milli (0: untouched)."""
    for g, milli in enumerate(gpu_milli):
        if milli:
            state.allocate(
                Placement(f"u{index}-{g}", state.nodes[index].name, index, (g,), milli, 0, 0)
            )
    if cpu:
        state.allocate(Placement(f"c{index}", state.nodes[index].name, index, (), 0, cpu, 0))


def all_nodes(state: ClusterState) -> np.ndarray:
    return np.arange(len(state), dtype=np.int64)


def scheduler(
    state: ClusterState,
    policy: str | SchedulerProfile,
    rank: Sequence[int] | None = None,
    workload: Sequence[PodRequest] = (),
    seed: int = 0,
) -> Scheduler:
    if rank is None:
        rank = list(range(len(state)))
    return Scheduler(state, policy, seed, workload=workload, tiebreak_rank=rank)


def fgd_profile(score_args: dict[str, Any], picker_args: dict[str, Any]) -> SchedulerProfile:
    return SchedulerProfile.model_validate(
        {
            "apiVersion": "aipaas/v1",
            "kind": "SchedulerProfile",
            "metadata": {"name": "fgd-test"},
            "spec": {
                "filters": [{"name": "NodeResourcesFit"}, {"name": "GpuFit"}],
                "scores": [{"name": "FGD", "args": score_args}],
                "gpuPicker": {"name": "FGD", "args": picker_args},
            },
        }
    )


def three_sizes() -> ClusterState:
    """n0: 64 cores / 4 GPUs, n1: 32 cores / 2 GPUs, n2: 128 cores / 8 GPUs."""
    return ClusterState([node("n0", 64_000, 4), node("n1", 32_000, 2), node("n2", 128_000, 8)])


# --------------------------------------------------------------------------------------------
# Tie-break and whole-GPU choice, common to all policies


class TestTieBreak:
    @pytest.mark.parametrize("policy", DETERMINISTIC)
    def test_identical_nodes_go_by_rank(self, policy: str) -> None:
        for p in (
            pod(cpu=500),
            pod(cpu=500, count=1, milli=300),
            pod(cpu=500, count=2, milli=1000),
        ):
            state = ClusterState([node(f"n{i}", 16_000, 4) for i in range(4)])
            s = scheduler(state, policy, rank=[3, 1, 0, 2], workload=[pod(count=1, milli=500)])
            assert s.select_node(p) == 2
            # Node 2 cannot take the pod: the next rank (node 1) wins.
            used(state, 2, cpu=16_000)
            assert s.select_node(p) == 1

    @pytest.mark.parametrize("policy", ("clustering", "packing"))
    def test_cpu_only_pod_scores_zero_everywhere(self, policy: str) -> None:
        # Very different nodes, yet a CPU-only pod scores 0 on each: the rank decides.
        state = three_sizes()
        used(state, 0, 1000, 300)
        plugin = scheduler(state, policy).scorers[0][0]
        assert plugin.score(state, pod(cpu=2000), all_nodes(state)).tolist() == [0, 0, 0]
        assert scheduler(state, policy, rank=[1, 2, 0]).select_node(pod(cpu=2000)) == 2
        assert scheduler(state, policy, rank=[0, 2, 1]).select_node(pod(cpu=2000)) == 0

    @pytest.mark.parametrize("policy", ("random", *DETERMINISTIC))
    def test_whole_gpu_pods_take_lowest_idle_gpus(self, policy: str) -> None:
        state = ClusterState([node("n0", 16_000, 8)])
        used(state, 0, 1000, 0, 300, 0, 0, 1000)  # idle: 1, 3, 4, 6, 7
        s = scheduler(state, policy, workload=[pod(count=1, milli=500)])
        result = s.schedule(pod(count=2, milli=1000))
        assert isinstance(result, Placement)
        assert result.gpus == (1, 3)
        result = s.schedule(pod(count=1, milli=1000))
        assert isinstance(result, Placement)
        assert result.gpus == (4,)
        result = s.schedule(pod(cpu=100))
        assert isinstance(result, Placement)
        assert result.gpus == ()


# --------------------------------------------------------------------------------------------
# Random


class TestRandom:
    def test_one_node_scores_100(self) -> None:
        state = three_sizes()
        plugin = RandomScore(np.random.default_rng(5))
        for _ in range(20):
            scores = plugin.score(state, pod(), all_nodes(state))
            assert sorted(scores.tolist()) == [0, 0, 100]

    def test_spreads_over_feasible_nodes_only(self) -> None:
        state = ClusterState([node(f"n{i}", 1_000_000, 1) for i in range(4)])
        used(state, 3, cpu=1_000_000)  # n3 is full
        s = scheduler(state, "random", seed=11)
        chosen: Counter[str] = Counter()
        for i in range(300):
            result = s.schedule(pod(cpu=10, name=f"p{i}"))
            assert isinstance(result, Placement)
            chosen[result.node] += 1
        assert set(chosen) == {"n0", "n1", "n2"}
        assert min(chosen.values()) >= 60  # uniform: 100 each expected

    def test_same_seed_same_choices(self) -> None:
        def run(seed: int) -> list[str]:
            s = scheduler(
                ClusterState([node(f"n{i}", 10**6, 8) for i in range(5)]), "random", seed=seed
            )
            out = []
            for i in range(40):
                result = s.schedule(pod(cpu=10, count=1, milli=100, name=f"p{i}"))
                assert isinstance(result, Placement)
                out.append(f"{result.node}/{result.gpus[0]}")
            return out

        assert run(3) == run(3)
        assert run(3) != run(4)

    def test_random_gpus_within_fitting(self) -> None:
        state = ClusterState([node("n0", 16_000, 4)])
        used(state, 0, 0, 800, 400, 0)  # free: 1000, 200, 600, 1000
        picker = RandomGpus(np.random.default_rng(0))
        picks = Counter(picker.pick_gpus(state, pod(count=1, milli=500), 0) for _ in range(300))
        assert set(picks) == {(0,), (2,), (3,)}  # GPU 1 (200 free) never fits 500
        assert picker.pick_gpus(state, pod(count=2, milli=1000), 0) == (0, 3)


# --------------------------------------------------------------------------------------------
# DotProd


class TestDotProduct:
    def test_scores(self) -> None:
        state = three_sizes()
        p = pod(cpu=16_000, count=1, milli=1000)  # pod = (16000/128000, 1000/8000) = (.125, .125)
        scores = DotProductScore().score(state, p, all_nodes(state))
        # n0: node (.5, .5),  dot .125  -> floor(100 * (1 - .0625))   = floor(93.75)  = 93
        # n1: node (.25, .25), dot .0625 -> floor(100 * (1 - .03125)) = floor(96.875) = 96
        # n2: node (1, 1),     dot .25   -> floor(100 * (1 - .125))   = floor(87.5)   = 87
        assert scores.tolist() == [93, 96, 87]

    def test_choices_follow_state(self) -> None:
        state = three_sizes()
        s = scheduler(state, "dotprod", rank=[2, 1, 0])
        p = pod(cpu=16_000, count=1, milli=1000)
        assert s.schedule(p).node == "n1"  # type: ignore[union-attr]
        # n1 now (16000/128000, 1000/8000) = (.125, .125): dot .03125 -> floor(98.4375) = 98
        assert DotProductScore().score(state, p, np.array([1])).tolist() == [98]
        assert s.schedule(p).node == "n1"  # type: ignore[union-attr]
        # n1 has no idle GPU left; n0 (93) beats n2 (87).
        assert s.schedule(p).node == "n0"  # type: ignore[union-attr]

    def test_truncation_tie_goes_by_rank(self) -> None:
        state = ClusterState([node("a", 64_000, 1), node("b", 70_400, 1)])
        p = pod(cpu=12_800)  # (.1, 0)
        # a: dot .5 * .1 = .05   -> floor(100 * (1 - .025))  = floor(97.5)  = 97
        # b: dot .55 * .1 = .055 -> floor(100 * (1 - .0275)) = floor(97.25) = 97
        assert DotProductScore().score(state, p, all_nodes(state)).tolist() == [97, 97]
        assert scheduler(state, "dotprod", rank=[1, 0]).select_node(p) == 1
        assert scheduler(state, "dotprod", rank=[0, 1]).select_node(p) == 0

    def test_best_fit_gpu_for_shared_pod(self) -> None:
        state = ClusterState([node("n0", 16_000, 4)])
        used(state, 0, 500, 700, 700, 0)  # free: 500, 300, 300, 1000
        result = scheduler(state, "dotprod").schedule(pod(count=1, milli=300))
        assert isinstance(result, Placement)
        assert result.gpus == (1,)  # smallest free that fits (300), lowest of the tied 1 and 2


# --------------------------------------------------------------------------------------------
# BestFit


class TestBestFit:
    def test_raw_and_normalized_scores(self) -> None:
        state = three_sizes()
        p = pod(cpu=16_000, count=1, milli=1000)
        plugin = BestFitScore()
        raw = plugin.score(state, p, all_nodes(state))
        # n0: leftover .5 * 48000/128000 + .5 * 3000/8000 = .1875 + .1875 = .375
        #     -> floor(100 * .625) = floor(62.5) = 62
        # n1: .5 * 16000/128000 + .5 * 1000/8000 = .125 -> floor(87.5) = 87
        # n2: .5 * 112000/128000 + .5 * 7000/8000 = .875 -> floor(12.5) = 12
        assert raw.tolist() == [62, 87, 12]
        # (raw - 12) * 100 div 75: n0 5000 div 75 = 66, n1 100, n2 0
        assert plugin.normalize(raw).tolist() == [66, 100, 0]
        assert scheduler(state, "bestfit", rank=[0, 2, 1]).select_node(p) == 1

    def test_normalize(self) -> None:
        plugin = BestFitScore()
        assert plugin.normalize(np.array([10, 20, 40])).tolist() == [0, 33, 100]  # 1000 div 30
        assert plugin.normalize(np.array([5, 5, 5])).tolist() == [0, 0, 0]
        assert plugin.normalize(np.array([-7, 3])).tolist() == [0, 100]

    def test_cpu_only_pod_prefers_least_leftover(self) -> None:
        state = three_sizes()
        used(state, 1, 1000, 1000)  # n1: no GPU free, 32 cores
        p = pod(cpu=8_000)
        # n0: .5 * 56000/128000 + .5 * 4000/8000 = .21875 + .25 = .46875 -> floor(53.125) = 53
        # n1: .5 * 24000/128000 + 0               = .09375           -> floor(90.625) = 90
        # n2: .5 * 120000/128000 + .5 * 1         = .96875           -> floor(3.125)  = 3
        assert BestFitScore().score(state, p, all_nodes(state)).tolist() == [53, 90, 3]
        assert scheduler(state, "bestfit").select_node(p) == 1

    def test_shared_pod_gets_fullest_fitting_gpu(self) -> None:
        state = ClusterState([node("n0", 16_000, 4), node("n1", 16_000, 4)])
        used(state, 0, 0, 600, 200, 900)  # free: 1000, 400, 800, 100
        used(state, 1, 900, 900, 900, 900)  # free: 100 each: cannot take 300
        result = scheduler(state, "bestfit").schedule(pod(count=1, milli=300))
        assert isinstance(result, Placement)
        assert (result.node, result.gpus) == ("n0", (1,))  # 400 is the least free >= 300

    def test_truncation_tie(self) -> None:
        # a: .5 * 64000/128000 + .5 * 0   = .25    -> 75
        # b: .5 * 64000/128000 + .5 * 1/8 = .3125  -> floor(68.75) = 68
        # c: .5 * 64640/128000 + .5 * 0  = .2525   -> floor(74.75) = 74
        # d: .5 * 63400/128000 + .5 * 0  = .24765625 -> floor(75.234375) = 75: ties with a
        state = ClusterState(
            [node("a", 65_000, 1), node("b", 65_000, 2), node("c", 65_640, 1), node("d", 64_400, 1)]
        )
        p = pod(cpu=1_000, count=1, milli=1000)
        assert BestFitScore().score(state, p, all_nodes(state)).tolist() == [75, 68, 74, 75]
        assert scheduler(state, "bestfit", rank=[3, 0, 1, 2]).select_node(p) == 3
        # b has the lowest rank but not the top score: a (rank 1) beats d (rank 2).
        assert scheduler(state, "bestfit", rank=[1, 0, 3, 2]).select_node(p) == 0


# --------------------------------------------------------------------------------------------
# GpuClustering


def tagged_cluster() -> ClusterState:
    state = ClusterState(
        [node("n0", 64_000, 2), node("n1", 64_000, 8), node("n2", 64_000, 4), node("n3", 64_000, 8)]
    )
    used(state, 1, 500, 500, 1000, 1000, 0, 0, 0, 0)  # gpuFree 5000
    used(state, 2, 500, 1000, 0, 0)  # gpuFree 2500
    used(state, 3, 1000)  # gpuFree 7000
    # Tags set directly: the score is under test here, not allocate's tag bookkeeping.
    state.gpu_tags[:] = [
        Counter(),
        Counter({"share": 2}),
        Counter({"share": 1, "1-gpu": 1}),
        Counter({"1-gpu": 1}),
    ]
    return state


class TestGpuClustering:
    def test_shared_pod(self) -> None:
        state = tagged_cluster()
        scores = GpuClusteringScore().score(state, pod(count=1, milli=200), all_nodes(state))
        # base = 25 * (8000 - gpuFree) div 8000
        # n0: no tags,            base 25 * 6000 div 8000 = 18 -> 25 + 18 = 43
        # n1: only "share",       base 25 * 3000 div 8000 = 9  -> 75 + 9  = 84
        # n2: "share" and others, base 25 * 5500 div 8000 = 17 -> 50 + 17 = 67
        # n3: only "1-gpu",       base 25 * 1000 div 8000 = 3  -> 0 + 3   = 3
        assert scores.tolist() == [43, 84, 67, 3]

    def test_one_gpu_pod(self) -> None:
        state = tagged_cluster()
        scores = GpuClusteringScore().score(state, pod(count=1, milli=1000), all_nodes(state))
        # n0: 25 + 18 = 43; n1: other tags only: 0 + 9 = 9; n2: mixed: 50 + 17 = 67; n3: 75 + 3 = 78
        assert scores.tolist() == [43, 9, 67, 78]
        # A 2-GPU pod matches no tag: n0 43, n1 9, n2 17, n3 3.
        scores = GpuClusteringScore().score(state, pod(count=2, milli=1000), all_nodes(state))
        assert scores.tolist() == [43, 9, 17, 3]

    def test_fully_free_nodes(self) -> None:
        state = ClusterState([node("two", 1000, 2), node("eight", 1000, 8), node("one", 1000, 1)])
        scores = GpuClusteringScore().score(state, pod(count=1, milli=500), all_nodes(state))
        # 25 + 25 * 6000 div 8000 = 25 + 18; 25 + 0; 25 + 25 * 7000 div 8000 = 25 + 21
        assert scores.tolist() == [43, 25, 46]

    def test_clusters_through_the_scheduler(self) -> None:
        state = ClusterState([node("x", 64_000, 8), node("y", 64_000, 8)])
        s = scheduler(state, "clustering", rank=[1, 0])
        # First pod: both nodes empty, 25 + 0 each: rank picks y.
        assert s.schedule(pod(count=1, milli=1000, name="a")).node == "y"  # type: ignore[union-attr]
        # Shared pod: y holds only "1-gpu": 0 + 25 * 1000 div 8000 = 3; x empty: 25 + 0 = 25.
        assert s.schedule(pod(count=1, milli=200, name="b")).node == "x"  # type: ignore[union-attr]
        # Another 1-GPU pod: y 75 + 3 = 78; x only "share": 0 + 25 * 200 div 8000 = 0.
        assert s.schedule(pod(count=1, milli=1000, name="c")).node == "y"  # type: ignore[union-attr]

    def test_best_fit_gpu(self) -> None:
        state = ClusterState([node("n0", 16_000, 4)])
        used(state, 0, 100, 300, 0, 650)  # free: 900, 700, 1000, 350
        result = scheduler(state, "clustering").schedule(pod(count=1, milli=350))
        assert isinstance(result, Placement)
        assert result.gpus == (3,)


# --------------------------------------------------------------------------------------------
# GpuPacking


def packing_cluster() -> ClusterState:
    state = ClusterState(
        [
            node("n0", 64_000, 2),
            node("n1", 64_000, 4),
            node("n2", 64_000, 4),
            node("n3", 64_000, 4),
            node("n4", 64_000, 8),
        ]
    )
    used(state, 2, 0, 600, 0, 1000)  # free: 1000, 400, 1000, 0
    used(state, 3, 0, 800, 0, 0)  # free: 1000, 200, 1000, 1000
    used(state, 4, 50)  # free: 950, then 7 x 1000
    return state


class TestGpuPacking:
    def test_shared_pod(self) -> None:
        state = packing_cluster()
        scores = GpuPackingScore().score(state, pod(count=1, milli=300), all_nodes(state))
        # n0: all 2 free -> max(33 - 2, 2) = 31;  n1: all 4 free -> 33 - 4 = 29
        # n2: ascending free 0, 400, 1000, 1000; first >= 300 is 400 (not idle):
        #     100 - (400 * 100 div 1000) div 10 = 100 - 4 = 96
        # n3: ascending 200, 1000, ...; 200 < 300, takes an idle GPU: u = 1 -> max(50 - 1, 33) = 49
        # n4: ascending 950, 1000...; takes 950: 100 - (95 div 10) = 100 - 9 = 91
        assert scores.tolist() == [31, 29, 96, 49, 91]
        assert scheduler(state, "packing").select_node(pod(count=1, milli=300)) == 2

    def test_whole_gpu_pods(self) -> None:
        state = packing_cluster()
        scores = GpuPackingScore().score(state, pod(count=2, milli=1000), all_nodes(state))
        # n0 31, n1 29 (all free); n2, n3, n4: two idle GPUs taken: max(50 - 2, 33) = 48
        assert scores.tolist() == [31, 29, 48, 48, 48]
        assert scheduler(state, "packing", rank=[0, 1, 4, 3, 2]).select_node(
            pod(count=2, milli=1000)
        ) == 4  # fmt: skip
        scores = GpuPackingScore().score(state, pod(count=1, milli=1000), all_nodes(state))
        assert scores.tolist() == [31, 29, 49, 49, 49]

    def test_eight_free_gpus(self) -> None:
        state = ClusterState([node("a", 1000, 8), node("b", 1000, 1)])
        scores = GpuPackingScore().score(state, pod(count=1, milli=100), all_nodes(state))
        assert scores.tolist() == [25, 32]  # 33 - 8, 33 - 1

    def test_best_fit_gpu(self) -> None:
        state = packing_cluster()
        result = scheduler(state, "packing").schedule(pod(count=1, milli=300))
        assert isinstance(result, Placement)
        assert (result.node, result.gpus) == ("n2", (1,))


# --------------------------------------------------------------------------------------------
# FGD


SHARED_500 = [pod(cpu=1000, count=1, milli=500, name="t")]  # one typical pod, p = 1


def fgd_cluster() -> ClusterState:
    """Three 2-GPU nodes: A free (1000, 1000), B (600, 1000), C (300, 1000)."""
    state = ClusterState([node("A", 8_000, 2), node("B", 8_000, 2), node("C", 8_000, 2)])
    used(state, 1, 400)
    used(state, 2, 700)
    return state


class TestFgdScores:
    def test_one_shared_typical_pod(self) -> None:
        state = fgd_cluster()
        plugin = FgdScore(typical_pods(SHARED_500))
        p = pod(cpu=1000, count=1, milli=600)
        # Typical pod t = (1 core, 1 x 500m), p_t = 1. F = sum of free < 500 while some GPU has
        # >= 500 free (and 1 core), else all free GPU milli.
        # A: F = 0.   g0 -> (400, 1000): F' = 400, dF = -400 -> floor(100 sigmoid(-.4)) = 40
        #             g1 -> (1000, 400): 40
        # B: F = 0.   g0 -> (0, 1000): F' = 0 -> 50;  g1 -> (600, 400): F' = 400 -> 40
        # C: F = 300. g0 has 300 < 600: no room;  g1 -> (300, 400): nothing >= 500 left, so
        #             F' = 700, dF = -400 -> 40
        scores = plugin.device_scores(state, p, all_nodes(state))
        assert scores.tolist() == [[40, 40], [50, 40], [NO_ROOM, 40]]
        assert plugin.score(state, p, all_nodes(state)).tolist() == [40, 50, 40]
        s = scheduler(state, "fgd", workload=SHARED_500, rank=[0, 1, 2])
        result = s.schedule(p)
        assert isinstance(result, Placement)
        assert (result.node, result.gpus) == ("B", (0,))

    def test_cpu_only_typical_pod_counts_all_free_gpu(self) -> None:
        # 3 shared 500m pods and 1 CPU-only pod: both shapes kept, p = .75 and .25.
        workload = [pod(cpu=1000, count=1, milli=500, name=f"s{i}") for i in range(3)]
        workload.append(pod(cpu=2000, name="c"))
        state = fgd_cluster()
        plugin = FgdScore(typical_pods(workload))
        p = pod(cpu=1000, count=1, milli=600)
        # F = .75 * f_shared + .25 * gpuFree
        # A: F = 0 + 500.      g0/g1 -> F' = .75 * 400 + .25 * 1400 = 650: dF -150
        #    -> floor(100 sigmoid(-.15)) = floor(46.26) = 46
        # B: F = 0 + 400.      g0 -> (0, 1000): F' = 0 + 250 = 250: dF +150 -> floor(53.74) = 53
        #                      g1 -> (600, 400): F' = 300 + 250 = 550: dF -150 -> 46
        # C: F = 225 + 325 = 550. g1 -> (300, 400): F' = .75 * 700 + .25 * 700 = 700: -150 -> 46
        assert plugin.device_scores(state, p, all_nodes(state)).tolist() == [
            [46, 46],
            [53, 46],
            [NO_ROOM, 46],
        ]
        # The same with resolution 100: floor(dF / 100): -150 -> -2, +150 -> 1
        linear = FgdScore(typical_pods(workload), resolution=100)
        assert linear.device_scores(state, p, all_nodes(state)).tolist() == [
            [-2, -2],
            [1, -2],
            [NO_ROOM, -2],
        ]
        # resolution 1000: floor(-.15) = -1, floor(.15) = 0
        coarse = FgdScore(typical_pods(workload), resolution=1000)
        assert coarse.score(state, p, all_nodes(state)).tolist() == [-1, 0, -1]

    def test_whole_gpu_pod_and_cpu_shortage(self) -> None:
        # Typical pod: 4 cores and one whole GPU, p = 1.
        workload = [pod(cpu=4000, count=1, milli=1000, name="t")]
        state = ClusterState([node("small", 5_000, 2), node("big", 64_000, 2)])
        plugin = FgdScore(typical_pods(workload))
        p = pod(cpu=2000, count=1, milli=1000)
        # small: F = 0 (fits); after: 3 cores < 4: lacks CPU, F' = gpuFree = 1000
        #        dF = -1000 -> floor(100 sigmoid(-1)) = floor(26.89) = 26
        # big:   F = 0; after (0, 1000) with 62 cores: still fits, F' = 0 -> 50
        assert plugin.score(state, p, all_nodes(state)).tolist() == [26, 50]
        # A CPU-only pod leaves small 3 cores and both GPUs: F' = gpuFree = 2000,
        # dF = -2000 -> floor(100 sigmoid(-2)) = floor(11.92) = 11; big 50.
        assert plugin.score(state, pod(cpu=2000), all_nodes(state)).tolist() == [11, 50]
        s = scheduler(state, "fgd", workload=workload, rank=[0, 1])
        result = s.schedule(p)
        assert isinstance(result, Placement)
        assert (result.node, result.gpus) == ("big", (0,))

    def test_model_constrained_typical_pod(self) -> None:
        # Typical pod: shared 500m that runs on V100 only, p = 1.
        workload = [pod(count=1, milli=500, models=("V100",), name="t")]
        state = ClusterState([node("v", 8_000, 2, "V100"), node("t", 8_000, 2, "T4")])
        plugin = FgdScore(typical_pods(workload))
        p = pod(count=1, milli=1000)
        # v: F = 0; after (0, 1000): still fits, 0 -> 50
        # t: no access: F = gpuFree = 2000; after 1000: dF = +1000 -> floor(73.11) = 73
        assert plugin.score(state, p, all_nodes(state)).tolist() == [50, 73]
        assert scheduler(state, "fgd", workload=workload).select_node(p) == 1

    def test_unchanged_fragmentation_scores_50(self) -> None:
        state = ClusterState([node("a", 8_000, 2)])
        plugin = FgdScore(typical_pods(SHARED_500))
        # 100m on a free GPU keeps 900 >= 500: F stays 0 on either GPU.
        assert plugin.device_scores(state, pod(count=1, milli=100), all_nodes(state)).tolist() == [
            [50, 50]
        ]


class TestFgdGpuChoice:
    def state(self) -> ClusterState:
        state = ClusterState([node("n0", 8_000, 4)])
        used(state, 0, 0, 300, 200, 0)  # free: 1000, 700, 800, 1000
        return state

    def test_first_max(self) -> None:
        state = self.state()
        # 100m leaves every GPU >= 500: all score 50, the first (GPU 0) is taken.
        plugin = FgdScore(typical_pods(SHARED_500))
        assert plugin.pick_gpus(state, pod(count=1, milli=100), 0) == (0,)
        result = scheduler(state, "fgd", workload=SHARED_500).schedule(pod(count=1, milli=100))
        assert isinstance(result, Placement)
        assert result.gpus == (0,)

    def test_first_max_is_on_truncated_scores(self) -> None:
        state = self.state()
        plugin = FgdScore(typical_pods(SHARED_500))
        p = pod(count=1, milli=400)
        # g0 -> 600: 50; g1 -> 300: F' = 300: floor(100 sigmoid(-.3)) = floor(42.56) = 42
        # g2 -> 400: F' = 400 -> 40;  g3 -> 600: 50
        assert plugin.device_scores(state, p, np.array([0])).tolist() == [[50, 42, 40, 50]]
        assert plugin.pick_gpus(state, p, 0) == (0,)

    def test_tight_gpu_ties(self) -> None:
        state = self.state()
        tight = FgdScore(typical_pods(SHARED_500), tight_gpu_ties=True)
        # All four tie at 50 for 100m: the fullest that fits is GPU 1 (700 free).
        assert tight.pick_gpus(state, pod(count=1, milli=100), 0) == (1,)
        # For 400m only GPUs 0 and 3 tie at 50 (both 1000 free): the lower index.
        assert tight.pick_gpus(state, pod(count=1, milli=400), 0) == (0,)
        assert tight.pick_gpus(state, pod(count=2, milli=1000), 0) == (0, 3)

    def test_fgdx_profile(self) -> None:
        # SHARED_500 gives 2 milli-CPU per GPU milli: n0's 7 free cores feed 3500 milli, more
        # than its 3400 free after a 100m pod, so nothing is stranded and fgdx picks as fgd.
        state = self.state()
        result = scheduler(state, "fgdx", workload=SHARED_500).schedule(pod(count=1, milli=100))
        assert isinstance(result, Placement)
        assert result.gpus == (0,)

    def test_cpu_only_away_from_idle_gpus(self) -> None:
        # n0 has an idle GPU, n1 has none left; n0 comes first in the tie-break order.
        away = SchedulerProfile.model_validate(
            {
                "apiVersion": "aipaas/v1",
                "kind": "SchedulerProfile",
                "metadata": {"name": "away"},
                "spec": {
                    "filters": [{"name": "NodeResourcesFit"}, {"name": "GpuFit"}],
                    "scores": [
                        {"name": "CpuOnlyAwayFromIdleGpus", "weight": 1000},
                        {"name": "FGD"},
                    ],
                    "gpuPicker": {"name": "FGD"},
                },
            }
        )
        state = ClusterState([node("n0", 8_000, 1), node("n1", 8_000, 1)])
        used(state, 1, 1000)
        cpu_pod = pod(cpu=1_000)
        assert scheduler(state, "fgd", workload=SHARED_500).select_node(cpu_pod) == 0
        assert scheduler(state, away, workload=SHARED_500).select_node(cpu_pod) == 1
        # Where every node still has idle GPUs, FGD decides alone.
        fresh = ClusterState([node("n0", 8_000, 1), node("n1", 8_000, 1)])
        assert scheduler(fresh, away, workload=SHARED_500).select_node(cpu_pod) == 0

    def test_resolution_and_ties_via_profile_args(self) -> None:
        state = self.state()
        profile = fgd_profile({"resolution": 100}, {"resolution": 100, "tightGpuTies": True})
        s = scheduler(state, profile, workload=SHARED_500)
        p = pod(count=1, milli=400)
        # floor(dF / 100): g0 0, g1 -3, g2 -4, g3 0 -> tie on 0 and 3, both 1000 free: GPU 0
        assert s.picker.device_scores(state, p, np.array([0])).tolist() == [[0, -3, -4, 0]]  # type: ignore[attr-defined]
        result = s.schedule(p)
        assert isinstance(result, Placement)
        assert result.gpus == (0,)


class TestTypicalPods:
    def test_order_and_ties(self) -> None:
        pods = [
            pod(cpu=1000, count=1, milli=500),
            pod(cpu=2000),
            pod(cpu=1000, count=1, milli=1000),
            pod(cpu=1000, count=2, milli=1000),
            pod(cpu=1000, count=1, milli=1000, models=("V100",)),
            pod(cpu=1000, count=1, milli=1000, models=("T4",)),
        ]
        pods += [pod(cpu=500, count=1, milli=100)] * 2  # the most frequent shape
        result = typical_pods(pods, coverage=1.0)
        assert [(t.cpu_milli, t.gpu_milli, t.gpu_count, t.gpu_models) for t in result] == [
            (500, 100, 1, ()),  # count 2
            (2000, 0, 0, ()),  # count 1 each below: larger cpu first
            (1000, 1000, 2, ()),  # then larger milli, then larger count
            (1000, 1000, 1, ("V100",)),  # then larger model string: "V100" > "T4" > ""
            (1000, 1000, 1, ("T4",)),
            (1000, 1000, 1, ()),
            (1000, 500, 1, ()),
        ]
        assert [t.probability for t in result] == [2 / 8] + [1 / 8] * 6

    def test_cut_at_95_percent_keeps_the_crossing_group(self) -> None:
        pods = (
            [pod(cpu=1, count=1, milli=500)] * 50
            + [pod(cpu=2)] * 40
            + [pod(cpu=3, count=1, milli=1000)] * 8
            + [pod(cpu=4)] * 2
        )
        result = typical_pods(pods)
        # cumulative 50, 90 (< 95), 98 (crosses: kept), stop
        assert [t.cpu_milli for t in result] == [1, 2, 3]
        assert [t.probability for t in result] == pytest.approx([50 / 98, 40 / 98, 8 / 98])
        assert sum(t.probability for t in result) == pytest.approx(1.0)

    def test_cut_exactly_at_95_percent(self) -> None:
        pods = [pod(cpu=1)] * 10 + [pod(cpu=2)] * 6 + [pod(cpu=3)] * 3 + [pod(cpu=4)] * 1
        # 95% of 20 = 19: cumulative 10, 16, 19 (reached): the fourth group is left out
        result = typical_pods(pods)
        assert [t.cpu_milli for t in result] == [1, 2, 3]
        assert [t.probability for t in result] == pytest.approx([10 / 19, 6 / 19, 3 / 19])

    def test_memory_is_not_part_of_the_shape(self) -> None:
        pods = [pod(cpu=1, memory=10), pod(cpu=1, memory=20), pod(cpu=2)]
        result = typical_pods(pods, coverage=1.0)
        assert [(t.cpu_milli, t.probability) for t in result] == [(1, 2 / 3), (2, 1 / 3)]

    def test_empty(self) -> None:
        assert typical_pods([]) == []

    def test_fgd_factory_args(self) -> None:
        rng = np.random.default_rng(0)
        plugin = new_fgd(PluginContext({"coverage": 1.0}, rng, tuple(SHARED_500)))
        assert plugin.pods == [TypicalPod(1000, 500, 1, (), 1.0)]
        for args, message in (
            ({"coverage": 0}, "args.coverage: input should be greater than 0, got 0"),
            ({"coverage": 1.5}, "args.coverage: input should be less than or equal to 1, got 1.5"),
            ({"resolution": 0}, "args.resolution: input should be greater than 0, got 0"),
            ({"resolution": "x"}, "args.resolution: input should be a valid number, got 'x'"),
            ({"tightGpuTies": 1}, "args.tightGpuTies: input should be a valid boolean, got 1"),
        ):
            with pytest.raises(ValueError) as error:
                default_registry().build("FGD", PluginContext(args, rng, ()))
            assert str(error.value) == f"{message} (argument of plugin FGD)"


class TestPickers:
    def test_best_fit_gpus(self) -> None:
        state = ClusterState([node("n0", 8_000, 4), node("n1", 8_000, 8)])
        used(state, 0, 500, 700, 700, 0)  # free: 500, 300, 300, 1000
        picker = BestFitGpus()
        assert picker.pick_gpus(state, pod(count=1, milli=300), 0) == (1,)
        assert picker.pick_gpus(state, pod(count=1, milli=400), 0) == (0,)
        assert picker.pick_gpus(state, pod(count=1, milli=600), 0) == (3,)
        assert picker.pick_gpus(state, pod(count=1, milli=1000), 0) == (3,)
        assert picker.pick_gpus(state, pod(count=1, milli=1000), 1) == (0,)
        used(state, 0, 0, 0, 0, 1000)  # n0 free: 500, 300, 300, 0 (columns 4-7: padding)
        assert picker.pick_gpus(state, pod(count=1, milli=200), 0) == (1,)

    def test_unschedulable_when_nothing_fits(self) -> None:
        for policy in ("random", *DETERMINISTIC):
            state = ClusterState([node("n0", 8_000, 1)])
            used(state, 0, 600)
            s = scheduler(state, policy, workload=SHARED_500)
            assert isinstance(s.schedule(pod(count=1, milli=500)), Unschedulable)
            assert isinstance(s.schedule(pod(count=1, milli=400)), Placement)


def test_every_builtin_policy_is_covered() -> None:
    from aipaas.scheduler.framework.profile import builtin_profile_names

    assert set(builtin_profile_names()) >= {"random", *DETERMINISTIC}
    assert [s.name for s in load_profile("fgdx").spec.scores] == ["FGDStranding"]
