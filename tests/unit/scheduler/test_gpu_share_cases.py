# ruff: noqa: E501  (a table reads better with one case per line)
"""GPU shares by memory and cores, case by case after HAMi's device fit tests (Test_fitInDevices
and the NVIDIA device's Fit tests in pkg/device/nvidia): what fits on which GPU, never over its
memory or cores; unhealthy GPUs; GPUs by UUID or index; binpack and spread at node and GPU level.
Every expected placement was worked out by hand.

Unless a case says otherwise: node ``n`` has 2 GPUs of 10000 MiB (UUIDs GPU-a, GPU-b), up to
10 shares each; the profile is the default one (nodes binpack, GPUs spread, as HAMi's defaults).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aipaas.api.job import TaskSpec
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.from_api import pod_request
from aipaas.scheduler.batch.model import Node
from aipaas.scheduler.framework.profile import GpuSharePolicy, load_profile
from aipaas.scheduler.framework.types import GpuShare, Placement, PodRequest, Unschedulable


def node(name: str = "n", gpus: int = 2, memory: int = 10_000, **extra: object) -> Node:
    uuids = tuple(f"GPU-{chr(ord('a') + i)}" for i in range(gpus))
    fields: dict[str, object] = {"gpu_memory_mib": memory, "gpu_uuids": uuids, **extra}
    return Node(name, gpus, 64_000, 256 * 1024, gpu_model="A100", **fields)  # type: ignore[arg-type]


def share(
    name: str = "p",
    *,
    count: int = 1,
    memory: int = 0,
    percent: int = 0,
    cores: int = 0,
    uuids: tuple[str, ...] = (),
    indices: tuple[int, ...] = (),
) -> PodRequest:
    return PodRequest(
        name,
        1000,
        1024,
        gpu_count=count,
        gpu_milli=max(cores * 10, 1),
        share=GpuShare(memory, percent, uuids, indices),
    )


def engine(
    nodes: Sequence[Node], node_policy: str = "binpack", gpu_policy: str = "spread"
) -> SnapshotCluster:
    profile = load_profile("default")
    policy = GpuSharePolicy.model_validate({"nodePolicy": node_policy, "gpuPolicy": gpu_policy})
    spec = profile.spec.model_copy(update={"gpuShare": policy})
    return SnapshotCluster(nodes, profile.model_copy(update={"spec": spec}))


def run(cluster: SnapshotCluster, pods: Sequence[PodRequest]) -> list[Placement | Unschedulable]:
    out: list[Placement | Unschedulable] = []
    for pod in pods:
        placed = cluster.place([pod])
        out.append(placed if isinstance(placed, Unschedulable) else placed[0])
    return out


def where(result: Placement | Unschedulable) -> tuple[str, tuple[int, ...]] | str:
    if isinstance(result, Unschedulable):
        return "refused: " + "; ".join(result.reasons)
    return (result.node, result.gpus)


# (upstream case, nodes, policies, pods placed in order, want for the last pod)
CASES = [
    pytest.param("Test_fitInDevices/fit memory and cores", [node(gpus=1)], ("binpack", "spread"),
                 [share(memory=3000, cores=30)], ("n", (0,)), id="3000 MiB and 30 cores on a free GPU"),
    pytest.param("Test_fitInDevices/card insufficient memory", [node(gpus=1)], ("binpack", "spread"),
                 [share("a", memory=9000, cores=10), share(memory=3000, cores=30)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs with the memory asked free",
                 id="3000 MiB asked, 1000 MiB left: refused"),
    pytest.param("Test_fitInDevices/card insufficient core", [node(gpus=1)], ("binpack", "spread"),
                 [share("a", memory=1000, cores=80), share(memory=1000, cores=30)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs with the cores asked free",
                 id="30 cores asked, 20 left: refused"),
    pytest.param("Test_fitInDevices/memory percentage", [node(gpus=1)], ("binpack", "spread"),
                 [share("a", memory=7000, cores=10), share(percent=25, cores=10)], ("n", (0,)),
                 id="25% is 2500 MiB, 3000 left: fits"),
    pytest.param("Test_fitInDevices/memory percentage insufficient", [node(gpus=1)], ("binpack", "spread"),
                 [share("a", memory=8000, cores=10), share(percent=25, cores=10)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs with the memory asked free",
                 id="25% is 2500 MiB, 2000 left: refused"),
    pytest.param("Test_fitInDevices/request two cards", [node()], ("binpack", "spread"),
                 [share(count=2, memory=3000, cores=30)], ("n", (0, 1)), id="a share of each of two GPUs"),
    pytest.param("Test_fitInDevices/allocated cards insufficient request", [node()], ("binpack", "spread"),
                 [share("a", memory=9000, cores=10, indices=(0,)), share(count=2, memory=3000, cores=30)],
                 "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 2 GPUs with the memory asked free",
                 id="two GPUs asked, one has room: refused"),
    pytest.param("Test_fitInDevices/card not health", [node(unhealthy_gpus=(0,))], ("binpack", "spread"),
                 [share(memory=1000, cores=10)], ("n", (1,)), id="GPU 0 unhealthy: the share goes to GPU 1"),
    pytest.param("Test_fitInDevices/card not health", [node(unhealthy_gpus=(0,))], ("binpack", "spread"),
                 [share(count=2, memory=1000, cores=10)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 2 healthy GPUs",
                 id="two GPUs asked, one unhealthy: refused"),
    pytest.param("Test_fitInDevices/exclusive device allocate conflict", [node()], ("binpack", "spread"),
                 [share("a", memory=1000, cores=10, indices=(0,)), share(memory=1000, cores=100)], ("n", (1,)),
                 id="100 cores wants a GPU unshared: GPU 1"),
    pytest.param("Test_fitInDevices/card compute units exhausted", [node(gpus=1)], ("binpack", "spread"),
                 [share("a", memory=1000, cores=100), share(memory=1000, cores=0)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs with the cores asked free",
                 id="0 cores on a GPU whose cores are all taken: refused"),
    pytest.param("Test_fitInDevices/card time slicing exhausted", [node(gpu_split=2)], ("binpack", "spread"),
                 [share("a", memory=100, cores=1, indices=(0,)), share("b", memory=100, cores=1, indices=(0,)), share(memory=100, cores=1, indices=(0,))],
                 "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs that take the share",
                 id="GPU 0 at its split count of 2: a third share there is refused"),
    pytest.param("Test_fitInDevices/card time slicing exhausted", [node(gpu_split=2)], ("binpack", "spread"),
                 [share("a", memory=100, cores=1, indices=(0,)), share("b", memory=100, cores=1, indices=(0,)), share(memory=100, cores=1)], ("n", (1,)),
                 id="GPU 0 at its split count: the share goes to GPU 1"),
    pytest.param("Test_fitInDevices/card uuid match", [node()], ("binpack", "spread"),
                 [share(memory=1000, cores=10, uuids=("GPU-b",))], ("n", (1,)), id="the GPU named by UUID"),
    pytest.param("Test_fitInDevices/card uuid mismatch", [node()], ("binpack", "spread"),
                 [share(memory=1000, cores=10, uuids=("GPU-z",))], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs that take the share",
                 id="a UUID the node does not have: refused"),
    pytest.param("Test_fitInDevices/card index", [node()], ("binpack", "spread"),
                 [share(memory=1000, cores=10, indices=(1,))], ("n", (1,)), id="the GPU named by index"),
    pytest.param("TestScore/gpu binpack", [node()], ("binpack", "binpack"),
                 [share("a", memory=1000, cores=10), share(memory=1000, cores=10)], ("n", (0,)),
                 id="GPU binpack: the second share joins the used GPU 0"),
    pytest.param("TestScore/gpu spread", [node()], ("binpack", "spread"),
                 [share("a", memory=1000, cores=10), share(memory=1000, cores=10)], ("n", (1,)),
                 id="GPU spread: the second share goes to the unused GPU 1"),
    pytest.param("TestScore/node binpack", [node("n1"), node("n2")], ("binpack", "spread"),
                 [share("a", memory=1000, cores=10), share(memory=1000, cores=10)], ("n1", (1,)),
                 id="node binpack: the used node n1 again (its free GPU, GPU spread)"),
    pytest.param("TestScore/node spread", [node("n1"), node("n2")], ("spread", "spread"),
                 [share("a", memory=1000, cores=10), share(memory=1000, cores=10)], ("n2", (0,)),
                 id="node spread: the unused node n2"),
    pytest.param("Test_fitInDevices/memory unknown", [node(gpus=1, memory=0)], ("binpack", "spread"),
                 [share(memory=3000, cores=10)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs with the memory asked free",
                 id="MiB asked of a GPU of unknown memory: refused"),
    pytest.param("Test_fitInDevices/default memory is the whole card", [node()], ("binpack", "spread"),
                 [share("a", cores=30), share("b", cores=30), share(cores=30)], "refused: gang: 0 of 1 pods fit; 0/1 nodes are available: 1 fewer than 1 GPUs with the memory asked free",
                 id="no memory asked takes all of it: two GPUs, two shares, the third refused"),
    pytest.param("Test_fitInDevices/whole card after a share", [node()], ("binpack", "spread"),
                 [share("a", memory=1000, cores=0, indices=(0,)), PodRequest("w", 1000, 1024, gpu_count=1, gpu_milli=1000)], ("n", (1,)),
                 id="a whole-GPU task does not take a GPU with a 0-core share"),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "nodes", "policies", "pods", "want"), CASES)
def test_gpu_share_fit(
    upstream: str,
    nodes: list[Node],
    policies: tuple[str, str],
    pods: list[PodRequest],
    want: tuple[str, tuple[int, ...]] | str,
) -> None:
    assert upstream
    results = run(engine(nodes, *policies), pods)
    assert all(not isinstance(r, Unschedulable) for r in results[:-1]), results
    assert where(results[-1]) == want


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 20


class TestAccounting:
    def test_memory_and_cores_are_taken_and_given_back(self) -> None:
        cluster = engine([node(gpus=1)])
        (placed,) = run(cluster, [share(memory=3000, cores=30)])
        assert isinstance(placed, Placement)
        state = cluster.state
        assert (int(state.gpu_memory_used[0, 0]), int(state.gpu_free[0, 0])) == (3000, 700)
        cluster.release(placed)
        assert (int(state.gpu_memory_used[0, 0]), int(state.gpu_free[0, 0])) == (0, 1000)

    def test_a_task_on_an_unhealthy_gpu_stays_accounted_and_takes_nothing(self) -> None:
        cluster = engine([node(unhealthy_gpus=(0,))])
        running = Placement("old", "n", 0, (0,), 300, 1000, 1024, share=True, gpu_memory_mib=3000)
        cluster.hold(running)
        cluster.release(running)
        assert int(cluster.state.gpu_free[0, 0]) == 0

    def test_the_api_form_becomes_a_share(self) -> None:
        task = TaskSpec.model_validate(
            {
                "name": "w",
                "command": ["x"],
                "resources": {"gpu": {"count": 2, "memory": "3000Mi", "cores": 30}},
            }
        )
        pod = pod_request(task, "t/j/w-0")
        assert (pod.gpu_count, pod.gpu_milli, pod.share) == (2, 300, GpuShare(3000, 0, (), ()))

    def test_a_fraction_without_memory_keeps_the_milli_path(self) -> None:
        task = TaskSpec.model_validate({"name": "w", "command": ["x"], "resources": {"gpu": 0.5}})
        pod = pod_request(task, "t/j/w-0")
        assert (pod.gpu_count, pod.gpu_milli, pod.share) == (1, 500, None)

    def test_memory_and_percent_together_are_refused_naming_the_field(self) -> None:
        with pytest.raises(ValueError, match=r"resources\.gpu") as caught:
            TaskSpec.model_validate(
                {
                    "name": "w",
                    "command": ["x"],
                    "resources": {"gpu": {"memory": "1Gi", "memoryPercent": 20}},
                }
            )
        assert "give one" in str(caught.value)
