# ruff: noqa: E501
"""Malformed manifests and what the error must name: shared by the API unit tests and the
server integration tests (each must get a 4xx naming the problem, and nothing stored)."""

from __future__ import annotations

JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: worker
      replicas: {replicas}
      command: {command}
      resources: {resources}
{extra}"""


def job(
    name: str = "bad",
    replicas: str = "1",
    command: str = "[echo, hi]",
    resources: str = "{cpu: 1, memory: 256Mi}",
    extra: str = "",
) -> str:
    return JOB.format(
        name=name, replicas=replicas, command=command, resources=resources, extra=extra
    )


BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(8)
    ]
)

# (id, manifest text, words the error message must contain)
CASES: list[tuple[str, str, list[str]]] = [
    ("replicas is a string", job(replicas="many"), ["spec.tasks[0].replicas"]),
    (
        "replicas negative",
        job(replicas="-1"),
        ["spec.tasks[0].replicas", "greater than or equal to 1"],
    ),
    ("replicas zero", job(replicas="0"), ["spec.tasks[0].replicas"]),
    ("replicas huge", job(replicas="100000"), ["spec.tasks[0].replicas", "1000"]),
    ("replicas a float", job(replicas="1.5"), ["spec.tasks[0].replicas"]),
    ("replicas a boolean", job(replicas="true"), ["spec.tasks[0].replicas"]),
    ("cpu negative", job(resources="{cpu: -1}"), ["spec.tasks[0].resources.cpu", "more than 0"]),
    ("cpu zero", job(resources="{cpu: 0}"), ["spec.tasks[0].resources.cpu"]),
    ("cpu huge", job(resources="{cpu: 1e9}"), ["spec.tasks[0].resources.cpu", "at most"]),
    (
        "cpu not a quantity",
        job(resources="{cpu: lots}"),
        ["spec.tasks[0].resources.cpu", "invalid quantity"],
    ),
    (
        "cpu below a millicore",
        job(resources="{cpu: 0.0001}"),
        ["spec.tasks[0].resources.cpu", "millicores"],
    ),
    ("memory negative", job(resources="{memory: -5Gi}"), ["spec.tasks[0].resources.memory"]),
    ("memory huge", job(resources="{memory: 900Pi}"), ["spec.tasks[0].resources.memory", "64Ti"]),
    ("memory bad suffix", job(resources="{memory: 5GB}"), ["spec.tasks[0].resources.memory"]),
    ("gpu negative", job(resources="{gpu: -1}"), ["spec.tasks[0].resources.gpu"]),
    ("gpu huge", job(resources="{gpu: 100000}"), ["spec.tasks[0].resources.gpu.count"]),
    (
        "gpu fraction above one and not whole",
        job(resources="{gpu: 1.5}"),
        ["spec.tasks[0].resources.gpu", "whole"],
    ),
    (
        "gpu fraction with count 2",
        job(resources="{gpu: {count: 2, fraction: 0.5}}"),
        ["spec.tasks[0].resources.gpu", "count 1"],
    ),
    ("gpu as text", job(resources="{gpu: two}"), ["spec.tasks[0].resources.gpu"]),
    (
        "unknown resource",
        job(resources="{tpu: 1}"),
        ["spec.tasks[0].resources.tpu", "unknown field"],
    ),
    ("command empty", job(command="[]"), ["spec.tasks[0].command"]),
    ("command a string", job(command="'echo hi'"), ["spec.tasks[0].command"]),
    ("command with a number", job(command="[echo, 3]"), ["spec.tasks[0].command[1]"]),
    ("bad name uppercase", job(name="Hello"), ["metadata.name", "not a valid name"]),
    ("bad name underscore", job(name="a_b"), ["metadata.name"]),
    ("bad name too long", job(name="a" * 64), ["metadata.name", "63"]),
    ("unknown spec field", job(extra="  colour: blue\n"), ["spec.colour", "unknown field"]),
    (
        "unknown task field",
        job(command="[echo]\n      imagePullPolicy: Always"),
        ["spec.tasks[0].imagePullPolicy", "unknown field"],
    ),
    ("unknown top-level field", job() + "extra: 1\n", ["extra", "unknown field"]),
    (
        "unknown kind",
        "apiVersion: aipaas/v1\nkind: Pod\nmetadata: {name: x}\n",
        ["kind", "unknown kind"],
    ),
    ("missing kind", "apiVersion: aipaas/v1\nmetadata: {name: x}\n", ["kind"]),
    (
        "wrong apiVersion",
        "apiVersion: v1\nkind: Job\nmetadata: {name: x}\n",
        ["apiVersion", "aipaas/v1"],
    ),
    (
        "missing metadata",
        "apiVersion: aipaas/v1\nkind: Queue\nspec: {}\n",
        ["metadata", "required"],
    ),
    (
        "missing tasks",
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: x, tenant: acme}\nspec: {queue: research}\n",
        ["spec.tasks", "required"],
    ),
    ("not a mapping", "- just\n- a list\n", ["mapping"]),
    ("a scalar", "hello\n", ["mapping"]),
    ("not YAML", "kind: [unclosed\n", ["not valid YAML"]),
    ("YAML bomb", BOMB, ["YAML bomb"]),
    (
        "too deep",
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: x}\nspec: "
        + "[" * 60
        + "]" * 60
        + "\n",
        ["deeper"],
    ),
    (
        "minAvailable above replicas",
        job(extra="  minAvailable: 5\n"),
        ["minAvailable", "more than the 1 replicas"],
    ),
    (
        "duplicate task names",
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  tasks: [{name: w, command: [x]}, {name: w, command: [y]}]\n",
        ["duplicate task name"],
    ),
    (
        "gpu count as text",
        job(resources="{gpu: {count: '2'}}"),
        ["spec.tasks[0].resources.gpu.count"],
    ),
    (
        "bad env name",
        job(command="[echo]\n      env: {'1BAD': x}"),
        ["spec.tasks[0].env", "environment variable"],
    ),
    (
        "relative workingDir",
        job(command="[echo]\n      workingDir: tmp"),
        ["spec.tasks[0].workingDir", "absolute"],
    ),
    (
        "bad restartPolicy",
        job(command="[echo]\n      restartPolicy: Sometimes"),
        ["spec.tasks[0].restartPolicy"],
    ),
    (
        "backoffLimit negative",
        job(command="[echo]\n      backoffLimit: -2"),
        ["spec.tasks[0].backoffLimit"],
    ),
    ("unknown priority name", job(extra="  priority: urgent\n"), ["spec.priority", "urgent"]),
    (
        "tenant quota negative",
        "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: t}\nspec: {quota: {gpu: -1}}\n",
        ["spec.quota.gpu"],
    ),
    (
        "tenant quota memory text",
        "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: t}\nspec: {quota: {memory: plenty}}\n",
        ["spec.quota.memory"],
    ),
    (
        "user unknown role",
        "apiVersion: aipaas/v1\nkind: User\nmetadata: {name: bob, tenant: acme}\nspec: {role: god}\n",
        ["spec.role"],
    ),
    (
        "queue weight negative",
        "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: q, tenant: acme}\nspec: {weight: -1}\n",
        ["spec.weight"],
    ),
    (
        "bad label key",
        "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: q, tenant: acme, labels: {'bad key!': x}}\n",
        ["metadata.labels", "invalid key"],
    ),
    (
        "duplicate key",
        "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: q, tenant: acme}\nkind: Job\n",
        ["kind: key 'kind' given twice"],
    ),
    (
        "depends on itself",
        job(extra="  dependsOn: [bad]\n"),
        ["dependsOn", "cannot depend on itself"],
    ),
    (
        "dependency with a bad name",
        job(extra="  dependsOn: [Not_A_Name]\n"),
        ["spec.dependsOn[0]"],
    ),
]
