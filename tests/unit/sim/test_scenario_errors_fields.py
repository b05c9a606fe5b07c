"""More bad scenarios (beyond test_scenario_errors.py): each malformed field of a scenario file
makes `aipaas simulate cycle` and `simulate run` exit 2 with nothing on stdout and an error on
stderr naming the field's path and what is wrong with it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.sim.test_scenario_errors import OBJ, S, _set, base, edit, invoke, squeeze


def _append(path: list[Any], value: Any) -> Any:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path:
            target = target[key]
        target.append(copy.deepcopy(value))

    return apply


def _pop(path: list[Any]) -> Any:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target.pop(path[-1])

    return apply


def _job_twice(data: dict[str, Any]) -> None:
    data[S][OBJ].append(copy.deepcopy(data[S][OBJ][2]))


def _running_twice(data: dict[str, Any]) -> None:
    data[S]["running"].append(copy.deepcopy(data[S]["running"][0]))


#: (test id, change to the valid base scenario, words the error must hold, spaces ignored)
BAD: list[tuple[str, Any, str]] = [
    ("now negative", _set([S, "now"], -5), "spec.now: Input should be greater than or equal to 0"),
    ("now not a time", _set([S, "now"], "soon"), "spec.now: must be a number of seconds"),
    ("apiVersion", _set(["apiVersion"], "v9"), "apiVersion: Input should be 'aipaas/v1'"),
    ("spec missing", _pop(["spec"]), "spec: required field is missing"),
    ("spec field typo", _set([S, "arrival"], []), "spec.arrival: unknown field"),
    ("nodes empty", _set([S, "nodes"], []), "spec.nodes: List should have at least 1 item"),
    ("node name missing", _pop([S, "nodes", 0, "name"]), "spec.nodes[0].name: required field"),
    ("node name", _set([S, "nodes", 0, "name"], "N 1"), "spec.nodes[0].name: 'N 1' is not a valid"),
    ("node gpu negative", _set([S, "nodes", 0, "gpu"], -1), "spec.nodes[0].gpu: Input should be"),
    ("node cpu negative", _set([S, "nodes", 0, "cpu"], -4), "spec.nodes[0].cpu: cpu must be"),
    (
        "node taint effect",
        _set([S, "nodes", 0, "taints"], [{"key": "k", "effect": "Evict"}]),
        "spec.nodes[0].taints[0].effect: Input should be 'NoSchedule'",
    ),
    (
        "node gpu split zero",
        _set([S, "nodes", 0, "gpuSplit"], 0),
        "spec.nodes[0].gpuSplit: Input should be greater than or equal to 1",
    ),
    (
        "job toleration without key",
        _set([S, OBJ, 2, "spec", "tolerations"], [{"value": "x"}]),
        "spec.objects[2].spec.tolerations[0]: a toleration without key must have operator Exists",
    ),
    ("node labels", _set([S, "nodes", 0, "labels"], ["a"]), "spec.nodes[0].labels"),
    ("objects not a list", _set([S, OBJ], {"a": 1}), "spec.objects: Input should be a valid list"),
    ("job twice", _job_twice, "spec.objects[4].metadata.name: job t/a1 is given twice"),
    (
        "minAvailable above replicas",
        _set([S, OBJ, 2, S, "minAvailable"], 5),
        "spec.objects[2].spec: minAvailable: 5 is more than the 2 replicas",
    ),
    (
        "task gpu negative",
        _set([S, OBJ, 2, S, "tasks", 0, "resources"], {"gpu": -1}),
        "spec.objects[2].spec.tasks[0].resources.gpu.count",
    ),
    (
        "topology both levels",
        _set([S, OBJ, 2, S, "topology"], {"required": "rack", "preferred": "rack"}),
        "spec.objects[2].spec.topology: exactly one of required or preferred",
    ),
    (
        "guaranteed above quota",
        _set([S, OBJ, 1, S], {"guaranteed": {"gpu": 4}, "quota": {"gpu": 2}}),
        "spec.objects[1].spec.guaranteed.gpu: 4 is more than the quota of 2",
    ),
    ("weight negative", _set([S, OBJ, 1, S], {"weight": -1}), "spec.objects[1].spec.weight"),
    (
        "minRuntime",
        _set([S, OBJ, 1, S], {"minRuntime": "soon"}),
        "spec.objects[1].spec.minRuntime: must be a duration",
    ),
    (
        "reservations negative",
        _set([S, OBJ, 1, S], {"reservations": -1}),
        "spec.objects[1].spec.reservations",
    ),
    (
        "usage half-life",
        _set([S, OBJ, 1, S], {"fairSharing": {"usageHalfLife": "x"}}),
        "spec.objects[1].spec.fairSharing.usageHalfLife: must be a duration",
    ),
    ("running twice", _running_twice, "spec.running[1].job: job t/a1 is listed twice"),
    ("running job missing", _pop([S, "running", 0, "job"]), "spec.running[0].job: required"),
    ("running nodes empty", _set([S, "running", 0, "nodes"], {}), "spec.running[0].nodes"),
    (
        "running over the node",
        _set([S, "nodes", 0, "gpu"], 1),
        "spec.running[0].nodes.w-1: node n1 is over-committed by t/a1/w-1",
    ),
    ("arrival of no job", _set([S, "arrivals", 0, "job"], "t/zz"), "spec.arrivals[0].job: no job"),
    (
        "arrival twice",
        _append([S, "arrivals"], {"job": "t/b1", "at": 300}),
        "spec.arrivals[1].job: job t/b1 is listed twice",
    ),
    ("duration of no job", _set([S, "durations", 0, "job"], "t/zz"), "spec.durations[0].job: no"),
    ("duration negative", _set([S, "durations", 0, "seconds"], -1), "spec.durations[0].seconds"),
    ("duration zero", _set([S, "durations", 0, "seconds"], 0), "spec.durations[0].seconds"),
]


@pytest.mark.parametrize(
    ("change", "words"), [(c, w) for _, c, w in BAD], ids=[n for n, _, _ in BAD]
)
@pytest.mark.parametrize("command", ["cycle", "run"])
def test_bad_field_is_named(tmp_path: Path, change: Any, words: str, command: str) -> None:
    code, stdout, stderr = invoke(tmp_path, edit(change), command)
    assert (code, stdout) == (2, "")
    assert squeeze(words) in stderr, stderr


def test_base_scenario_is_good(tmp_path: Path) -> None:
    """The changes above are what break it: the base itself runs."""
    code, stdout, _ = invoke(tmp_path, yaml.safe_dump(base()), "cycle", "-o", "json")
    assert code == 0
    assert '"t/a1"' in stdout


def test_until_negative_is_refused(tmp_path: Path) -> None:
    code, stdout, stderr = invoke(tmp_path, yaml.safe_dump(base()), "run", "--until", "-5")
    assert (code, stdout) == (2, "")
    assert "--until" in stderr
