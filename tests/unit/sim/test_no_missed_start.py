"""A property of one cycle (`simulate cycle`, hypothesis over random trees of sub-queues with
weights, guarantees and quotas, random clusters and job mixes with running jobs): after the
cycle, no pending job could have started on what is left. A job is a missed start when its gang
fits on the free GPUs (best fit, task by task) and every level of its queue (leaf, parents,
tenant) stays within its quota and at or below its fair share with it, and nothing said to keep
it back (a head it is held for that still waits, a reservation, strict order) applies.

It found three ways to leave GPUs idle with words no longer true: a job held for a head that had
started by preemption; refusals for fair share made before preempt/reclaim lowered the holdings;
and a head that no single node could ever make room for (batch/head_hold.py).

Tasks evicted in the cycle still count against the quotas of their levels for the rest of it
(they hold what they have until their stops are confirmed, on a platform): a job kept back by a
quota only with them counted is not a missed start."""

from __future__ import annotations

import random
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.sim.scenario import validate_document
from aipaas.sim.scenario_build import build_scenario
from aipaas.sim.scenario_output import run_cycle

KEPT_BACK = frozenset({"Reserved", "StrictOrder", "WaitingForDependencies"})


def _queues(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 4)):
        spec: dict[str, Any] = {}
        if rng.random() < 0.3:
            spec["weight"] = rng.choice([1, 2, 3])
        if rng.random() < 0.3:
            spec["guaranteed"] = {"gpu": rng.choice([1, 2, 4])}
        if rng.random() < 0.2:
            quota = rng.choice([4, 6, 8])
            if quota >= spec.get("guaranteed", {}).get("gpu", 0):
                spec["quota"] = {"gpu": quota}
        if i > 0 and rng.random() < 0.25:
            spec["parent"] = f"q{rng.randrange(i)}"
        out.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Queue",
                "metadata": {"name": f"q{i}", "tenant": "t"},
            }
            | ({"spec": spec} if spec else {})
        )
    return out


def scenario(seed: int) -> dict[str, Any]:
    """A random one-tenant scenario at t=1000 (whole GPUs, no time limits)."""
    rng = random.Random(seed)
    sizes = [rng.choice([2, 4, 8]) for _ in range(rng.randint(1, 5))]
    nodes = [{"name": f"n{i}", "gpu": gpus} for i, gpus in enumerate(sizes)]
    queues = _queues(rng)
    parents = {q.get("spec", {}).get("parent") for q in queues}
    leaves = [q["metadata"]["name"] for q in queues if q["metadata"]["name"] not in parents]
    free = {f"n{i}": gpus for i, gpus in enumerate(sizes)}
    jobs: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    for j in range(rng.randint(1, 14)):
        gpu, replicas = rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 2])
        spec: dict[str, Any] = {
            "queue": rng.choice(leaves),
            "priority": rng.choice([10, 50, 100]),
            "tasks": [
                {"name": "w", "replicas": replicas, "command": ["x"], "resources": {"gpu": gpu}}
            ],
        }
        if rng.random() < 0.2:
            spec["preemptible"] = False
        jobs.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Job",
                "metadata": {"name": f"j{j}", "tenant": "t"},
                "spec": spec,
            }
        )
        if rng.random() < 0.5:
            trial = dict(free)
            placed: dict[str, str] = {}
            for k in range(replicas):
                fits = [n for n in trial if trial[n] >= gpu]
                if not fits:
                    break
                chosen = rng.choice(fits)
                trial[chosen] -= gpu
                placed[f"w-{k}"] = chosen
            if len(placed) == replicas:
                free = trial
                running.append(
                    {"job": f"t/j{j}", "since": rng.choice([0, 100, 200]), "nodes": placed}
                )
    objects = [
        {"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": "t"}},
        *queues,
        *jobs,
    ]
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "spec": {"now": 1000, "nodes": nodes, "objects": objects, "running": running},
    }


def _lineage(parent_of: dict[str, str | None], leaf: str) -> list[str]:
    out, name = [f"t/{leaf}"], parent_of[leaf]
    while name is not None:
        out.append(f"t/{name}")
        name = parent_of[name]
    return [*out, "t"]


def missed_starts(document: dict[str, Any], output: dict[str, Any]) -> list[str]:
    objects = document["spec"]["objects"]
    parent_of = {
        o["metadata"]["name"]: o.get("spec", {}).get("parent")
        for o in objects
        if o["kind"] == "Queue"
    }
    specs = {f"t/{o['metadata']['name']}": o["spec"] for o in objects if o["kind"] == "Job"}
    free = {n["name"]: n["gpu"] for n in document["spec"]["nodes"]}
    for key, job in output["jobs"].items():
        for node in job["nodes"].values():
            free[node] -= specs[key]["tasks"][0]["resources"]["gpu"]
    stopping: dict[str, int] = {}  # per level: the GPUs of the tasks evicted in the cycle
    for name in output["evicted"]:
        victim = name.rsplit("/", 1)[0]
        for level in _lineage(parent_of, specs[victim]["queue"]):
            stopping[level] = stopping.get(level, 0) + specs[victim]["tasks"][0]["resources"]["gpu"]
    missed = []
    for key, job in output["jobs"].items():
        if job["phase"] != "Pending" or job["reason_code"] in KEPT_BACK:
            continue
        if job["reason_code"] == "HeldForHead":
            head = re.search(r"for (t/\S+) \(priority", job["reason"])
            if head is not None and output["jobs"][head.group(1)]["phase"] == "Running":
                missed.append(f"{key} held for {head.group(1)}, which runs")
            continue
        task = specs[key]["tasks"][0]
        gpu, replicas = task["resources"]["gpu"], task["replicas"]
        lineage = _lineage(parent_of, specs[key]["queue"])
        levels = [output["queues"][k] for k in lineage]
        if any(
            q["allocated"]["gpu"] + gpu * replicas
            > min(q["fair_share"]["gpu"], q["quota"].get("gpu", 10**9))
            for q in levels
        ):
            continue
        if any(
            q["allocated"]["gpu"] + stopping.get(k, 0) + gpu * replicas
            > q["quota"].get("gpu", 10**9)
            for k, q in zip(lineage, levels, strict=True)
        ):
            continue  # its quota is held by tasks evicted in the cycle until they stop
        trial = dict(free)
        for _ in range(replicas):
            fits = sorted((n for n in trial if trial[n] >= gpu), key=lambda n: trial[n])
            if not fits:
                break
            trial[fits[0]] -= gpu
        else:
            missed.append(f"{key} ({job['reason_code']}: {job['reason']})")
    return missed


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_no_pending_job_could_have_started_on_what_is_left(seed: int) -> None:
    document = scenario(seed)
    output = run_cycle(build_scenario(validate_document(document), honour_arrivals=False))
    assert missed_starts(document, output) == [], seed
