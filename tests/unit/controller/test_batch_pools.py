"""The live controller places with a profile per node pool and learns the workload FGD-class
scoring expects from what is submitted (issue 11 item 7)."""

from __future__ import annotations

from aipaas.api.resources import Amounts
from aipaas.backends.base import NodeInfo
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.placement import Placer, Pod
from tests.support.ctl_world import World

POOL = "aipaas.dev/pool"


def node(name: str, pool: str, gpus: int) -> NodeInfo:
    return NodeInfo(name, "sim", 64000, 512 * 1024, gpus, "H100", labels={POOL: pool})


def pod(name: str, gpus: int) -> Pod:
    return Pod(name, Amounts(cpu_milli=1000, memory_mib=1024, gpu_count=gpus, gpu_milli=1000))


def test_each_pool_places_with_its_own_profile() -> None:
    nodes = [node("a1", "a", 4), node("a2", "a", 4), node("b1", "b", 8)]
    placer = Placer(nodes, "default", pool_policies={"a": "bestfit", "b": "fgd"})
    profiles = {
        tuple(n.name for n in p.nodes): p.scheduler.profile.metadata.name for p in placer.pools
    }
    assert profiles == {("a1", "a2"): "bestfit", ("b1",): "fgd"}
    # A gang that only the other pool can hold whole goes there (pools never mix in a gang).
    slots = placer.place([pod("t/j/w-0", 8)])
    assert not isinstance(slots, tuple) and slots[0].node == "b1"
    slots = placer.place([pod("t/k/w-0", 4), pod("t/k/w-1", 4)])
    assert not isinstance(slots, tuple) and {s.node for s in slots} == {"a1", "a2"}
    assert isinstance(placer.place([pod("t/l/w-0", 8)]), tuple)  # every pool is full now


def test_without_pool_profiles_every_ordinary_node_is_one_pool() -> None:
    placer = Placer([node("a1", "a", 4), node("b1", "b", 4)], "default")
    assert [len(p.nodes) for p in placer.pools] == [2]
    slots = placer.place([pod("t/j/w-0", 4), pod("t/j/w-1", 4)])
    assert not isinstance(slots, tuple) and {s.node for s in slots} == {"a1", "b1"}


def test_the_workload_is_learned_from_submissions(world: World) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock)
    controller = world.controller(backend, clock, workload_size=3)
    world.submit(
        "a",
        "    - {name: w, replicas: 2, command: [x], resources: {cpu: 2, memory: 1Gi, gpu: 1}}\n",
    )
    world.submit(
        "b",
        "    - {name: w, replicas: 2, command: [x], resources: {cpu: 4, memory: 1Gi, gpu: 2}}\n",
    )
    controller.run_cycle()
    shapes = [(p.cpu_milli, p.gpu_count) for p in controller.workload.pods()]
    assert shapes == [(2000, 1), (4000, 2), (4000, 2)]  # the last 3 replicas submitted
    controller.run_cycle()  # seen jobs are not counted twice
    assert len(controller.workload.pods()) == 3
