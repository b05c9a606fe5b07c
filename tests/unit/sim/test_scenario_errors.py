"""Bad scenarios: `aipaas simulate cycle|run` names the field at fault on stderr, exits 2 and
prints nothing on stdout; good ones print JSON or tables."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aipaas.cli.app import app

runner = CliRunner()


def base() -> dict[str, Any]:
    """A valid scenario: tenant t, queue a, jobs t/a1 (running 2 x 1 GPU on n1) and t/b1."""
    job = {
        "apiVersion": "aipaas/v1",
        "kind": "Job",
        "spec": {
            "queue": "a",
            "tasks": [{"name": "w", "replicas": 2, "command": ["x"], "resources": {"gpu": 1}}],
        },
    }
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "metadata": {"name": "bad"},
        "spec": {
            "now": 100,
            "nodes": [{"name": "n1", "gpu": 2, "cpu": 16, "memory": "64Gi"}],
            "objects": [
                {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}},
                {
                    "apiVersion": "aipaas/v1",
                    "kind": "Queue",
                    "metadata": {"name": "a", "tenant": "t"},
                },
                {**copy.deepcopy(job), "metadata": {"name": "a1", "tenant": "t"}},
                {**copy.deepcopy(job), "metadata": {"name": "b1", "tenant": "t"}},
            ],
            "running": [{"job": "t/a1", "since": 0, "nodes": {"w-0": "n1", "w-1": "n1"}}],
            "arrivals": [{"job": "t/b1", "at": 200}],
            "durations": [{"job": "t/a1", "seconds": 100}, {"job": "t/b1", "seconds": "1m"}],
        },
    }


def invoke(tmp_path: Path, text: str, command: str = "cycle", *extra: str) -> tuple[int, str, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["simulate", command, "-f", str(path), *extra])
    return result.exit_code, result.stdout, "".join(result.stderr.split())


def squeeze(text: str) -> str:
    return "".join(text.split())


def edit(change: Any) -> str:
    data = base()
    change(data)
    return yaml.safe_dump(data)


def _set(path: list[Any], value: Any) -> Any:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


S, OBJ = "spec", "objects"
BAD: list[tuple[str, Any, str]] = [
    ("memory", _set([S, "nodes", 0, "memory"], "lots"), "spec.nodes[0].memory"),
    ("gpu not whole", _set([S, "nodes", 0, "gpu"], 1.5), "spec.nodes[0].gpu"),
    ("unknown field", _set(["spc"], {}), "spc: unknown field"),
    ("kind", _set(["kind"], "Job"), "kind"),
    ("nodes missing", lambda d: d[S].pop("nodes"), "spec.nodes: required field is missing"),
    ("node twice", lambda d: d[S]["nodes"].append({"name": "n1", "gpu": 1}), "spec.nodes[1].name"),
    (
        "replicas",
        _set([S, OBJ, 2, S, "tasks", 0, "replicas"], 0),
        "spec.objects[2].spec.tasks[0].replicas",
    ),
    (
        "queue missing",
        _set([S, OBJ, 3, S, "queue"], "nope"),
        "spec.objects[3].spec.queue: queue t/nope",
    ),
    (
        "tenant missing",
        _set([S, OBJ, 1, "metadata", "tenant"], "x"),
        "spec.objects[1].metadata.tenant: tenant x",
    ),
    (
        "node kind",
        _set(
            [S, OBJ, 0],
            {
                "apiVersion": "aipaas/v1",
                "kind": "Node",
                "metadata": {"name": "n"},
                "spec": {"backend": "sim", "cpu": "1", "memory": "1Gi"},
            },
        ),
        "spec.objects[0].kind",
    ),
    (
        "parent missing",
        _set([S, OBJ, 1, S], {"parent": "p"}),
        "spec.objects[1].spec.parent: queue t/p",
    ),
    (
        "priority class",
        _set([S, OBJ, 3, S, "priorityClassName"], "gold"),
        "spec.objects[3].spec.priorityClassName",
    ),
    ("priority name", _set([S, OBJ, 3, S, "priority"], "gold"), "spec.objects[3].spec.priority"),
    ("time limit", _set([S, OBJ, 3, S, "timeLimit"], "soon"), "spec.objects[3].spec.timeLimit"),
    ("running job", _set([S, "running", 0, "job"], "t/zz"), "spec.running[0].job: no job t/zz"),
    (
        "running task",
        _set([S, "running", 0, "nodes"], {"w-9": "n1"}),
        "spec.running[0].nodes.w-9: job t/a1 has no task w-9",
    ),
    (
        "running node",
        _set([S, "running", 0, "nodes"], {"w-0": "n9"}),
        "spec.running[0].nodes.w-0: no node n9",
    ),
    ("since", _set([S, "running", 0, "since"], 500), "spec.running[0].since"),
    (
        "extended resource (a DRA claim, not simulated)",
        _set([S, OBJ, 3, S, "tasks", 0, "resources"], {"example.com/fpga": 1}),
        "spec.objects[3].spec.tasks[0].resources[example.com/fpga]: extended resources are "
        "served by DRA claims, which are not simulated",
    ),
    (
        "over-committed",
        lambda d: (
            d[S]["running"].append({"job": "t/b1", "nodes": {"w-0": "n1"}}),
            d[S].pop("arrivals"),
        ),
        "spec.running[1].nodes.w-0: node n1 is over-committed by t/b1/w-0",
    ),
    (
        "arrival of running",
        _set([S, "arrivals", 0, "job"], "t/a1"),
        "spec.arrivals[0].job: job t/a1 runs",
    ),
    ("arrival time", _set([S, "arrivals", 0, "at"], -5), "spec.arrivals[0].at"),
    ("duration", _set([S, "durations", 0, "seconds"], "soon"), "spec.durations[0].seconds"),
    (
        "duration twice",
        _set([S, "durations", 1, "job"], "t/a1"),
        "spec.durations[1].job: job t/a1 is listed twice",
    ),
    ("profile", _set([S, "profile"], "no-such-profile"), "spec.profile: unknown policy"),
]


@pytest.mark.parametrize(
    ("change", "field"), [(c, f) for _, c, f in BAD], ids=[n for n, _, _ in BAD]
)
@pytest.mark.parametrize("command", ["cycle", "run"])
def test_bad_field_is_named(tmp_path: Path, change: Any, field: str, command: str) -> None:
    code, stdout, stderr = invoke(tmp_path, edit(change), command)
    assert code == 2
    assert stdout == ""
    assert squeeze(field) in stderr


def test_cycle_of_parents(tmp_path: Path) -> None:
    def cycle(data: dict[str, Any]) -> None:
        objects = data[S][OBJ]
        objects[1][S] = {"parent": "b"}
        objects.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Queue",
                "metadata": {"name": "b", "tenant": "t"},
                "spec": {"parent": "a"},
            }
        )

    code, stdout, stderr = invoke(tmp_path, edit(cycle))
    assert (code, stdout) == (2, "")
    assert squeeze("spec.objects[1].spec.parent: queue t/a is its own ancestor") in stderr


def test_jobs_only_in_leaves(tmp_path: Path) -> None:
    child = {
        "apiVersion": "aipaas/v1",
        "kind": "Queue",
        "metadata": {"name": "c", "tenant": "t"},
        "spec": {"parent": "a"},
    }
    code, _, stderr = invoke(tmp_path, edit(lambda d: d[S][OBJ].append(child)))
    assert code == 2
    assert squeeze("spec.objects[2].spec.queue: queue t/a has sub-queues") in stderr


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("spec: [unclosed", "notvalidYAML"),
        ("kind: Scenario\n---\nkind: Scenario\n", "onedocument"),
        ("- a list", "mustbeamapping"),
    ],
)
def test_unreadable_documents(tmp_path: Path, text: str, words: str) -> None:
    code, stdout, stderr = invoke(tmp_path, text)
    assert (code, stdout) == (2, "")
    assert words in stderr


def test_missing_file_and_bad_output(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "cycle", "-f", str(tmp_path / "none.yaml")])
    assert (result.exit_code, result.stdout) == (2, "")
    assert "cannotread" in squeeze(result.stderr)
    code, stdout, stderr = invoke(tmp_path, yaml.safe_dump(base()), "cycle", "-o", "xml")
    assert (code, stdout) == (2, "")
    assert "--output" in stderr


def test_good_scenario_json_and_table(tmp_path: Path) -> None:
    text = yaml.safe_dump(base())
    code, stdout, _ = invoke(tmp_path, text, "cycle", "-o", "json")
    assert code == 0
    cycle = json.loads(stdout)
    assert cycle["jobs"]["t/a1"]["nodes"] == {"w-0": "n1", "w-1": "n1"}
    assert set(cycle["queues"]) == {"t", "t/a"}
    assert cycle["queues"]["t/a"]["allocated"]["gpu"] == 2
    code, stdout, _ = invoke(tmp_path, text, "run", "-o", "json")
    assert code == 0
    run = json.loads(stdout)
    # a1 ends at 0 + 100 = 100 (the run starts at now = 100); b1 arrives at 200, runs 60 s;
    # GPU-seconds: a1 2 x 100 (from its since, before now) + b1 2 x 60 = 320
    assert run["jobs"]["t/a1"]["finished"] == 100
    assert (run["jobs"]["t/b1"]["started"], run["jobs"]["t/b1"]["finished"]) == (200, 260)
    assert run["queues"]["t/a"]["gpu_seconds"] == 320
    for command in ("cycle", "run"):
        code, stdout, _ = invoke(tmp_path, text, command, "-o", "table")
        assert code == 0
        assert "t/a1" in stdout


def test_json_scenario_file(tmp_path: Path) -> None:
    """JSON, the form of large generated scenarios, is read too."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(base()))
    result = runner.invoke(app, ["simulate", "run", "-f", str(path), "--until", "150"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["end"] == 150
    assert out["jobs"]["t/b1"]["phase"] == "Pending"


def test_large_yaml_asks_for_json(tmp_path: Path) -> None:
    data = base()
    data["metadata"]["labels"] = "x" * (1 << 20)  # over the 1 MiB of a YAML manifest
    code, stdout, stderr = invoke(tmp_path, yaml.safe_dump(data))
    assert (code, stdout) == (2, "")
    assert "asJSON" in stderr
