"""Random clusters and pods (selectors, affinity, taints, tolerations, GPU shares): the simulator's
engine and the live controller's Placer admit the same nodes, a pod is refused only when a
plain re-reading of the rules finds no node either, and no GPU is ever given more memory,
cores or shares than it has. Seeds are fixed, so a failure replays."""

from __future__ import annotations

import random

import pytest

from aipaas.backends.base import NodeInfo
from aipaas.controller.placement import Placer
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import Node
from aipaas.scheduler.framework.constraints import TAINTS_ANNOTATION, UNHEALTHY_GPUS_ANNOTATION
from aipaas.scheduler.framework.types import (
    GpuShare,
    NodeConstraints,
    PodRequest,
    Taint,
    Term,
    Toleration,
    Unschedulable,
)

ZONES = ("z1", "z2", "z3")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def random_nodes(rng: random.Random) -> list[Node]:
    nodes = []
    for i in range(rng.randint(2, 6)):
        gpus = rng.choice((0, 1, 2, 4))
        taints = tuple(
            Taint(rng.choice(("gpu", "maint")), rng.choice(("", "x")), rng.choice(EFFECTS))
            for _ in range(rng.choice((0, 0, 1, 2)))
        )
        sick = tuple(g for g in range(gpus) if rng.random() < 0.2)
        nodes.append(
            Node(
                f"n{i}",
                gpus,
                8000,
                32_768,
                gpu_model="A100" if gpus else "",
                labels={"zone": rng.choice(ZONES)},
                taints=taints,
                gpu_memory_mib=rng.choice((0, 8000, 16_000)) if gpus else 0,
                unhealthy_gpus=sick,
                gpu_split=10,  # what the live controller's nodes have (no backend reports it)
            )
        )
    return nodes


def random_pod(rng: random.Random, name: str) -> PodRequest:
    selector = (("zone", rng.choice(ZONES)),) if rng.random() < 0.3 else ()
    required: tuple[Term, ...] = ()
    if rng.random() < 0.3:
        required = (((("zone", rng.choice(("In", "NotIn")), (rng.choice(ZONES),)),), ()),)
    tolerations = tuple(
        Toleration(rng.choice(("gpu", "maint", "")), "Exists", "", rng.choice(("", *EFFECTS)))
        for _ in range(rng.choice((0, 1)))
    )
    constraints = NodeConstraints(selector, required, (), tolerations)
    if not (selector or required or tolerations):
        return PodRequest(name, 500, 1024)
    if rng.random() < 0.5:
        count = rng.choice((1, 2))
        cores = rng.choice((0, 10, 30, 100))
        memory = rng.choice((0, 2000, 6000))
        share = GpuShare(memory, 0 if memory else rng.choice((0, 25)), (), ())
        return PodRequest(
            name, 500, 1024, gpu_count=count, gpu_milli=max(cores * 10, 1),
            constraints=constraints, share=share,
        )  # fmt: skip
    return PodRequest(name, 500, 1024, constraints=constraints)


def admitted(node: Node, constraints: NodeConstraints | None) -> bool:
    """The rules read plainly, one node at a time."""
    c = constraints or NodeConstraints()
    if any(node.labels.get(k) != v for k, v in c.selector):
        return False
    for expressions, _ in c.required[:1]:
        key, operator, values = expressions[0]
        inside = node.labels.get(key) in values
        if inside != (operator == "In"):
            return False
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(
            (not t.effect or t.effect == taint.effect) and (not t.key or t.key == taint.key)
            for t in c.tolerations
        ):
            return False
    return True


def share_fits(cluster: SnapshotCluster, index: int, pod: PodRequest) -> bool:
    state = cluster.state
    share = pod.share
    if share is None:
        return True
    spec = state.nodes[index]
    good = 0
    for g in range(spec.gpu_count):
        if g in spec.unhealthy_gpus or state.gpu_shares[index, g] >= spec.gpu_split:
            continue
        need = share.memory_mib or spec.gpu_memory_mib * (share.memory_percent or 100) // 100
        free = spec.gpu_memory_mib - int(state.gpu_memory_used[index, g])
        if free >= need and state.gpu_free[index, g] >= pod.gpu_milli:
            good += 1
    return good >= pod.gpu_count


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    nodes = random_nodes(rng)
    cluster = SnapshotCluster(nodes)
    live = Placer(
        [
            NodeInfo(
                n.name, "sim", n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model,
                gpu_memory_mib=n.gpu_memory_mib, labels=n.labels,
                annotations={
                    TAINTS_ANNOTATION: ",".join(f"{t.key}={t.value}:{t.effect}" for t in n.taints),
                    UNHEALTHY_GPUS_ANNOTATION: ",".join(str(g) for g in n.unhealthy_gpus),
                },
            )
            for n in nodes
        ]
    )  # fmt: skip
    live_scheduler = live.ordinary.scheduler
    for step in range(12):
        pod = random_pod(rng, f"t/j/w-{step}")
        live_nodes = {
            live_scheduler.state.nodes[int(i)].name for i in live_scheduler.feasible_nodes(pod)
        }
        sim_nodes = {
            cluster.state.nodes[int(i)].name for i in cluster.scheduler.feasible_nodes(pod)
        }
        assert live_nodes == sim_nodes, (seed, step, pod)
        possible = [
            i
            for i, n in enumerate(nodes)
            if admitted(n, pod.constraints) and share_fits(cluster, i, pod)
        ]
        placed = cluster.place([pod])
        if isinstance(placed, Unschedulable):
            assert possible == [], (seed, step, pod, placed.reasons)
            continue
        assert cluster.state.index_of[placed[0].node] in possible
        live_scheduler.state.allocate(placed[0])  # the live books follow the same decisions
    state = cluster.state
    assert (state.gpu_memory_used <= state.gpu_memory).all()
    assert (state.gpu_free >= 0).all()
    assert (state.gpu_shares <= state.gpu_split[:, None]).all()
    for i, node in enumerate(nodes):
        for g in node.unhealthy_gpus:
            assert state.gpu_free[i, g] == 0
            assert state.gpu_shares[i, g] == 0
