"""The workload the live controller's FGD-class placement learns (controller/workload.py), and
the pool-profile setting."""

from __future__ import annotations

import numpy as np
import pytest

from aipaas.api.job import Job
from aipaas.api.registry import load_objects
from aipaas.controller.workload import (
    POOL_LABEL,
    Workload,
    parse_pool_profiles,
    pool_of,
    pool_policies,
)
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest
from aipaas.scheduler.plugins.fgd import typical_pods
from aipaas.settings import Settings, env_overrides


def job(name: str, gpu: str, replicas: int = 1, cpu: str = "2") -> Job:
    text = (
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: t, uid: u-{name}}}\n"
        f"spec:\n  queue: q\n  tasks: [{{name: w, replicas: {replicas}, command: ['true'],"
        f" resources: {{gpu: {gpu}, cpu: '{cpu}'}}}}]\n"
    )
    parsed = load_objects(text)[0]
    assert isinstance(parsed, Job)
    return parsed


def shapes(workload: Workload) -> list[tuple[int, int, int]]:
    return [(p.cpu_milli, p.gpu_count, p.gpu_milli) for p in workload.pods()]


class TestWorkload:
    def test_each_job_counts_once_per_replica(self) -> None:
        workload = Workload(size=10)
        assert workload.observe([job("a", "0.5", replicas=2), job("b", "1")]) == 3
        assert shapes(workload) == [(2000, 1, 500), (2000, 1, 500), (2000, 1, 1000)]
        # The next cycle lists the same jobs again: nothing new is recorded.
        assert workload.observe([job("a", "0.5", replicas=2), job("b", "1")]) == 0
        assert len(workload) == 3

    def test_bounded_oldest_dropped_first(self) -> None:
        workload = Workload(size=3)
        workload.observe([job("a", "0.5", replicas=2)])
        workload.observe([job("a", "0.5", replicas=2), job("b", "2", replicas=2)])
        assert shapes(workload) == [(2000, 1, 500), (2000, 2, 1000), (2000, 2, 1000)]

    def test_a_finished_job_is_forgotten_not_counted_again(self) -> None:
        workload = Workload(size=10)
        workload.observe([job("a", "1")])
        workload.observe([job("b", "1")])  # a finished: no longer listed
        workload.observe([job("b", "1")])
        assert len(workload) == 2

    def test_size_is_checked(self) -> None:
        with pytest.raises(ValueError, match="workload size must be 1"):
            Workload(size=0)

    @pytest.mark.parametrize(("learned", "node"), [(True, "n2"), (False, "n1")])
    def test_the_learned_workload_steers_the_default_profile(
        self, learned: bool, node: str
    ) -> None:
        """n1's GPU has 0.7 free, n2's is idle. Best fit puts a half-GPU pod on n1; FGD that
        learned a workload of half-GPU pods puts it on n2, since on n1 it would leave 0.2 that
        no such pod can use. Without a learned workload FGD scores both alike: best fit."""
        workload = Workload()
        if learned:
            workload.observe([job(f"j{i}", "0.5") for i in range(10)])
            assert typical_pods(workload.pods())[0].gpu_milli == 500
        state = ClusterState(
            [NodeSpec("n1", 32_000, 256_000, 1, "A100"), NodeSpec("n2", 32_000, 256_000, 1, "A100")]
        )
        scheduler = Scheduler(state, "default", workload=workload.pods())
        only_n1 = np.array([True, False])
        held = scheduler.schedule(PodRequest("held", 2000, 1000, 1, 300), allowed=only_n1)
        assert isinstance(held, Placement) and held.node == "n1"
        placed = scheduler.schedule(PodRequest("p", 2000, 1000, 1, 500))
        assert isinstance(placed, Placement) and placed.node == node


class TestPoolProfiles:
    def test_parse(self) -> None:
        assert parse_pool_profiles("gpu-a=fgd, cpu=bestfit,") == {"gpu-a": "fgd", "cpu": "bestfit"}
        with pytest.raises(ValueError, match="'cpu': write POOL=PROFILE"):
            parse_pool_profiles("gpu-a=fgd,cpu")
        with pytest.raises(ValueError, match="pool 'a' is named twice"):
            parse_pool_profiles("a=fgd,a=bestfit")

    def test_an_unknown_profile_is_refused_at_start(self) -> None:
        with pytest.raises(ValueError, match="pool 'gpu-a': unknown policy 'fgdd'"):
            Settings(**env_overrides({"AIPAAS_POOL_PROFILES": "cpu=bestfit,gpu-a=fgdd"}))

    def test_setting_from_the_environment(self) -> None:
        settings = Settings(**env_overrides({"AIPAAS_POOL_PROFILES": "gpu-a=fgd,cpu=bestfit"}))
        assert settings.pool_profiles == {"gpu-a": "fgd", "cpu": "bestfit"}
        # the multi-process server passes settings on as JSON
        assert Settings.model_validate_json(settings.model_dump_json()) == settings

    def test_pool_of_a_node_and_its_policy(self) -> None:
        assert pool_of({POOL_LABEL: "gpu-a"}) == "gpu-a"
        assert pool_of({}) == ""
        assert pool_policies(["gpu-a", "", "other"], {"gpu-a": "fgd"}, "default") == {
            "gpu-a": "fgd",
            "": "default",
            "other": "default",
        }
