"""Properties of every built-in policy on random clusters and pod streams.

The placements a run returns are checked against an independent recomputation: capacities
hold, devices are used as the pod asked, model constraints hold, a refused pod really fit
nowhere, the state's columns equal what the placements add up to, and releasing everything
gives back the initial state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.profile import builtin_profile_names, load_profile
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable

MODELS = ("A10", "T4", "V100")
POLICIES = builtin_profile_names()
PROFILES = {name: load_profile(name) for name in POLICIES}
PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeSpec]:
    count = draw(st.integers(1, 6))
    nodes = []
    for i in range(count):
        gpus = draw(st.integers(0, 8))
        nodes.append(
            NodeSpec(
                f"n{i}",
                cpu_milli=draw(st.integers(0, 32)) * 1000,
                memory_mib=draw(st.integers(0, 16)) * 1024,
                gpu_count=gpus,
                gpu_model=draw(st.sampled_from(MODELS)) if gpus else "",
            )
        )
    return nodes


# Module-level strategies: building them per draw costs more than the scheduling itself.
_SHAPES = st.one_of(
    st.just((0, 0)),  # CPU-only
    st.tuples(st.just(1), st.sampled_from([50, 100, 250, 300, 500, 700, 999])),  # shared
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.just(1000)),  # whole GPUs
)
# "H100" is on no node: alone it makes a GPU pod unschedulable.
_MODEL_LISTS = st.sets(st.sampled_from((*MODELS, "H100")), max_size=2).map(
    lambda models: tuple(sorted(models))
)
_PODS = st.tuples(
    st.integers(0, 8).map(lambda cores: cores * 1000) | st.sampled_from([250, 500, 1500]),
    st.integers(0, 4).map(lambda k: k * 512),
    _SHAPES,
    _MODEL_LISTS,
)


def _stream(items: list[tuple[int, int, tuple[int, int], tuple[str, ...]]]) -> list[PodRequest]:
    return [
        PodRequest(f"p{i}", cpu, memory, count, milli, models if count else ())
        for i, (cpu, memory, (count, milli), models) in enumerate(items)
    ]


def streams() -> st.SearchStrategy[list[PodRequest]]:
    return st.lists(_PODS, min_size=1, max_size=30).map(_stream)


@dataclass
class Usage:
    """What the placements add up to, recomputed without ClusterState."""

    cpu: np.ndarray
    memory: np.ndarray
    gpu: np.ndarray  # (nodes, 8) milli used
    pods: np.ndarray
    tags: list[Counter[str]]

    @classmethod
    def empty(cls, count: int) -> Usage:
        return cls(
            np.zeros(count, np.int64),
            np.zeros(count, np.int64),
            np.zeros((count, 8), np.int64),
            np.zeros(count, np.int64),
            [Counter() for _ in range(count)],
        )

    def fits(self, node: NodeSpec, i: int, pod: PodRequest) -> bool:
        if self.cpu[i] + pod.cpu_milli > node.cpu_milli:
            return False
        if self.memory[i] + pod.memory_mib > node.memory_mib:
            return False
        if pod.gpu_count == 0:
            return True
        if pod.gpu_models and node.gpu_model not in pod.gpu_models:
            return False
        free = 1000 - self.gpu[i, : node.gpu_count]
        if pod.is_shared:
            return bool((free >= pod.gpu_milli).any())
        return int((free == 1000).sum()) >= pod.gpu_count


def run(nodes: list[NodeSpec], stream: list[PodRequest], policy: str, seed: int) -> tuple[
    ClusterState, list[tuple[PodRequest, Placement]]
]:  # fmt: skip
    state = ClusterState(nodes)
    scheduler = Scheduler(state, PROFILES[policy], seed, workload=stream)
    usage = Usage.empty(len(nodes))
    placed = []
    for pod in stream:
        result = scheduler.schedule(pod)
        if isinstance(result, Unschedulable):
            assert result.pod == pod.name
            assert result.reasons[0].startswith(f"0/{len(nodes)} nodes are available: ")
            # Refused only when no node could take it.
            assert not any(usage.fits(n, i, pod) for i, n in enumerate(nodes)), pod
            continue
        i = result.node_index
        node = nodes[i]
        assert result.node == node.name
        assert (result.pod, result.cpu_milli, result.memory_mib) == (
            pod.name, pod.cpu_milli, pod.memory_mib
        )  # fmt: skip
        assert usage.fits(node, i, pod), (pod, result)
        gpus = result.gpus
        if pod.gpu_count == 0:
            assert gpus == ()
        else:
            assert result.gpu_milli == pod.gpu_milli
            assert all(0 <= g < node.gpu_count for g in gpus)
            if pod.gpu_models:
                assert node.gpu_model in pod.gpu_models
            if pod.is_shared:
                assert len(gpus) == 1
                assert usage.gpu[i, gpus[0]] + pod.gpu_milli <= 1000
            else:
                assert len(gpus) == pod.gpu_count == len(set(gpus))
                assert all(usage.gpu[i, g] == 0 for g in gpus)  # idle before
        usage.cpu[i] += pod.cpu_milli
        usage.memory[i] += pod.memory_mib
        for g in gpus:
            usage.gpu[i, g] += pod.gpu_milli
        usage.pods[i] += 1
        placed.append((pod, result))
    return state, placed


def recompute(nodes: list[NodeSpec], placements: list[Placement]) -> Usage:
    usage = Usage.empty(len(nodes))
    for p in placements:
        usage.cpu[p.node_index] += p.cpu_milli
        usage.memory[p.node_index] += p.memory_mib
        for g in p.gpus:
            usage.gpu[p.node_index, g] += p.gpu_milli
        usage.pods[p.node_index] += 1
        if p.gpus:
            tag = "share" if p.gpu_milli < 1000 else f"{len(p.gpus)}-gpu"
            usage.tags[p.node_index][tag] += 1
    return usage


def assert_state_matches(state: ClusterState, nodes: list[NodeSpec], usage: Usage) -> None:
    cpu = np.array([n.cpu_milli for n in nodes])
    memory = np.array([n.memory_mib for n in nodes])
    assert (usage.cpu <= cpu).all() and (usage.memory <= memory).all()
    assert (usage.gpu <= 1000).all()
    np.testing.assert_array_equal(state.cpu_free, cpu - usage.cpu)
    np.testing.assert_array_equal(state.memory_free, memory - usage.memory)
    free = np.zeros_like(state.gpu_free)
    for i, n in enumerate(nodes):
        free[i, : n.gpu_count] = 1000 - usage.gpu[i, : n.gpu_count]
        # No GPU beyond the node's own count was ever used.
        assert (usage.gpu[i, n.gpu_count :] == 0).all()
    np.testing.assert_array_equal(state.gpu_free, free)
    np.testing.assert_array_equal(state.gpu_free_total, free.sum(axis=1))
    np.testing.assert_array_equal(state.gpu_free_max, free.max(axis=1))
    np.testing.assert_array_equal(state.whole_gpus_free, (free == 1000).sum(axis=1))
    np.testing.assert_array_equal(state.pod_count, usage.pods)
    assert state.allocated_gpu_milli == int(usage.gpu.sum())


@pytest.mark.parametrize("policy", POLICIES)
@PROPERTY_SETTINGS
@given(nodes=clusters(), stream=streams(), seed=st.integers(0, 2**16))
def test_placements_respect_capacity_and_state_adds_up(
    policy: str, nodes: list[NodeSpec], stream: list[PodRequest], seed: int
) -> None:
    state, placed = run(nodes, stream, policy, seed)
    placements = [p for _, p in placed]
    assert_state_matches(state, nodes, recompute(nodes, placements))
    # Every change bumped the node's version once.
    assert state.version.tolist() == recompute(nodes, placements).pods.tolist()

    for placement in reversed(placements):
        state.release(placement)
    initial = ClusterState(nodes)
    for name in ("cpu_free", "memory_free", "gpu_free", "gpu_free_total", "gpu_free_max",
                 "whole_gpus_free", "pod_count"):  # fmt: skip
        np.testing.assert_array_equal(getattr(state, name), getattr(initial, name), name)


@PROPERTY_SETTINGS
@given(nodes=clusters(), stream=streams(), seed=st.integers(0, 2**16))
def test_release_in_any_order_restores_the_initial_state(
    nodes: list[NodeSpec], stream: list[PodRequest], seed: int
) -> None:
    state, placed = run(nodes, stream, "bestfit", seed)
    order = np.random.default_rng(seed).permutation(len(placed))
    for k in order:
        state.release(placed[k][1])
    initial = ClusterState(nodes)
    for name in ("cpu_free", "memory_free", "gpu_free", "gpu_free_total", "gpu_free_max",
                 "whole_gpus_free", "pod_count"):  # fmt: skip
        np.testing.assert_array_equal(getattr(state, name), getattr(initial, name), name)


@PROPERTY_SETTINGS
@given(nodes=clusters(), stream=streams(), policy=st.sampled_from(POLICIES))
def test_gpu_tags_match_placements(
    nodes: list[NodeSpec], stream: list[PodRequest], policy: str
) -> None:
    state, placed = run(nodes, stream, policy, 0)
    assert state.gpu_tags == recompute(nodes, [p for _, p in placed]).tags
