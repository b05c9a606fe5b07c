"""ClusterState bookkeeping: allocate/release, refusals, and NodeSpec/PodRequest validation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec, gpu_affinity_tag
from aipaas.scheduler.framework.types import Placement, PodRequest


def cluster() -> ClusterState:
    return ClusterState(
        [
            NodeSpec("n0", cpu_milli=32_000, memory_mib=65_536, gpu_count=4, gpu_model="T4"),
            NodeSpec("n1", cpu_milli=8_000, memory_mib=16_384, gpu_count=2, gpu_model="V100"),
            NodeSpec("n2", cpu_milli=4_000, memory_mib=8_192),
        ]
    )


def place(
    state: ClusterState,
    node: int,
    gpus: tuple[int, ...] = (),
    milli: int = 0,
    cpu: int = 0,
    mem: int = 0,
    pod: str = "p",
) -> Placement:
    return Placement(pod, state.nodes[node].name, node, gpus, milli, cpu, mem)


class TestInitialState:
    def test_columns(self) -> None:
        s = cluster()
        assert len(s) == 3
        assert s.max_gpus == 4
        assert s.models == ("T4", "V100")
        assert s.model_id.tolist() == [0, 1, -1]
        assert s.cpu_free.tolist() == [32_000, 8_000, 4_000]
        assert s.memory_free.tolist() == [65_536, 16_384, 8_192]
        assert s.gpu_free.tolist() == [
            [1000, 1000, 1000, 1000],
            [1000, 1000, 0, 0],
            [0, 0, 0, 0],
        ]
        assert s.gpu_free_total.tolist() == [4000, 2000, 0]
        assert s.gpu_free_max.tolist() == [1000, 1000, 0]
        assert s.whole_gpus_free.tolist() == [4, 2, 0]
        assert s.version.tolist() == [0, 0, 0]
        assert s.pod_count.tolist() == [0, 0, 0]
        assert s.gpu_tags == [Counter(), Counter(), Counter()]
        assert s.total_gpu_milli == 6000
        assert s.allocated_gpu_milli == 0

    def test_model_mask(self) -> None:
        s = cluster()
        assert s.model_mask([]).tolist() == [True, True, True]
        assert s.model_mask(["V100"]).tolist() == [False, True, False]
        assert s.model_mask(["T4", "V100"]).tolist() == [True, True, False]
        assert s.model_mask(["A100"]).tolist() == [False, False, False]

    def test_duplicate_node_name_refused(self) -> None:
        with pytest.raises(ValueError, match="node 'a' appears more than once"):
            ClusterState([NodeSpec("a", 1, 1), NodeSpec("b", 1, 1), NodeSpec("a", 2, 2)])

    def test_cluster_without_gpus_has_one_empty_gpu_column(self) -> None:
        s = ClusterState([NodeSpec("a", 1000, 10)])
        assert s.gpu_free.shape == (1, 1)
        assert s.gpu_free_total.tolist() == [0]
        assert s.total_gpu_milli == 0


class TestAllocateRelease:
    def test_shared_gpu_allocation(self) -> None:
        s = cluster()
        s.allocate(place(s, 0, (2,), milli=300, cpu=1_000, mem=2_048))
        assert s.cpu_free.tolist() == [31_000, 8_000, 4_000]
        assert s.memory_free.tolist() == [63_488, 16_384, 8_192]
        assert s.gpu_free[0].tolist() == [1000, 1000, 700, 1000]
        assert s.gpu_free_total.tolist() == [3700, 2000, 0]
        assert s.gpu_free_max.tolist() == [1000, 1000, 0]
        assert s.whole_gpus_free.tolist() == [3, 2, 0]
        assert s.version.tolist() == [1, 0, 0]
        assert s.pod_count.tolist() == [1, 0, 0]
        assert s.allocated_gpu_milli == 300

    def test_whole_gpus_and_max_drop(self) -> None:
        s = cluster()
        s.allocate(place(s, 1, (0, 1), milli=1000, cpu=2_000, mem=1_000))
        assert s.gpu_free[1].tolist() == [0, 0, 0, 0]
        assert s.gpu_free_total[1] == 0
        assert s.gpu_free_max[1] == 0
        assert s.whole_gpus_free[1] == 0
        assert s.allocated_gpu_milli == 2000

    def test_several_pods_on_one_node(self) -> None:
        s = cluster()
        a = place(s, 0, (1,), milli=600, cpu=100, mem=1, pod="a")
        b = place(s, 0, (1,), milli=400, cpu=100, mem=1, pod="b")
        c = place(s, 0, (0,), milli=1000, cpu=100, mem=1, pod="c")
        d = place(s, 0, (), cpu=100, mem=1, pod="d")  # CPU-only: no GPU tag
        for p in (a, b, c, d):
            s.allocate(p)
        assert s.gpu_free[0].tolist() == [0, 0, 1000, 1000]
        assert s.gpu_free_total[0] == 2000
        assert s.gpu_free_max[0] == 1000
        assert s.whole_gpus_free[0] == 2
        assert s.version[0] == 4
        assert s.pod_count[0] == 4
        assert s.cpu_free[0] == 31_600
        s.release(a)
        assert s.gpu_free[0].tolist() == [0, 600, 1000, 1000]
        assert s.gpu_free_max[0] == 1000
        s.release(c)
        assert s.whole_gpus_free[0] == 3
        assert s.version[0] == 6
        assert s.pod_count[0] == 2

    def test_release_restores_everything_but_version(self) -> None:
        s = cluster()
        before = {k: getattr(s, k).copy() for k in ("cpu_free", "memory_free", "gpu_free",
                  "gpu_free_total", "gpu_free_max", "whole_gpus_free", "pod_count")}  # fmt: skip
        placements = [
            place(s, 0, (3,), milli=250, cpu=500, mem=10, pod="x"),
            place(s, 0, (0, 1), milli=1000, cpu=500, mem=10, pod="y"),
            place(s, 2, (), cpu=4_000, mem=8_192, pod="z"),
        ]
        for p in placements:
            s.allocate(p)
        for p in placements:
            s.release(p)
        for key, value in before.items():
            np.testing.assert_array_equal(getattr(s, key), value, err_msg=key)
        assert s.version.tolist() == [4, 0, 2]

    def test_exactly_full_is_allowed(self) -> None:
        s = cluster()
        s.allocate(place(s, 2, (), cpu=4_000, mem=8_192))
        assert s.cpu_free[2] == 0 and s.memory_free[2] == 0


class TestGpuTags:
    def test_allocation_adds_its_tag(self) -> None:
        s = cluster()
        s.allocate(place(s, 0, (2,), milli=300, cpu=1_000, mem=2_048))
        assert s.gpu_tags[0] == Counter({"share": 1})

    def test_tags_count_pods_and_release_removes_them(self) -> None:
        s = cluster()
        a = place(s, 0, (1,), milli=600, pod="a")
        b = place(s, 0, (1,), milli=400, pod="b")
        c = place(s, 0, (0,), milli=1000, pod="c")
        d = place(s, 0, (2, 3), milli=1000, pod="d")
        e = place(s, 0, (), cpu=100, pod="e")  # CPU-only: no GPU tag
        for p in (a, b, c, d, e):
            s.allocate(p)
        assert s.gpu_tags[0] == Counter({"share": 2, "1-gpu": 1, "2-gpu": 1})
        s.release(a)
        assert s.gpu_tags[0] == Counter({"share": 1, "1-gpu": 1, "2-gpu": 1})
        s.release(c)
        s.release(d)
        assert s.gpu_tags[0] == Counter({"share": 1})

    def test_allocate_then_release_leaves_no_tag(self) -> None:
        s = cluster()
        p = place(s, 1, (0, 1), milli=1000)
        s.allocate(p)
        s.release(p)
        assert s.gpu_tags == [Counter(), Counter(), Counter()]


class TestAllocateRefusals:
    def assert_refused(self, s: ClusterState, p: Placement, message: str) -> None:
        before = (s.cpu_free.copy(), s.gpu_free.copy(), s.version.copy())
        with pytest.raises(ValueError) as error:
            s.allocate(p)
        assert str(error.value) == message
        # A refused placement leaves the state untouched.
        np.testing.assert_array_equal(s.cpu_free, before[0])
        np.testing.assert_array_equal(s.gpu_free, before[1])
        np.testing.assert_array_equal(s.version, before[2])

    def test_gpu_milli_over(self) -> None:
        s = cluster()
        s.allocate(place(s, 0, (1,), milli=700))
        self.assert_refused(
            s,
            place(s, 0, (1,), milli=400, pod="q"),
            "placement of 'q': GPU 1 of n0 has 300 milli free, 400 asked",
        )

    def test_cpu_over(self) -> None:
        s = cluster()
        self.assert_refused(
            s, place(s, 1, (), cpu=8_001, pod="q"), "placement of 'q': not enough CPU on n1"
        )

    def test_memory_over(self) -> None:
        s = cluster()
        self.assert_refused(
            s, place(s, 1, (), mem=16_385, pod="q"), "placement of 'q': not enough memory on n1"
        )

    def test_unknown_node_name(self) -> None:
        s = cluster()
        p = Placement("q", "nope", 0, (), 0, 1, 1)
        self.assert_refused(s, p, "placement of 'q': unknown node 'nope'")

    def test_node_index_out_of_range(self) -> None:
        s = cluster()
        p = Placement("q", "n0", 3, (), 0, 1, 1)
        self.assert_refused(s, p, "placement of 'q': unknown node 'n0'")

    def test_name_index_mismatch(self) -> None:
        s = cluster()
        p = Placement("q", "n1", 0, (), 0, 1, 1)
        self.assert_refused(s, p, "placement of 'q': unknown node 'n1'")

    def test_gpu_index_out_of_range(self) -> None:
        s = cluster()
        # n1 has 2 GPUs; column 2 exists in the array (n0 has 4) but is not a GPU of n1.
        self.assert_refused(
            s, place(s, 1, (2,), milli=100, pod="q"), "placement of 'q': node has no GPU 2"
        )
        self.assert_refused(
            s, place(s, 1, (-1,), milli=100, pod="q"), "placement of 'q': node has no GPU -1"
        )
        self.assert_refused(
            s, place(s, 2, (0,), milli=100, pod="q"), "placement of 'q': node has no GPU 0"
        )

    def test_same_gpu_twice(self) -> None:
        s = cluster()
        self.assert_refused(
            s,
            place(s, 0, (1, 1), milli=1000, pod="q"),
            "placement of 'q' names a GPU twice: [1, 1]",
        )

    def test_release_of_a_gpu_the_node_lacks_refused(self) -> None:
        s = cluster()
        with pytest.raises(ValueError, match="GPU 3"):
            s.release(place(s, 1, (3,), milli=100, pod="q"))
        assert s.gpu_free_total.tolist() == [4000, 2000, 0]

    def test_release_naming_a_gpu_twice_refused(self) -> None:
        s = cluster()
        s.allocate(place(s, 0, (1,), milli=1000, pod="a"))
        with pytest.raises(ValueError):
            s.release(place(s, 0, (1, 1), milli=600, pod="q"))
        assert int(s.gpu_free.max()) <= 1000

    def test_release_beyond_memory_capacity_refused(self) -> None:
        s = cluster()
        with pytest.raises(ValueError, match="memory"):
            s.release(place(s, 0, (), mem=1, pod="q"))

    def test_release_beyond_capacity_refused(self) -> None:
        s = cluster()
        with pytest.raises(ValueError, match=r"release of 'q': GPU 0 would exceed capacity"):
            s.release(place(s, 0, (0,), milli=1, pod="q"))
        with pytest.raises(ValueError, match=r"release of 'q': CPU would exceed capacity"):
            s.release(place(s, 0, (), cpu=1, pod="q"))


class TestValidation:
    @pytest.mark.parametrize("attribute", ["cpu_milli", "memory_mib", "gpu_count"])
    def test_node_negative(self, attribute: str) -> None:
        values: dict[str, Any] = {"cpu_milli": 1, "memory_mib": 1, "gpu_count": 0, attribute: -5}
        with pytest.raises(ValueError) as error:
            NodeSpec("n", gpu_model="T4", **values)
        assert str(error.value) == f"node 'n': {attribute} must be >= 0, got -5"

    def test_node_gpu_model_missing(self) -> None:
        with pytest.raises(ValueError) as error:
            NodeSpec("n", 1, 1, gpu_count=2)
        assert str(error.value) == "node 'n': gpu_model is required when gpu_count > 0"

    def test_node_without_gpus_needs_no_model(self) -> None:
        assert NodeSpec("n", 1, 1).gpu_model == ""

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"cpu_milli": -1}, "pod 'p': cpu_milli: must be >= 0, got -1"),
            ({"memory_mib": -2}, "pod 'p': memory_mib: must be >= 0, got -2"),
            ({"gpu_count": -1}, "pod 'p': gpu_count: must be >= 0, got -1"),
            (
                {"gpu_count": 1, "gpu_milli": 1001},
                "pod 'p': gpu_milli: must be within 0..1000, got 1001",
            ),
            (
                {"gpu_count": 1, "gpu_milli": -1},
                "pod 'p': gpu_milli: must be within 0..1000, got -1",
            ),
            (
                {"gpu_count": 2, "gpu_milli": 500},
                "pod 'p': gpu_milli: a pod asking for several GPUs must take them whole (1000)",
            ),
            (
                {"gpu_count": 1, "gpu_milli": 0},
                "pod 'p': gpu_milli: a GPU request needs a share above 0",
            ),
            (
                {"cpu_milli": -1, "memory_mib": -1},
                "pod 'p': cpu_milli: must be >= 0, got -1; memory_mib: must be >= 0, got -1",
            ),
        ],
    )
    def test_pod_invalid(self, kwargs: dict[str, int], message: str) -> None:
        values: dict[str, Any] = {"cpu_milli": 1, "memory_mib": 1, **kwargs}
        with pytest.raises(ValueError) as error:
            PodRequest("p", **values)
        assert str(error.value) == message

    def test_pod_properties(self) -> None:
        shared = PodRequest("s", 100, 1, gpu_count=1, gpu_milli=250, gpu_models=("T4",))
        assert shared.is_shared and shared.gpu_milli_total == 250
        assert shared.shape == (100, 250, 1, ("T4",))
        whole = PodRequest("w", 100, 1, gpu_count=4, gpu_milli=1000)
        assert not whole.is_shared and whole.gpu_milli_total == 4000
        one = PodRequest("o", 100, 1, gpu_count=1, gpu_milli=1000)
        assert not one.is_shared
        cpu = PodRequest("c", 100, 1)
        assert not cpu.is_shared and cpu.gpu_milli_total == 0
        assert [gpu_affinity_tag(p) for p in (shared, whole, one, cpu)] == [
            "share", "4-gpu", "1-gpu", ""
        ]  # fmt: skip
