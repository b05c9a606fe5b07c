"""Replaying the openb sample under every policy, and a tiny replay worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aipaas.sim.replay as replay_module
from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.profile import builtin_profile_names
from aipaas.scheduler.framework.types import PodRequest
from aipaas.sim.arrivals import paper_arrivals
from aipaas.sim.experiment import OpenbRun, run_openb
from aipaas.sim.openb import load_nodes, load_pods
from aipaas.sim.replay import ReplayResult, replay
from aipaas.sim.report import allocation_curve

SAMPLE = Path(__file__).parents[2] / "data" / "openb"
NODES_CSV = str(SAMPLE / "openb_node_list_sample.csv")
PODS_CSV = str(SAMPLE / "openb_pod_list_sample.csv")
POLICIES = builtin_profile_names()
JSON_KEYS = {
    "policy",
    "seed",
    "tune",
    "total_gpus",
    "pods_arrived",
    "pods_scheduled",
    "pods_failed",
    "curve",
    "elapsed_s",
    "allocation_ratio",
    "fragmentation_pct",
    "failed_pods",
}


class Captured:
    """The per-arrival samples replay hands to allocation_curve."""

    arrived: np.ndarray
    allocated: np.ndarray


def run_capturing(policy: str, seed: int = 42) -> tuple[ReplayResult, Captured]:
    captured = Captured()

    def capture(arrived: np.ndarray, allocated: np.ndarray, total_gpus: int) -> Any:
        captured.arrived, captured.allocated = arrived.copy(), allocated.copy()
        return allocation_curve(arrived, allocated, total_gpus)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay_module, "allocation_curve", capture)
        return run_openb(OpenbRun(NODES_CSV, PODS_CSV, policy, seed, 1.3)), captured


_RUNS: dict[str, tuple[ReplayResult, Captured]] = {}


def sample_run(policy: str) -> tuple[ReplayResult, Captured]:
    """Seed 42 on the sample, once per policy for the whole module."""
    if policy not in _RUNS:
        _RUNS[policy] = run_capturing(policy)
    return _RUNS[policy]


@pytest.fixture(scope="module")
def arrivals() -> list[PodRequest]:
    nodes = load_nodes(NODES_CSV)
    return paper_arrivals(load_pods(PODS_CSV, nodes), 770_000, 42, 1.3)


@pytest.mark.parametrize("policy", POLICIES)
def test_sample_replay(policy: str, arrivals: list[PodRequest]) -> None:
    result, samples = sample_run(policy)
    data = result.to_json()
    assert set(data) == JSON_KEYS
    assert (data["policy"], data["seed"], data["tune"]) == (policy, 42, 1.3)
    assert data["total_gpus"] == 770
    assert data["pods_arrived"] == len(arrivals) == 1337
    assert data["pods_scheduled"] + data["pods_failed"] == data["pods_arrived"]
    assert data["pods_failed"] == len(data["failed_pods"]) > 0
    assert set(data["failed_pods"]) <= {p.name for p in arrivals}
    assert isinstance(data["elapsed_s"], float) and data["elapsed_s"] >= 0

    # One sample per arrival: arrived grows by every pod's GPU request, allocated by the
    # requests of the pods that were placed, and never exceeds what arrived.
    totals = np.array([p.gpu_milli_total for p in arrivals])
    np.testing.assert_array_equal(samples.arrived, np.cumsum(totals))
    placed = np.array([p.name not in set(data["failed_pods"]) for p in arrivals])
    np.testing.assert_array_equal(samples.allocated, np.cumsum(np.where(placed, totals, 0)))
    assert (samples.allocated <= samples.arrived).all()
    assert samples.allocated[-1] <= 770_000
    assert data["allocation_ratio"]["milli_gpu_pct"] == round(samples.allocated[-1] / 7700, 2)

    curve = data["curve"]
    xs = [p["arrived_pct"] for p in curve]
    ys = [p["gpu_alloc_pct"] for p in curve]
    assert xs == sorted(set(xs)) and xs[0] == 0 and xs[-1] == 130
    assert ys == sorted(ys)  # allocation never falls as more arrives
    # A column holds samples rounded to it (arrived < x + 0.5) or, when empty, within one
    # on either side (< x + 1.5); each sample's allocation is at most its arrival.
    assert all(y <= x + 1.5 + 0.01 for x, y in zip(xs, ys, strict=True))
    # Below 50% arrived every policy has placed nearly everything.
    assert all(y >= x - 1.5 for x, y in zip(xs, ys, strict=True) if x <= 50)


@pytest.mark.parametrize("policy", POLICIES)
def test_same_seed_same_curve(policy: str) -> None:
    first = sample_run(policy)[0]
    second = run_openb(OpenbRun(NODES_CSV, PODS_CSV, policy, 42, 1.3))
    assert first.curve == second.curve
    assert first.failed_pods == second.failed_pods
    assert first.fragmentation_pct == second.fragmentation_pct


def test_other_seed_other_curve() -> None:
    a = sample_run("random")[0]
    b = run_openb(OpenbRun(NODES_CSV, PODS_CSV, "random", 43, 1.3))
    assert a.curve != b.curve


def test_tiny_replay_by_hand() -> None:
    nodes = [NodeSpec("n", 4_000, 4_000, 1, "T4")]
    a = PodRequest("a", 1_000, 1_000, 1, 600)
    b = PodRequest("b", 1_000, 0, 1, 600)  # no GPU with 600 free after a
    c = PodRequest("c", 2_000, 500)  # CPU-only
    result = replay(nodes, [a, b, c], [a, b, c], "bestfit", seed=1, tune=1.0)
    assert (result.pods_arrived, result.pods_scheduled, result.pods_failed) == (3, 2, 1)
    assert result.failed_pods == ["b"]
    # Samples: arrived 600, 1,200, 1,200 milli (60, 120, 120 %); allocated 600 each time.
    assert result.curve == [
        {"arrived_pct": x, "gpu_alloc_pct": 60.0} for x in (59, 60, 61, 119, 120, 121)
    ]
    assert result.allocation == {
        "milli_cpu_pct": 75.0,  # 3,000 of 4,000
        "memory_pct": 37.5,  # 1,500 of 4,000
        "gpu_pct": 100.0,  # the one GPU is in use
        "milli_gpu_pct": 60.0,
    }
    # Typical pods: (1 core, 600m) p = 2/3 and CPU-only p = 1/3. The 400m left fits
    # neither (too small / CPU-only): all idle GPU is fragment.
    assert result.to_json()["fragmentation_pct"] == 100.0
    assert result.total_gpus == 1
