"""``simulate run`` wakes when a toleration of a NoExecute taint runs out: with no other event,
the task is evicted at that instant (tolerationSeconds after the taint appeared)."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.sim.scenario import validate_document
from aipaas.sim.scenario_build import build_scenario
from aipaas.sim.scenario_run import run_scenario

TOLERATES_100 = [
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 100}
]


def document() -> dict[str, Any]:
    """Node a's NoExecute taint appeared at 50; s runs there since 0 and tolerates it 100 s: it
    must go at 150. Its duration (10,000 s) and the start at 0 give no other event before."""
    task = {"name": "w", "replicas": 1, "command": ["x"], "resources": {"gpu": 1}}
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "spec": {
            "now": 0,
            "nodes": [
                {
                    "name": "a",
                    "gpu": 1,
                    "taints": [{"key": "maintenance", "effect": "NoExecute", "timeAdded": 50}],
                }
            ],
            "objects": [
                {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}},
                {
                    "apiVersion": "aipaas/v1",
                    "kind": "Queue",
                    "metadata": {"name": "q", "tenant": "t"},
                },
                {
                    "apiVersion": "aipaas/v1",
                    "kind": "Job",
                    "metadata": {"name": "s", "tenant": "t"},
                    "spec": {"queue": "q", "tolerations": TOLERATES_100, "tasks": [task]},
                },
            ],
            "running": [{"job": "t/s", "since": 0, "nodes": {"w-0": "a"}}],
            "durations": [{"job": "t/s", "seconds": 10_000}],
        },
    }


@pytest.mark.parametrize(
    ("until", "want_evictions"),
    [
        pytest.param(149, 0, id="within its 100 s it stays"),
        pytest.param(151, 1, id="at 150 it is evicted, with no other event to wake the run"),
    ],
)
def test_the_run_evicts_when_the_toleration_runs_out(until: float, want_evictions: int) -> None:
    scenario = build_scenario(validate_document(document()), honour_arrivals=True)
    output = run_scenario(scenario, until)
    assert output["jobs"]["t/s"]["evictions"] == want_evictions
