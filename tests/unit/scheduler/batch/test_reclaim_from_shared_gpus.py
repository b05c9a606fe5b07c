"""Reclaim from shared GPUs (batch/actions/slivers.py), through ``aipaas simulate cycle``.

The base case, worked out by hand: nodes n1 and n2 of one GPU each (16 CPUs). Tenant ta runs
a-low (0.25 GPU, priority 0, preemptible) on n1; tenant tb runs b-low (0.25 GPU, priority 0,
preemptible) on n1 beside it and b-svc (0.5 GPU, priority 1000, not preemptible) on n2. So
0.5 of each GPU is idle: 1 GPU of slivers. ta's a-high (1 whole GPU, priority 1000) waits.
Demand: ta 1.25 GPUs, tb 0.75, on 2 GPUs: the fair shares are the demands, so tb holds its
share (0.75 of 0.75), not more: reclaim has no victim. Preempt takes only from ta's own queue:
a-low alone leaves b-low on n1's GPU, still not whole. The sliver rule: ta holds 0.25 + 1 =
1.25 after the start, at its share; b-low (priority 0 < 1000, preemptible, a share of a GPU)
may go with a-low: n1's GPU is whole again and a-high starts there. Both go (neither alone
frees the GPU).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aipaas.cli.app import app

BASE: dict[str, Any] = yaml.safe_load(
    """
apiVersion: aipaas/v1
kind: Scenario
metadata: {name: sliver}
spec:
  now: 600
  nodes: [{name: n1, gpu: 1, cpu: 16, memory: 64Gi}, {name: n2, gpu: 1, cpu: 16, memory: 64Gi}]
  objects:
    - {apiVersion: aipaas/v1, kind: Tenant, metadata: {name: ta}}
    - {apiVersion: aipaas/v1, kind: Tenant, metadata: {name: tb}}
    - {apiVersion: aipaas/v1, kind: Queue, metadata: {name: q, tenant: ta}}
    - {apiVersion: aipaas/v1, kind: Queue, metadata: {name: q, tenant: tb}}
    - {apiVersion: aipaas/v1, kind: Job, metadata: {name: a-low, tenant: ta},
       spec: {queue: q, priority: 0, preemptible: true,
              tasks: [{name: w, command: [x], resources: {gpu: 0.25, cpu: 1}}]}}
    - {apiVersion: aipaas/v1, kind: Job, metadata: {name: b-low, tenant: tb},
       spec: {queue: q, priority: 0, preemptible: true,
              tasks: [{name: w, command: [x], resources: {gpu: 0.25, cpu: 1}}]}}
    - {apiVersion: aipaas/v1, kind: Job, metadata: {name: b-svc, tenant: tb},
       spec: {queue: q, priority: 1000, preemptible: false,
              tasks: [{name: w, command: [x], resources: {gpu: 0.5, cpu: 1}}]}}
    - {apiVersion: aipaas/v1, kind: Job, metadata: {name: a-high, tenant: ta},
       spec: {queue: q, priority: 1000, preemptible: false,
              tasks: [{name: w, command: [x], resources: {gpu: 1, cpu: 1}}]}}
  running:
    - {job: ta/a-low, since: 0, nodes: {w-0: n1}}
    - {job: tb/b-low, since: 0, nodes: {w-0: n1}}
    - {job: tb/b-svc, since: 0, nodes: {w-0: n2}}
"""
)

runner = CliRunner()


def cycle(document: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["simulate", "cycle", "-f", str(path), "-o", "json"])
    assert result.exit_code == 0, result.stdout
    output: dict[str, Any] = json.loads(result.stdout)
    return output


def job_spec(document: dict[str, Any], name: str) -> dict[str, Any]:
    for obj in document["spec"]["objects"]:
        if obj["kind"] == "Job" and obj["metadata"]["name"] == name:
            spec: dict[str, Any] = obj["spec"]
            return spec
    raise KeyError(name)


def job(name: str, tenant: str, gpu: float, priority: int, preemptible: bool) -> dict[str, Any]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "metadata": {"name": name, "tenant": tenant},
        "spec": {
            "queue": "q",
            "priority": priority,
            "preemptible": preemptible,
            "tasks": [{"name": "w", "command": ["x"], "resources": {"gpu": gpu, "cpu": 1}}],
        },
    }


def test_sharers_of_other_queues_go_when_idle_slivers_strand_the_share(tmp_path: Path) -> None:
    out = cycle(BASE, tmp_path)
    assert sorted(out["evicted"]) == ["ta/a-low/w-0", "tb/b-low/w-0"]
    assert out["started"] == ["ta/a-high/w-0"]
    assert out["jobs"]["ta/a-high"]["nodes"] == {"w-0": "n1"}
    assert out["jobs"]["tb/b-svc"]["phase"] == "Running"
    victim = out["jobs"]["tb/b-low"]
    assert victim["eviction_reason"] == "Reclaimed"
    assert victim["evicted_by"] == "ta/a-high"
    assert "reclaimed from a shared GPU by ta/a-high (priority 1000 > 0)" in victim["reason"]
    assert "slivers of shared GPUs add up to 1 GPU" in victim["reason"]
    assert out["jobs"]["ta/a-low"]["eviction_reason"] == "Preempted"
    # ta ends at its share, tb below its own: neither is above, so reclaim cannot undo it.
    assert out["queues"]["ta"]["fair_share"]["gpu"] == pytest.approx(1.25)
    assert out["queues"]["ta"]["allocated"]["gpu"] == pytest.approx(1)


def test_no_victim_of_equal_priority(tmp_path: Path) -> None:
    document = copy.deepcopy(BASE)
    job_spec(document, "b-low")["priority"] = 1000  # as high as the job that waits
    out = cycle(document, tmp_path)
    assert out["evicted"] == []
    assert out["jobs"]["ta/a-high"]["phase"] == "Pending"


def test_a_whole_gpu_of_another_queue_at_its_share_is_not_taken(tmp_path: Path) -> None:
    """A third node whose whole GPU tb's low job holds; a-low runs as a high, non-preemptible
    job: the slivers (1 GPU) are there, tb holds its share (1.75 of 1.75) and the
    lower-priority job of another queue that could free a GPU holds it whole: reclaim's rule
    decides, nothing goes."""
    document = copy.deepcopy(BASE)
    spec = document["spec"]
    spec["nodes"].append({"name": "n3", "gpu": 1, "cpu": 16, "memory": "64Gi"})
    job_spec(document, "a-low").update(priority=1000, preemptible=False)
    job_spec(document, "b-low")["tasks"][0]["resources"]["gpu"] = 1
    spec["running"][1]["nodes"] = {"w-0": "n3"}
    # A sharer tb may lose beside b-svc on n2 (which it cannot empty): the slivers are 0.75
    # on n1 and 0.25 on n2.
    spec["objects"].append(job("b-tiny", "tb", 0.25, 0, True))
    spec["running"].append({"job": "tb/b-tiny", "since": 0, "nodes": {"w-0": "n2"}})
    out = cycle(document, tmp_path)
    assert out["evicted"] == []
    assert out["jobs"]["ta/a-high"]["phase"] == "Pending"


@pytest.mark.parametrize("tb_waits", [False, True])
def test_only_within_the_fair_share(tmp_path: Path, tb_waits: bool) -> None:
    """b-svc takes 0.25 of n2's GPU and ta's a-svc (0.25, priority 1000, not preemptible) the
    next 0.25: slivers 0.5 + 0.5 = 1 GPU. ta's demand 0.25 + 0.25 + 1 = 1.5, tb's 0.5: shares
    1.5 and 0.5, a-high takes ta to 1.25 (a-low gone): it starts. With tb's b-more waiting for
    a whole GPU (priority 0) tb's demand is 1.5: shares 1 and 1, and a-high would take ta to
    1.25 even with a-low gone: above its share, nothing goes."""
    document = copy.deepcopy(BASE)
    spec = document["spec"]
    job_spec(document, "b-svc")["tasks"][0]["resources"]["gpu"] = 0.25
    spec["objects"].append(job("a-svc", "ta", 0.25, 1000, False))
    spec["running"].append({"job": "ta/a-svc", "since": 0, "nodes": {"w-0": "n2"}})
    if tb_waits:
        spec["objects"].append(job("b-more", "tb", 1, 0, True))
    out = cycle(document, tmp_path)
    if tb_waits:
        assert out["queues"]["ta"]["fair_share"]["gpu"] == pytest.approx(1)
        assert out["evicted"] == []
        assert out["jobs"]["ta/a-high"]["phase"] == "Pending"
    else:
        assert out["queues"]["ta"]["fair_share"]["gpu"] == pytest.approx(1.5)
        assert sorted(out["evicted"]) == ["ta/a-low/w-0", "tb/b-low/w-0"]
        assert out["started"] == ["ta/a-high/w-0"]


def test_the_volcano_baseline_keeps_volcanos_rules(tmp_path: Path) -> None:
    document = copy.deepcopy(BASE)
    document["spec"]["profile"] = "volcano"
    out = cycle(document, tmp_path)
    assert out["evicted"] == []
    assert out["jobs"]["ta/a-high"]["phase"] == "Pending"
