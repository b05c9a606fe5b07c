# ruff: noqa: E501  (a table reads better with one case per line)
"""Node selectors, node affinity, taints and tolerations in the Scheduler (the path both the
live controller and ``aipaas simulate`` take), case by case after kube-scheduler's NodeAffinity
and TaintToleration plugins. Expected nodes worked out by hand.

Nodes (CPU-only pods; every node as empty, so the profile alone would take the first):

    a: zone z1, gen 3                  b: zone z2, gen 5, taint gpu=broken:NoSchedule
    c: zone z2, taint maint:PreferNoSchedule    d: zone z3, taint evict:NoExecute
"""

from __future__ import annotations

import pytest

from aipaas.api.job import JobSpec
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.from_api import node_constraints
from aipaas.scheduler.batch.model import Node
from aipaas.scheduler.framework.constraints import parse_taints
from aipaas.scheduler.framework.types import (
    NodeConstraints,
    PodRequest,
    Taint,
    Toleration,
    Unschedulable,
)

NODES = [
    Node("a", 0, 8000, 16_384, labels={"zone": "z1", "gen": "3"}),
    Node(
        "b",
        0,
        8000,
        16_384,
        labels={"zone": "z2", "gen": "5"},
        taints=(Taint("gpu", "broken", "NoSchedule"),),
    ),
    Node(
        "c",
        0,
        8000,
        16_384,
        labels={"zone": "z2"},
        taints=(Taint("maint", "", "PreferNoSchedule"),),
    ),
    Node("d", 0, 8000, 16_384, labels={"zone": "z3"}, taints=(Taint("evict", "", "NoExecute"),)),
]
SELECTOR_REASON = "node(s) didn't match the pod's node selector or affinity"


def spec(**fields: object) -> NodeConstraints | None:
    """The constraints of a job spec written as the API takes it."""
    body = {"tasks": [{"name": "w", "command": ["x"]}], **fields}
    return node_constraints(JobSpec.model_validate(body))


# (upstream case, constraints, want node | want reason in the diagnosis)
CASES = [
    pytest.param("TaintToleration: untolerated NoSchedule and NoExecute", None, "a", id="no constraints: off b and d, a before the PreferNoSchedule c"),
    pytest.param("NodeAffinity: nodeSelector", spec(nodeSelector={"zone": "z2"}), "c", id="selector z2: b is tainted, c is left"),
    pytest.param("TaintToleration: tolerated NoSchedule", spec(nodeSelector={"zone": "z2"}, tolerations=[{"key": "gpu", "operator": "Equal", "value": "broken", "effect": "NoSchedule"}]), "b", id="tolerating b's taint: b before the PreferNoSchedule c"),
    pytest.param("TaintToleration: toleration of another value", spec(nodeSelector={"zone": "z2"}, tolerations=[{"key": "gpu", "operator": "Equal", "value": "fine"}]), "c", id="a toleration of another value does not tolerate"),
    pytest.param("TaintToleration: Exists without key tolerates everything", spec(nodeSelector={"zone": "z2"}, tolerations=[{"operator": "Exists"}]), "b", id="Exists without key: b and c alike, the first"),
    pytest.param("TaintToleration: untolerated NoExecute", spec(nodeSelector={"zone": "z3"}), "node(s) had untolerated taint {evict: }", id="selector z3: d's NoExecute keeps it off"),
    pytest.param("TaintToleration: tolerated NoExecute", spec(nodeSelector={"zone": "z3"}, tolerations=[{"key": "evict", "operator": "Exists", "effect": "NoExecute"}]), "d", id="tolerating NoExecute by key"),
    pytest.param("TaintToleration: effect must match", spec(nodeSelector={"zone": "z3"}, tolerations=[{"key": "evict", "operator": "Exists", "effect": "NoSchedule"}]), "node(s) had untolerated taint {evict: }", id="a NoSchedule toleration does not tolerate NoExecute"),
    pytest.param("NodeAffinity: nodeSelector matches no node", spec(nodeSelector={"zone": "z9"}), SELECTOR_REASON, id="selector no node has"),
    pytest.param("NodeAffinity: In", spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}]}}}), "a", id="zone In z1, z2: a (b tainted, c PreferNoSchedule)"),
    pytest.param("NodeAffinity: NotIn", spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}]}}}), "c", id="zone NotIn z1: c is the only untainted"),
    pytest.param("NodeAffinity: DoesNotExist", spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "DoesNotExist"}]}]}}}), "c", id="gen DoesNotExist: c (d tainted)"),
    pytest.param("NodeAffinity: Gt", spec(nodeSelector={"zone": "z1"}, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]}}}), SELECTOR_REASON, id="zone z1 and gen > 4: no node"),
    pytest.param("NodeAffinity: Lt", spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]}]}}}), "a", id="gen < 4: a"),
    pytest.param("NodeAffinity: terms are ORed", spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z9"]}]}, {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}]}}}), "c", id="two terms, the second matches z2: c"),
    pytest.param("NodeAffinity: matchFields metadata.name", spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]}}}), "c", id="the node named c"),
    pytest.param("NodeAffinity: preferred weight", spec(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}}]}}), "c", id="preferring z2 outweighs c's PreferNoSchedule"),
    pytest.param("NodeAffinity: the heaviest preferred term", spec(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}}, {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}}]}}), "c", id="weights 5 (a) and 10 (c): c"),
    pytest.param("TaintToleration: tolerated PreferNoSchedule", spec(nodeSelector={"zone": "z2"}, tolerations=[{"key": "maint", "operator": "Exists"}]), "c", id="tolerating c's PreferNoSchedule: b is still NoSchedule"),
    pytest.param("TaintToleration: every node refused", NodeConstraints(selector=(("zone", "z3"),), tolerations=(Toleration("gpu", "Exists", "", ""),)), "node(s) had untolerated taint {evict: }", id="a toleration of another key"),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "constraints", "want"), CASES)
def test_node_constraints(upstream: str, constraints: NodeConstraints | None, want: str) -> None:
    assert upstream
    engine = SnapshotCluster(NODES)
    pod = PodRequest("t/j/w-0", 1000, 1024, constraints=constraints)
    placed = engine.place([pod])
    if len(want) == 1:
        assert not isinstance(placed, Unschedulable), placed
        assert [p.node for p in placed] == [want]
    else:
        assert isinstance(placed, Unschedulable)
        assert any(want in reason for reason in placed.reasons), placed.reasons


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 20


def test_a_job_without_constraints_has_none() -> None:
    assert spec() is None


def test_taints_from_a_backend_annotation() -> None:
    assert parse_taints("gpu=broken:NoSchedule, maint:PreferNoSchedule,bad:Evict,") == (
        Taint("gpu", "broken", "NoSchedule"),
        Taint("maint", "", "PreferNoSchedule"),
    )


def test_a_bad_toleration_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"tolerations\.0") as caught:
        JobSpec.model_validate(
            {"tasks": [{"name": "w", "command": ["x"]}], "tolerations": [{"value": "x"}]}
        )
    assert "without key must have operator Exists" in str(caught.value)
