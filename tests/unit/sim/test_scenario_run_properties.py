"""Properties of the virtual clock (`simulate run`) over random job streams (hypothesis): with
one queue and equal priorities nothing is evicted, so every job that fits runs once, for its
duration, never before it arrives; the node is never over-committed; and the queue's
GPU-seconds are the sum of the jobs' GPUs x durations."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.sim.scenario import validate_document
from aipaas.sim.scenario_build import build_scenario
from aipaas.sim.scenario_run import run_scenario

NODE_GPUS = 4
jobs_strategy = st.lists(
    st.tuples(
        st.integers(1, NODE_GPUS),  # GPUs
        st.integers(1, 50),  # duration
        st.one_of(st.none(), st.integers(0, 100)),  # arrival (None: pending at now)
    ),
    min_size=1,
    max_size=12,
)


def document(jobs: list[tuple[int, int, int | None]]) -> dict[str, Any]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}},
        {"apiVersion": "aipaas/v1", "kind": "Queue", "metadata": {"name": "q", "tenant": "t"}},
    ]
    arrivals, durations = [], []
    for i, (gpus, duration, arrival) in enumerate(jobs):
        objects.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Job",
                "metadata": {"name": f"j{i}", "tenant": "t"},
                "spec": {
                    "queue": "q",
                    "tasks": [{"name": "w", "command": ["x"], "resources": {"gpu": gpus}}],
                },
            }
        )
        durations.append({"job": f"t/j{i}", "seconds": duration})
        if arrival is not None:
            arrivals.append({"job": f"t/j{i}", "at": arrival})
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "spec": {
            "nodes": [{"name": "n1", "gpu": NODE_GPUS}],
            "objects": objects,
            "arrivals": arrivals,
            "durations": durations,
        },
    }


@settings(max_examples=40, deadline=None)
@given(jobs_strategy)
def test_every_job_runs_once_for_its_duration(jobs: list[tuple[int, int, int | None]]) -> None:
    scenario = build_scenario(validate_document(document(jobs)), honour_arrivals=True)
    out = run_scenario(scenario)
    spans = []
    for i, (gpus, duration, arrival) in enumerate(jobs):
        job = out["jobs"][f"t/j{i}"]
        assert job["phase"] == "Succeeded", job
        assert job["evictions"] == 0
        assert job["finished"] == job["started"] + duration
        if arrival is not None:
            assert job["submitted"] == arrival
        assert job["started"] >= max(job["submitted"], 0)
        spans.append((job["started"], job["finished"], gpus))
    for start, _, _ in spans:  # at every start, what runs fits the node
        assert sum(g for s, f, g in spans if s <= start < f) <= NODE_GPUS
    expected = sum(gpus * duration for gpus, duration, _ in jobs)
    assert abs(out["queues"]["t/q"]["gpu_seconds"] - expected) < 1e-6
    assert out["end"] == max(f for _, f, _ in spans)


@settings(max_examples=20, deadline=None)
@given(jobs_strategy, st.integers(0, 120))
def test_until_counts_only_what_ran_before_it(
    jobs: list[tuple[int, int, int | None]], until: int
) -> None:
    full = run_scenario(build_scenario(validate_document(document(jobs)), honour_arrivals=True))
    cut = run_scenario(
        build_scenario(validate_document(document(jobs)), honour_arrivals=True), until
    )
    assert cut["end"] == max(until, 0)
    used = 0.0
    for key, job in full["jobs"].items():
        gpus = jobs[int(key.removeprefix("t/j"))][0]
        if job["started"] < until:
            used += gpus * (min(job["finished"], until) - job["started"])
        short = cut["jobs"][key]
        if job["finished"] <= until:
            assert short == job
        elif job["started"] <= until:
            assert (short["phase"], short["finished"]) == ("Running", None)
    assert abs(cut["queues"]["t/q"]["gpu_seconds"] - used) < 1e-6
