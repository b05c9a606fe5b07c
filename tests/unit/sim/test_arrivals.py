"""The paper's arrival sequence (shuffle, then resampled clones) and node tie-break ranks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.types import PodRequest
from aipaas.sim.arrivals import (
    arrivals_from_file,
    paper_arrivals,
    paper_tiebreak_rank,
    tiebreak_rank_from_file,
)
from aipaas.sim.openb import TraceError


def trace() -> list[PodRequest]:
    """20 pods: 5 CPU-only, 5 shared (2,200 milli), 5 x 1 GPU, 5 x 2 GPUs: 17,200 milli."""
    pods = []
    for i in range(20):
        if i % 4 == 0:
            pods.append(PodRequest(f"pod-{i:02d}", 1000 + i, 10))
        elif i % 4 == 1:
            pods.append(PodRequest(f"pod-{i:02d}", 2000, 10, 1, 100 * (i % 7 + 1)))
        elif i % 4 == 2:
            pods.append(PodRequest(f"pod-{i:02d}", 4000, 10, 1, 1000))
        else:
            pods.append(PodRequest(f"pod-{i:02d}", 8000, 10, 2, 1000))
    return pods


def split(arrivals: list[PodRequest], count: int) -> tuple[list[PodRequest], list[PodRequest]]:
    return arrivals[:count], arrivals[count:]


class TestPaperArrivals:
    def test_originals_then_clones(self) -> None:
        pods = trace()
        total = sum(p.gpu_milli_total for p in pods)
        assert total == 17_200
        # 20 GPUs, tune 1.3: target 26,000.
        arrivals = paper_arrivals(list(reversed(pods)), total_gpu_milli=20_000, seed=42, tune=1.3)
        originals, clones = split(arrivals, len(pods))
        assert sorted(p.name for p in originals) == [p.name for p in pods]
        assert originals != pods  # shuffled
        assert clones, "the trace is below 130% of 20 GPUs: clones must follow"
        by_name = {p.name: p for p in pods}
        requested = total
        for k, clone in enumerate(clones):
            original, mark, number = clone.name.rpartition("-tuned-")
            assert (mark, number) == ("-tuned-", str(k))
            assert clone == replace(by_name[original], name=clone.name)
            # Every appended clone kept the running total within the target (per-GPU share).
            assert requested + clone.gpu_milli <= 26_000
            requested += clone.gpu_milli_total
        # The draw that stopped it had at most 1,000 per GPU: the total ended above 25,000;
        # a 2-GPU clone may overshoot the target by up to 1,000.
        assert 25_000 < requested <= 27_000

    def test_deterministic_per_seed(self) -> None:
        pods = trace()
        a = paper_arrivals(pods, 20_000, seed=7, tune=1.3)
        assert a == paper_arrivals(pods, 20_000, seed=7, tune=1.3)
        b = paper_arrivals(pods, 20_000, seed=8, tune=1.3)
        assert [p.name for p in a] != [p.name for p in b]

    def test_input_order_does_not_matter(self) -> None:
        pods = trace()
        assert paper_arrivals(pods, 20_000, 3, 1.3) == paper_arrivals(pods[::-1], 20_000, 3, 1.3)

    def test_stop_compares_per_gpu_milli(self) -> None:
        # One 8-GPU pod on a 10-GPU cluster, tune 1: target 10,000, trace total 8,000.
        # Per-GPU rule: 8,000 + 1,000 <= 10,000 -> one clone (total 16,000), then
        # 16,000 + 1,000 > 10,000 stops. Comparing the pod's total (8,000) would add none.
        big = PodRequest("big", 1000, 1, 8, 1000)
        arrivals = paper_arrivals([big], total_gpu_milli=10_000, seed=0, tune=1.0)
        assert [p.name for p in arrivals] == ["big", "big-tuned-0"]
        assert sum(p.gpu_milli_total for p in arrivals) == 16_000

    def test_clone_numbering(self) -> None:
        # 500m on 2 GPUs, tune 1: 500 + 500 k <= 2,000 for three clones, the fourth crosses.
        pod = PodRequest("s", 1000, 1, 1, 500)
        arrivals = paper_arrivals([pod], total_gpu_milli=2_000, seed=5, tune=1.0)
        assert [p.name for p in arrivals] == ["s", "s-tuned-0", "s-tuned-1", "s-tuned-2"]

    def test_target_already_reached(self) -> None:
        pod = PodRequest("s", 1000, 1, 1, 500)
        assert paper_arrivals([pod], total_gpu_milli=1_000, seed=5, tune=0.5) == [pod]

    @pytest.mark.parametrize("tune", [0, -1.3])
    def test_tune_must_be_positive(self, tune: float) -> None:
        with pytest.raises(ValueError) as error:
            paper_arrivals(trace(), 10_000, 42, tune)
        assert str(error.value) == f"tune: must be > 0, got {tune}"

    def test_cpu_only_trace_gets_no_clones(self) -> None:
        pods = [PodRequest(f"c{i}", 1000, 1) for i in range(10)]
        arrivals = paper_arrivals(pods, total_gpu_milli=8_000, seed=1, tune=1.3)
        assert sorted(p.name for p in arrivals) == sorted(p.name for p in pods)
        assert len(arrivals) == 10

    def test_cpu_only_pods_can_be_cloned(self) -> None:
        # Clones of CPU-only pods add nothing and never stop the tuning.
        pods = [PodRequest("cpu", 1000, 1), PodRequest("gpu", 1000, 1, 1, 100)]
        arrivals = paper_arrivals(pods, total_gpu_milli=1_000, seed=0, tune=1.0)
        clones = arrivals[2:]
        assert sum(p.gpu_milli_total for p in arrivals) == 1_000  # 100 + 9 clones of 100
        assert sum(1 for p in clones if p.name.startswith("gpu-tuned-")) == 9
        assert any(p.name.startswith("cpu-tuned-") for p in clones)


class TestTiebreakRank:
    def nodes(self) -> list[NodeSpec]:
        return [NodeSpec(f"node-{i:02d}", 1, 1) for i in range(30)]

    def test_permutation(self) -> None:
        rank = paper_tiebreak_rank(self.nodes(), seed=42)
        assert sorted(rank) == list(range(30))
        assert rank == paper_tiebreak_rank(self.nodes(), seed=42)
        assert rank != paper_tiebreak_rank(self.nodes(), seed=43)

    def test_rank_follows_the_name_not_the_position(self) -> None:
        nodes = self.nodes()
        forward = dict(zip((n.name for n in nodes), paper_tiebreak_rank(nodes, 9), strict=True))
        backward_nodes = nodes[::-1]
        backward = dict(
            zip(
                (n.name for n in backward_nodes),
                paper_tiebreak_rank(backward_nodes, 9),
                strict=True,
            )
        )
        assert forward == backward


class TestFromFile:
    def test_arrivals(self, tmp_path: Path) -> None:
        pods = trace()
        path = tmp_path / "order.csv"
        path.write_text(
            "arrival_index,pod_name\n0,pod-03\n1,pod-00\n2, pod-01 \n3,pod-03-tuned-0\n"
            "4,pod-01-tuned-1\n"
        )
        arrivals = arrivals_from_file(path, pods)
        assert [p.name for p in arrivals] == [
            "pod-03",
            "pod-00",
            "pod-01",
            "pod-03-tuned-0",
            "pod-01-tuned-1",
        ]
        assert arrivals[0] is pods[3]
        assert arrivals[3] == replace(pods[3], name="pod-03-tuned-0")

    def test_unknown_pod(self, tmp_path: Path) -> None:
        path = tmp_path / "order.csv"
        path.write_text("arrival_index,pod_name\n0,pod-00\n1,pod-99-tuned-4\n")
        with pytest.raises(TraceError) as error:
            arrivals_from_file(path, trace())
        assert str(error.value) == f"{path} row 3: pod pod-99 is not in the trace"

    def test_arrivals_missing_column_and_empty(self, tmp_path: Path) -> None:
        path = tmp_path / "order.csv"
        path.write_text("arrival_index,pod\n0,pod-00\n")
        with pytest.raises(TraceError) as error:
            arrivals_from_file(path, trace())
        assert str(error.value) == f"{path}: missing column pod_name"
        path.write_text("arrival_index,pod_name\n")
        with pytest.raises(TraceError) as error:
            arrivals_from_file(path, trace())
        assert str(error.value) == f"{path}: no arrivals"

    def test_tiebreak(self, tmp_path: Path) -> None:
        nodes = [NodeSpec("b", 1, 1), NodeSpec("a", 1, 1), NodeSpec("c", 1, 1)]
        path = tmp_path / "ties.csv"
        path.write_text("node_name,tiebreak_prefix\na,0601\nb,0815\nc,0007\n")
        assert tiebreak_rank_from_file(path, nodes) == [815, 601, 7]

    def test_tiebreak_missing_node(self, tmp_path: Path) -> None:
        nodes = [NodeSpec("a", 1, 1), NodeSpec("b", 1, 1), NodeSpec("c", 1, 1)]
        path = tmp_path / "ties.csv"
        path.write_text("node_name,tiebreak_prefix\na,1\n")
        with pytest.raises(TraceError) as error:
            tiebreak_rank_from_file(path, nodes)
        assert str(error.value) == f"{path}: no tie-break rank for 2 node(s), e.g. b"

    def test_tiebreak_bad_prefix(self, tmp_path: Path) -> None:
        path = tmp_path / "ties.csv"
        path.write_text("node_name,tiebreak_prefix\na,1\nb,x7\n")
        with pytest.raises(TraceError) as error:
            tiebreak_rank_from_file(path, [NodeSpec("a", 1, 1), NodeSpec("b", 1, 1)])
        assert str(error.value) == f"{path} row 3: tiebreak_prefix is not a number: 'x7'"

    def test_tiebreak_unknown_node(self, tmp_path: Path) -> None:
        path = tmp_path / "ties.csv"
        path.write_text("node_name,tiebreak_prefix\nzz,1\n")
        with pytest.raises(TraceError) as error:
            tiebreak_rank_from_file(path, [NodeSpec("a", 1, 1)])
        assert str(error.value) == f"{path} row 2: node zz is not in the cluster"

    def test_tiebreak_missing_column(self, tmp_path: Path) -> None:
        path = tmp_path / "ties.csv"
        path.write_text("node_name,prefix\na,1\n")
        with pytest.raises(TraceError) as error:
            tiebreak_rank_from_file(path, [NodeSpec("a", 1, 1)])
        assert str(error.value) == f"{path}: missing column tiebreak_prefix"
