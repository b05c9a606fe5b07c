"""The data-plane simulator: bandwidth sharing, the trace, prediction, and runs whose outcome
follows from the model (a warm cache avoids the source, prefetch warms a queued job's node,
affinity sends a job to the node holding its data, no cache ever overfills)."""

from __future__ import annotations

import pytest

from aipaas.data.sim_bandwidth import INFINITE, Flow, max_min_rates
from aipaas.data.sim_model import CACHE_ONLY, NO_CACHE, OURS, DataPlane, Policy, SimSettings
from aipaas.data.sim_predict import HeadJob, NodeTimeline, predict_nodes
from aipaas.data.sim_result import SimResult
from aipaas.data.sim_run import DataSim
from aipaas.data.sim_trace import GIB, MB, SimDataset, SimJob, Trace, TraceConfig, make_trace

SLOW = DataPlane(
    source_to_node_bps=100 * MB,
    source_total_bps=1000 * MB,
    cache_to_task_bps=10_000 * MB,
    cache_bytes_per_node=100 * GIB,
)


def trace(nodes: int, *jobs: SimJob) -> Trace:
    config = TraceConfig(nodes=nodes, jobs=len(jobs))
    return Trace(config, tuple({job.dataset for job in jobs}), tuple(jobs))


def job(name: str, submit: float, gpus: int, duration: float, dataset: SimDataset) -> SimJob:
    # 8-GPU pods read 800 MB/s, far above the source's 100 MB/s per node: cold data stalls.
    return SimJob(name, submit, gpus, duration, dataset, 100 * MB)


def run(tr: Trace, policy: Policy) -> SimResult:
    return DataSim(tr, policy, SimSettings(plane=SLOW, step_s=10.0)).run()


def stall(result: SimResult, name: str) -> float:
    return next(j.stall_gpu_s for j in result.jobs if j.name == name)


class TestBandwidth:
    def test_max_min_fair_within_links_and_demands(self) -> None:
        flows = [Flow(1.0, ("a", "g")), Flow(INFINITE, ("a", "g")), Flow(INFINITE, ("b", "g"))]
        rates = max_min_rates(flows, {"a": 3.0, "b": 10.0, "g": 5.0})
        assert rates == pytest.approx([1.0, 2.0, 2.0])

    def test_equal_flows_share_a_link_equally(self) -> None:
        rates = max_min_rates([Flow(INFINITE, ("x",))] * 4, {"x": 8.0})
        assert rates == pytest.approx([2.0] * 4)


class TestTrace:
    def test_seeded_and_within_stated_bounds(self) -> None:
        config = TraceConfig(seed=7, jobs=400)
        first, again = make_trace(config), make_trace(config)
        assert first == again
        assert make_trace(TraceConfig(seed=8, jobs=400)) != first
        sizes = [d.size_bytes for d in first.datasets]
        assert min(sizes) >= GIB and max(sizes) <= 2048 * GIB
        assert all(j.gpus in {1, 2, 4, 8, 16, 32} for j in first.jobs)
        submits = [j.submit_s for j in first.jobs]
        assert submits == sorted(submits)

    def test_zipf_popularity_makes_the_first_ranks_most_read(self) -> None:
        tr = make_trace(TraceConfig(seed=3, jobs=2000))
        reads = [sum(1 for j in tr.jobs if j.dataset.name == d.name) for d in tr.datasets]
        assert reads[0] == max(reads) and reads[0] > 5 * reads[50]


class TestPredict:
    def test_head_jobs_take_the_nodes_that_free_first_warm_ones_first(self) -> None:
        lines = {
            "n0": NodeTimeline(0, releases=[(500.0, 8)]),
            "n1": NodeTimeline(8),
            "n2": NodeTimeline(8),
        }
        heads = [HeadJob("a", (8,)), HeadJob("b", (8, 8))]
        predicted = predict_nodes(heads, lines, 0.0, {"a": {"n2": 1.0}})
        assert predicted == {"a": ("n2",), "b": ("n1", "n0")}

    def test_a_predicted_job_holds_its_gpus_from_its_start(self) -> None:
        line = NodeTimeline(4, releases=[(100.0, 4)])
        assert line.earliest(8, 0.0) == 100.0
        line.takes.append((100.0, 8))
        assert line.earliest(4, 0.0) is None  # free until 100, then taken: never 4 for good
        starts: dict[str, float] = {}
        lines = {"n0": NodeTimeline(0, releases=[(50.0, 8)]), "n1": NodeTimeline(0)}
        assert predict_nodes([HeadJob("j", (8,))], lines, 0.0, starts=starts) == {"j": ("n0",)}
        assert starts == {"j": 50.0}

    def test_no_prediction_when_the_cluster_cannot_hold_the_job(self) -> None:
        predicted = predict_nodes([HeadJob("big", (8, 8))], {"n0": NodeTimeline(8)}, 0.0)
        assert predicted == {"big": ()}


class TestRuns:
    def test_a_second_job_on_a_warm_node_reads_nothing_from_the_source(self) -> None:
        data = SimDataset("d", 10 * GIB)
        tr = trace(1, job("first", 0, 8, 600, data), job("second", 2000, 8, 600, data))
        cached, uncached = run(tr, CACHE_ONLY), run(tr, NO_CACHE)
        assert stall(cached, "second") == 0.0 < stall(cached, "first")
        assert cached.source_bytes == pytest.approx(data.size_bytes, rel=0.01)
        assert uncached.source_bytes > 2 * data.size_bytes
        assert stall(uncached, "second") > 0.0

    def test_with_peers_a_cold_node_reads_a_copy_elsewhere_not_the_source(self) -> None:
        # The first job fills node A from the source and keeps running; the second starts on
        # B when the blocker ends, after A's copy is whole, and reads it from A.
        data, other = SimDataset("d", 10 * GIB), SimDataset("other", 1 * GIB)
        jobs = (
            job("first", 0, 8, 3000, data),
            job("blocker", 0, 8, 900, other),
            job("second", 300, 8, 600, data),
        )
        tr = Trace(TraceConfig(nodes=2, jobs=3), (data, other), jobs)
        peers = Policy("peers", cache=True, peers=True)
        local, shared = run(tr, CACHE_ONLY), run(tr, peers)
        assert stall(shared, "second") < stall(local, "second")
        assert shared.source_bytes < local.source_bytes

    def test_prefetch_warms_the_node_a_queued_job_waits_for(self) -> None:
        warmup, data = SimDataset("other", 1 * GIB), SimDataset("d", 20 * GIB)
        tr = trace(1, job("running", 0, 8, 1200, warmup), job("queued", 10, 8, 600, data))
        blind, ours = run(tr, CACHE_ONLY), run(tr, OURS)
        assert stall(blind, "queued") > 0.0
        assert stall(ours, "queued") == 0.0

    @pytest.mark.parametrize(("weight", "goes_warm"), [(30, False), (101, True)])
    def test_affinity_weighs_the_warm_node_against_packing(
        self, weight: int, goes_warm: bool
    ) -> None:
        # The warm node is left empty and another half used: data-blind FGD packs the job onto
        # the half-used node; affinity takes it to its data when it weighs as much as FGD.
        data, other = SimDataset("d", 10 * GIB), SimDataset("other", 1 * GIB)
        jobs = (
            job("warm-up", 0, 8, 600, data),
            job("filler", 100, 4, 9000, other),
            job("again", 3000, 4, 600, data),
        )
        affinity = Policy("affinity", cache=True, affinity=True)
        settings = SimSettings(plane=SLOW, step_s=10.0, affinity_weight=weight)
        for seed in (1, 2, 3):  # the seed draws the node tie-break order
            tr = Trace(TraceConfig(seed=seed, nodes=4, jobs=3), (data, other), jobs)
            assert stall(run(tr, CACHE_ONLY), "again") > 0.0
            warm = stall(DataSim(tr, affinity, settings).run(), "again") == 0.0
            assert warm == goes_warm

    def test_caches_never_overfill(self) -> None:
        config = TraceConfig(seed=5, nodes=4, jobs=60, datasets=20, size_median_gib=30)
        checked = []

        class Checked(DataSim):
            def advance(self, step: float) -> bool:
                for cache in self.caches.values():
                    assert cache.reserved <= cache.capacity
                checked.append(step)
                return super().advance(step)

        small = DataPlane(cache_bytes_per_node=200 * GIB)
        for policy in (CACHE_ONLY, OURS):
            Checked(make_trace(config), policy, SimSettings(plane=small, step_s=60.0)).run()
        assert checked
