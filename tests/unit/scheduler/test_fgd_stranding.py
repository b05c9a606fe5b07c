"""FGDStranding (the fgdx profile): FGD plus the GPU milli a node's free CPU cannot feed.

F'(N) = F(N) + w * max(0, gpuFree - cpuFree / rho), rho = CPU milli per GPU milli of the
workload's GPU pods; score = floor(100 * sigmoid((F'(N) - F'(N')) / 1000)). Every expected
number is worked out by hand beside it.
"""

from __future__ import annotations

import numpy as np
import pytest

from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.profile import load_profile
from aipaas.scheduler.framework.registry import PluginContext
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest
from aipaas.scheduler.plugins import default_registry
from aipaas.scheduler.plugins.fgd import FgdScore, typical_pods
from aipaas.scheduler.plugins.fgd_stranding import (
    StrandingFgdScore,
    bound_gpu_share,
    cpu_per_gpu_milli,
    model_pressure,
    new_stranding_fgd,
    stranded_gpu_milli,
)

# One typical pod: 4 cores and one whole GPU, so rho = 4000 / 1000 = 4 milli-CPU per milli-GPU.
WHOLE_4C = [PodRequest("t", 4_000, 1, 1, 1000)]


def poor_and_rich() -> ClusterState:
    # poor: 4 GPUs with 8 cores (feeds 8000 / 4 = 2000 milli-GPU); rich: 4 GPUs with 32 cores.
    return ClusterState(
        [NodeSpec("poor", 8_000, 1 << 20, 4, "T4"), NodeSpec("rich", 32_000, 1 << 20, 4, "T4")]
    )


def both() -> np.ndarray:
    return np.array([0, 1], dtype=np.int64)


def test_cpu_per_gpu_milli_counts_gpu_pods_only() -> None:
    workload = [
        PodRequest("whole", 4_000, 1, 1, 1000),
        PodRequest("shared", 2_000, 1, 1, 500),
        PodRequest("cpu-only", 8_000, 1),
    ]
    # (4000 + 2000) CPU over (1000 + 500) GPU milli; the CPU-only pod counts in neither.
    assert cpu_per_gpu_milli(workload) == 4.0
    assert cpu_per_gpu_milli([PodRequest("two", 6_000, 1, 2, 1000)]) == 3.0
    assert cpu_per_gpu_milli([PodRequest("cpu-only", 8_000, 1)]) == 0.0
    assert cpu_per_gpu_milli([]) == 0.0


def test_stranded_gpu_milli() -> None:
    cpu = np.array([8_000, 32_000, 6_000, 0])
    gpu = np.array([4_000, 4_000, 3_000, 500])
    # 4000 - 2000 = 2000; 4000 - 8000 < 0 -> 0; 3000 - 1500 = 1500; 500 - 0 = 500
    assert stranded_gpu_milli(cpu, gpu, 4.0).tolist() == [2000.0, 0.0, 1500.0, 500.0]
    # Without a ratio (no GPU pods in the workload) nothing is stranded.
    assert stranded_gpu_milli(cpu, gpu, 0.0).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_a_cpu_light_pod_is_drawn_to_the_cpu_poor_node() -> None:
    state = poor_and_rich()
    plugin = StrandingFgdScore(typical_pods(WHOLE_4C), cpu_per_gpu_milli(WHOLE_4C))
    light = PodRequest("light", 2_000, 1, 1, 1000)
    # FGD alone: the typical pod fits before and after on both nodes, F = F' = 0 -> 50, 50.
    assert FgdScore(typical_pods(WHOLE_4C)).score(state, light, both()).tolist() == [50, 50]
    # poor: S = 4000 - 8000/4 = 2000, F' = 0 + 2 * 2000 = 4000
    #       after: 6 cores, 3 GPUs: S = 3000 - 1500 = 1500, F' = 3000
    #       dF' = +1000 -> floor(100 sigmoid(1)) = floor(73.11) = 73
    # rich: S = 0 before and after (32 and 30 cores feed more than 4 GPUs) -> 50
    assert plugin.score(state, light, both()).tolist() == [73, 50]


def test_a_cpu_heavy_pod_is_kept_off_the_cpu_poor_node() -> None:
    state = poor_and_rich()
    plugin = StrandingFgdScore(typical_pods(WHOLE_4C), cpu_per_gpu_milli(WHOLE_4C))
    heavy = PodRequest("heavy", 6_000, 1, 1, 1000)
    # FGD alone on poor: after, 2 cores < 4: the typical pod lacks CPU, F' = gpuFree = 3000,
    #   dF = -3000 -> floor(100 sigmoid(-3)) = floor(4.74) = 4
    # Ours on poor: before F' = 4000 (as above); after S = 3000 - 2000/4 = 2500,
    #   F' = 3000 + 2 * 2500 = 8000, dF' = -4000 -> floor(100 sigmoid(-4)) = floor(1.80) = 1
    # rich: 26 cores left, the typical pod fits, S = 0 -> 50 for both.
    assert FgdScore(typical_pods(WHOLE_4C)).score(state, heavy, both()).tolist() == [4, 50]
    assert plugin.score(state, heavy, both()).tolist() == [1, 50]


def test_a_cpu_only_pod_counts_the_gpus_it_strands() -> None:
    state = poor_and_rich()
    plugin = StrandingFgdScore(typical_pods(WHOLE_4C), cpu_per_gpu_milli(WHOLE_4C), weight=1)
    cpu_only = PodRequest("c", 2_000, 1)
    # weight 1. poor: F' = 0 + 2000; after 6 cores, 4 GPUs: S = 4000 - 1500 = 2500, F' = 2500,
    #   dF' = -500 -> floor(100 sigmoid(-.5)) = floor(37.75) = 37
    # rich: S = max(0, 4000 - 7500) = 0 after -> 50
    assert plugin.score(state, cpu_only, both()).tolist() == [37, 50]


def test_weight_zero_is_fgd() -> None:
    state = poor_and_rich()
    state.allocate(Placement("x", "poor", 0, (1,), 300, 1_000, 0))
    plain = FgdScore(typical_pods(WHOLE_4C))
    ours = StrandingFgdScore(typical_pods(WHOLE_4C), 4.0, weight=0)
    for p in (PodRequest("s", 1_000, 1, 1, 600), PodRequest("w", 3_000, 1, 2, 1000)):
        assert ours.device_scores(state, p, both()).tolist() == (
            plain.device_scores(state, p, both()).tolist()
        )


def test_fgdx_profile_places_by_stranding() -> None:
    profile = load_profile("fgdx")
    args = {"weight": 1.5, "reserve": 2}
    assert [(s.name, s.args) for s in profile.spec.scores] == [("FGDStranding", args)]
    assert (profile.spec.gpuPicker.name, profile.spec.gpuPicker.args) == ("FGDStranding", args)
    light = PodRequest("light", 2_000, 1, 1, 1000)
    # rich comes first in the tie-break order: FGD ties at 50 and takes it; fgdx scores poor
    # 73 (above) and takes poor's lowest idle GPU.
    fgd = Scheduler(poor_and_rich(), "fgd", workload=WHOLE_4C, tiebreak_rank=[1, 0])
    assert fgd.select_node(light) == 1
    fgdx = Scheduler(poor_and_rich(), "fgdx", workload=WHOLE_4C, tiebreak_rank=[1, 0])
    result = fgdx.schedule(light)
    assert isinstance(result, Placement)
    assert (result.node, result.gpus) == ("poor", (0,))
    # The score plugin is its own GPU picker (same name and args).
    assert id(fgdx.picker) == id(fgdx.scorers[0][0])  # one object, typed as both roles


def test_shared_pod_gpu_choice() -> None:
    state = ClusterState([NodeSpec("n", 8_000, 1 << 20, 2, "T4")])
    state.allocate(Placement("x", "n", 0, (1,), 400, 0, 0))  # free: 1000, 600
    workload = [PodRequest("t", 2_000, 1, 1, 500)]  # rho = 4, typical: 2 cores x 500m
    plugin = StrandingFgdScore(typical_pods(workload), cpu_per_gpu_milli(workload))
    p = PodRequest("p", 2_000, 1, 1, 500)
    # Before: F = 0 (both GPUs >= 500), S = 1600 - 8000/4 = 0.
    # g0 -> (500, 600): F = 0; 6 cores: S = 1100 - 1500 < 0 -> 0: dF' = 0 -> 50
    # g1 -> (1000, 100): F = .. the 100 sliver: 100; S = 0: dF' = -100 -> floor(47.50) = 47
    assert plugin.device_scores(state, p, np.array([0])).tolist() == [[50, 47]]
    assert plugin.pick_gpus(state, p, 0) == (0,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"weight": -1}, "args.weight: input should be greater than or equal to 0, got -1"),
        ({"weight": 101}, "args.weight: input should be less than or equal to 100, got 101"),
        ({"weight": "2"}, "args.weight: input should be a valid number, got '2'"),
        ({"weight": True}, "args.weight: input should be a valid number, got True"),
        ({"coverage": 0}, "args.coverage: input should be greater than 0, got 0"),
        ({"weigth": 2}, "args.weigth: unknown argument of plugin FGDStranding"),
    ],
)
def test_bad_args(args: dict[str, object], message: str) -> None:
    context = PluginContext(args, np.random.default_rng(0), tuple(WHOLE_4C))
    with pytest.raises(ValueError, match="FGDStranding") as error:
        default_registry().build("FGDStranding", context)
    assert message in str(error.value)
    # Called directly, the factory refuses them too (pydantic's own message).
    with pytest.raises(ValueError, match="StrandingFgdArgs"):
        new_stranding_fgd(context)


def test_no_workload_means_no_stranding_term() -> None:
    plugin = new_stranding_fgd(PluginContext({}, np.random.default_rng(0), ()))
    assert (plugin.rho, plugin.weight) == (0.0, 2.0)
    # No typical pods and no ratio: F' = 0 everywhere, every placement scores 50.
    state = poor_and_rich()
    assert plugin.score(state, PodRequest("p", 6_000, 1, 1, 1000), both()).tolist() == [50, 50]


# --- the reserve for contested GPU models ---------------------------------------------------


def t4_and_g2() -> ClusterState:
    # Equal nodes but for the model: 4 GPUs and 64 cores each (rho 4 never strands them).
    return ClusterState(
        [NodeSpec("t4", 64_000, 1 << 20, 4, "T4"), NodeSpec("g2", 64_000, 1 << 20, 4, "G2")]
    )


def test_bound_gpu_share_and_pressure() -> None:
    workload = [
        PodRequest("t4", 1_000, 1, 1, 1000, ("T4",)),
        PodRequest("either", 1_000, 1, 2, 1000, ("G2", "T4")),
        PodRequest("any", 1_000, 1, 1, 1000),
        PodRequest("cpu", 1_000, 1),
    ]
    # 4000 GPU milli in all: T4 alone 1000 (1/4), G2|T4 2000 (1/2).
    share = bound_gpu_share(workload)
    assert share == {("T4",): 0.25, ("G2", "T4"): 0.5}
    state = ClusterState(
        [NodeSpec("t", 64_000, 1 << 20, 2, "T4"), NodeSpec("g", 64_000, 1 << 20, 6, "G2")]
    )
    # Capacity 8 GPUs: T4 2 (1/4), G2 6 (3/4); demand taken as 8 GPUs. T4: 0.25*8 = 2 GPUs
    # alone, plus G2|T4's 0.5*8 = 4 spread 2:6 -> 1; T4 asked 3 of 2 -> 1.5. G2: 3 of 6 -> 0.5.
    # The last entry is for nodes without GPUs: 0.
    pressure = dict(
        zip((*state.models, "none"), model_pressure(state, share).tolist(), strict=True)
    )
    assert pressure == {"G2": 0.5, "T4": 1.5, "none": 0.0}
    assert bound_gpu_share([PodRequest("cpu", 1_000, 1)]) == {}


def test_reserve_sends_unbound_pods_off_contested_models() -> None:
    # Half the GPU demand is bound to T4, which has half the capacity: pressure 1 on T4, 0 on G2.
    workload = [
        PodRequest("bound", 4_000, 1, 1, 1000, ("T4",)),
        PodRequest("free", 4_000, 1, 1, 1000),
    ]
    plugin = StrandingFgdScore(
        typical_pods(workload), cpu_per_gpu_milli(workload), 2.0, bound_gpu_share(workload), 2.0
    )
    plain = StrandingFgdScore(typical_pods(workload), cpu_per_gpu_milli(workload))
    state = t4_and_g2()
    free = PodRequest("p", 4_000, 1, 1, 1000)
    # Without the reserve: t4 F = 0 before and after (both typical pods fit), dF = 0 -> 50;
    # g2: the bound typical pod (p .5) cannot use G2, counts gpuFree: 2000 -> 1500: dF = 500
    # -> floor(100 sigmoid(.5)) = 62.
    assert plain.score(state, free, both()).tolist() == [50, 62]
    # With it, t4's F' also has -2 * 1 * gpuFree: -8000 -> -6000, dF' = -2000 -> 11.
    assert plugin.score(state, free, both()).tolist() == [11, 62]
    # A pod bound to T4 may only go there: the reserve lowers its only score, not its choice.
    bound = PodRequest("b", 4_000, 1, 1, 1000, ("T4",))
    assert Scheduler(t4_and_g2(), "fgdx", workload=workload).select_node(bound) == 0


def test_reserve_without_bound_pods_changes_nothing() -> None:
    state = poor_and_rich()
    state.allocate(Placement("x", "poor", 0, (1,), 300, 1_000, 0))
    plain = StrandingFgdScore(typical_pods(WHOLE_4C), 4.0)
    reserved = StrandingFgdScore(typical_pods(WHOLE_4C), 4.0, bound_share={}, reserve=2)
    for p in (PodRequest("s", 1_000, 1, 1, 600), PodRequest("w", 3_000, 1, 2, 1000)):
        assert reserved.device_scores(state, p, both()).tolist() == (
            plain.device_scores(state, p, both()).tolist()
        )
