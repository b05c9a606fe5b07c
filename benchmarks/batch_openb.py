"""Batch policies on the openb trace replayed in time (issue 11), through ``simulate run``.

    .venv/bin/python benchmarks/batch_openb.py [--full] [--loads 0.7,0.9,1.1]
        [--policies fifo,volcano,default] [--seed 42] [--data ../shared/data/openb]

The default workload (openb_pod_list_default.csv: 8,152 pods with creation and deletion times
and QoS classes) becomes one single-task job per pod, on a slice of the openb GPU cluster.
How (each choice, and why):

* Cluster: every 32nd node of the 1,213 (sorted by GPU count, model and name, so the slice keeps
  the mix: 38 nodes, about 190 GPUs). The whole cluster cannot be loaded in time by this trace:
  all 8,152 pods together ask for 98% of its GPUs, so a load of 0.9 over a span longer than the
  jobs needs a cluster much smaller than the trace's total demand. Quick runs (the default) take
  a seeded quarter of the pods on every 128th node (the same ratio of demand to cluster).
* Arrivals: in creation order; the 1% of pods created before the trace's busy month arrive at
  its start (T0, the 1st percentile of creation times); times after T0 are divided by a factor
  chosen so that the offered load, GPU-time asked / (cluster GPUs x arrival span), is the target
  (0.7, 0.9, 1.1).
* Durations: deletion - creation in trace seconds (at least 1 s), capped at 4 hours (5.6% of
  pods run longer: a few run for months, and uncapped their GPU-time would fall almost wholly
  after the last arrival, so the load during the replay would be far below the target). They
  are not divided by the arrival factor: that would leave the load where it is.
* QoS -> priority: LS and Guaranteed -> 1000 (class high), not preemptible; Burstable -> 100
  (normal), preemptible; BE -> 0 (low), preemptible.
* Tenants: each pod goes to one of 4 tenants of equal weight (seeded choice, weights 1:1:1:1);
  each tenant has a guarantee of 20% of the slice's GPUs and two queues, ``a`` and ``b``, a
  pod going to either by a seeded coin (``--queues random``, the default) or by class
  (``--queues qos``: ``svc`` for LS and Guaranteed, ``batch`` for the rest). By class, a
  tenant's high-priority job can never preempt its own low-priority ones: preemption stays
  within a queue, and reclaim across queues only serves a queue below its fair share.
* Time limits: every job's ``timeLimit`` is its duration rounded up to a whole minute (what a
  user would declare), so that backfill has end times to plan with; no job reaches it.
* Policies: the built-in profiles ``fifo`` (strict submission order, no preemption), ``volcano``
  (proportion + gang + priority preemption and reclaim) and ``default`` (ours: DRF over the
  tree, preemption, reclaim, backfill).

Reported per policy and load: avg and p99 job completion time (finish - arrival), queueing delay
(first start - arrival) avg and p99 per class, GPU allocation (allocated GPU-time over the
arrival span / cluster GPU-time), Jain's index of the tenants' GPU-time per 1-hour window of trace
time (over tenants with work in the window; averaged over windows where at least two tenants had
a job waiting), evictions and the GPU-hours they lost, jobs that never started (a pod no node
of the slice can hold), wall seconds. Targets at 0.9: avg queueing delay at least 30% below
fifo's, fairness above 0.95, high-priority p99 queueing delay under 60 s.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _batch_run import RunOutcome, jain, mean, percentile, run_observed
from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.sim.openb import load_nodes

ROOT = Path(__file__).resolve().parents[1]
TENANTS = 4
CAP_SECONDS = 4 * 3600
WINDOW_SECONDS = 3600
GUARANTEE_SHARE = 0.2
#: QoS class -> (priority class name, value, preemptible)
QOS = {
    "LS": ("high", 1000, False),
    "Guaranteed": ("high", 1000, False),
    "Burstable": ("normal", 100, True),
    "BE": ("low", 0, True),
}
CLASSES = ("high", "normal", "low")


@dataclass(frozen=True)
class Pod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: int  # total (count x per-GPU share)
    gpu_count: int
    qos: str
    created: int
    duration: int


@dataclass(frozen=True)
class Size:
    node_every: int  # every n-th node
    pod_share: float  # the seeded share of pods kept


QUICK = Size(128, 0.25)
FULL = Size(32, 1.0)


def load_pods(path: Path, share: float, seed: int) -> list[Pod]:
    rng = random.Random(seed)
    pods = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if share < 1 and rng.random() >= share:
                continue
            count = int(row["num_gpu"])
            created = int(row["creation_time"])
            pods.append(
                Pod(
                    row["name"],
                    int(row["cpu_milli"]),
                    int(row["memory_mib"]),
                    count * min(int(row["gpu_milli"]), 1000) if count else 0,
                    count,
                    row["qos"],
                    created,
                    min(max(int(row["deletion_time"]) - created, 1), CAP_SECONDS),
                )
            )
    return sorted(pods, key=lambda p: (p.created, p.name))


def cluster_slice(nodes: list[NodeSpec], every: int) -> list[NodeSpec]:
    ordered = sorted(nodes, key=lambda n: (n.gpu_count, n.gpu_model, n.name))
    return ordered[::every]


@dataclass(frozen=True)
class Workload:
    nodes: list[NodeSpec]
    pods: list[Pod]
    arrivals: dict[str, float]  # pod name -> virtual seconds
    tenants: dict[str, int]  # pod name -> tenant index
    queues: dict[str, str]  # pod name -> queue name within its tenant
    span: float
    gpus: int


def workload(data: Path, size: Size, load: float, seed: int, queues_by: str = "random") -> Workload:
    nodes = cluster_slice(load_nodes(data / "openb_node_list_gpu_node.csv"), size.node_every)
    pods = load_pods(data / "openb_pod_list_default.csv", size.pod_share, seed)
    created = sorted(p.created for p in pods)
    start = created[len(created) // 100]
    span0 = created[-1] - start
    gpus = sum(n.gpu_count for n in nodes)
    offered = sum(p.gpu_milli / 1000 * p.duration for p in pods)
    factor = load * gpus * span0 / offered  # trace seconds per virtual second of arrivals
    arrivals = {p.name: round((max(p.created, start) - start) / factor, 3) for p in pods}
    rng = random.Random(seed + 1)
    tenants = {p.name: rng.choices(range(TENANTS), weights=[1] * TENANTS)[0] for p in pods}
    if queues_by == "qos":
        queues = {p.name: "svc" if QOS[p.qos][1] == 1000 else "batch" for p in pods}
    else:
        queues = {p.name: rng.choice("ab") for p in pods}
    return Workload(nodes, pods, arrivals, tenants, queues, span0 / factor, gpus)


def scenario(w: Workload, profile: str) -> dict[str, Any]:
    guarantee = int(GUARANTEE_SHARE * w.gpus)
    objects: list[dict[str, Any]] = []
    for t in range(TENANTS):
        objects.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Tenant",
                "metadata": {"name": f"t{t}"},
                "spec": {"guaranteed": {"gpu": guarantee}},
            }
        )
        for queue in sorted(set(w.queues.values())):
            objects.append(
                {
                    "apiVersion": "aipaas/v1",
                    "kind": "Queue",
                    "metadata": {"name": queue, "tenant": f"t{t}"},
                }
            )
    arrivals, durations = [], []
    for pod in w.pods:
        tenant = f"t{w.tenants[pod.name]}"
        _, priority, preemptible = QOS[pod.qos]
        # A few pods ask for no memory, which a Job may not say: 1 MiB is the nearest it may.
        resources: dict[str, Any] = {
            "cpu": f"{max(pod.cpu_milli, 1)}m",
            "memory": f"{max(pod.memory_mib, 1)}Mi",
        }
        if pod.gpu_count:
            resources["gpu"] = pod.gpu_count if pod.gpu_count > 1 else pod.gpu_milli / 1000
        objects.append(
            {
                "apiVersion": "aipaas/v1",
                "kind": "Job",
                "metadata": {"name": pod.name, "tenant": tenant},
                "spec": {
                    "queue": w.queues[pod.name],
                    "priority": priority,
                    "preemptible": preemptible,
                    "timeLimit": f"{math.ceil(pod.duration / 60) * 60}s",
                    "tasks": [
                        {"name": "w", "replicas": 1, "command": ["run"], "resources": resources}
                    ],
                },
            }
        )
        arrivals.append({"job": f"{tenant}/{pod.name}", "at": w.arrivals[pod.name]})
        durations.append({"job": f"{tenant}/{pod.name}", "seconds": pod.duration})
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "metadata": {"name": "openb-batch"},
        "spec": {
            "profile": profile,
            "nodes": [
                {
                    "name": n.name,
                    "gpu": n.gpu_count,
                    "gpu_model": n.gpu_model,
                    "cpu": f"{n.cpu_milli}m",
                    "memory": f"{n.memory_mib}Mi",
                }
                for n in w.nodes
            ],
            "objects": objects,
            "arrivals": arrivals,
            "durations": durations,
        },
    }


@dataclass
class Row:
    policy: str
    load: float
    jobs: int
    never: int
    jct_avg: float
    jct_p99: float
    delay: dict[str, tuple[float, float]]  # class -> (avg, p99)
    delay_avg: float
    allocation: float
    fairness: float
    windows: int
    evictions: int
    lost_gpu_hours: float
    wall: float


def measure(w: Workload, policy: str, load: float, outcome: RunOutcome) -> Row:
    klass = {f"t{w.tenants[p.name]}/{p.name}": QOS[p.qos][0] for p in w.pods}
    delays: dict[str, list[float]] = defaultdict(list)
    jct, never = [], 0
    for key, job in outcome.jobs.items():
        if job.started is None:
            never += 1
            continue
        delays[klass[key]].append(job.started - job.submitted)
        if job.finished is not None:
            jct.append(job.finished - job.submitted)
    every = [d for values in delays.values() for d in values]
    allocated = sum(
        s.gpu_milli / 1000 * max(0.0, min(s.end, w.span) - s.start) for s in outcome.segments
    )
    lost = sum(s.gpu_milli / 1000 * (s.end - s.start) for s in outcome.segments if s.evicted)
    fairness, windows = _fairness(outcome)
    return Row(
        policy,
        load,
        len(outcome.jobs),
        never,
        mean(jct),
        percentile(jct, 99),
        {c: (mean(delays[c]), percentile(delays[c], 99)) for c in CLASSES},
        mean(every),
        allocated / (w.gpus * w.span),
        fairness,
        windows,
        sum(1 for s in outcome.segments if s.evicted),
        lost / 3600,
        outcome.wall_seconds,
    )


def _fairness(outcome: RunOutcome) -> tuple[float, int]:
    """Jain's index of GPU-time among tenants with work, per window where >= 2 tenants had a
    job waiting; the mean over those windows, and how many there were."""
    end = max((s.end for s in outcome.segments), default=0.0)
    count = int(end // WINDOW_SECONDS) + 1
    use = [[0.0] * TENANTS for _ in range(count)]
    busy = [set[int]() for _ in range(count)]  # tenants with a job waiting or running
    waiting = [set[int]() for _ in range(count)]
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in outcome.segments:
        tenant = int(s.job.split("/")[0][1:])
        runs[s.job].append((s.start, s.end))
        for i in range(int(s.start // WINDOW_SECONDS), int(s.end // WINDOW_SECONDS) + 1):
            low, high = i * WINDOW_SECONDS, (i + 1) * WINDOW_SECONDS
            overlap = min(s.end, high) - max(s.start, low)
            if overlap > 0 or s.start == s.end:
                use[i][tenant] += s.gpu_milli / 1000 * max(overlap, 0.0)
                busy[i].add(tenant)
    for key, job in outcome.jobs.items():
        tenant = int(key.split("/")[0][1:])
        gaps: list[tuple[float, float]] = []
        at = job.submitted
        for start, stop in sorted(runs.get(key, [])):
            gaps.append((at, start))
            at = stop
        if job.finished is None and job.started is None:
            gaps.append((at, end))
        for wait_from, wait_to in gaps:
            if wait_to > wait_from:
                for i in range(
                    int(wait_from // WINDOW_SECONDS),
                    min(count - 1, int(wait_to // WINDOW_SECONDS)) + 1,
                ):
                    waiting[i].add(tenant)
                    busy[i].add(tenant)
    scores = [
        jain([use[i][t] for t in sorted(busy[i])]) for i in range(count) if len(waiting[i]) >= 2
    ]
    return (mean(scores), len(scores))


def table(rows: list[Row]) -> str:
    head = (
        "| policy | load | jobs | never started | JCT avg s | JCT p99 s | delay avg s "
        + " ".join(f"| {c} avg s | {c} p99 s" for c in CLASSES)
        + " | GPU alloc | Jain (windows) | evictions | GPU-h lost | wall s |"
    )
    lines = [head, "|---|---:|" + "---:|" * (head.count("|") - 3)]
    for r in rows:
        lines.append(
            f"| {r.policy} | {r.load:g} | {r.jobs:,} | {r.never} | {r.jct_avg:,.0f} "
            f"| {r.jct_p99:,.0f} | {r.delay_avg:,.0f} "
            + " ".join(f"| {r.delay[c][0]:,.0f} | {r.delay[c][1]:,.0f}" for c in CLASSES)
            + f" | {100 * r.allocation:.1f}% | {r.fairness:.3f} ({r.windows}) | {r.evictions:,} "
            f"| {r.lost_gpu_hours:,.1f} | {r.wall:.0f} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[Row], load: float = 0.9) -> list[str]:
    at = {r.policy: r for r in rows if r.load == load}
    ours, fifo = at.get("default"), at.get("fifo")
    if ours is None:
        return []
    out = []
    if fifo is not None and fifo.delay_avg > 0:
        cut = 1 - ours.delay_avg / fifo.delay_avg
        out.append(f"avg queueing delay {100 * cut:.0f}% below fifo (target >= 30%)")
    out.append(f"fairness {ours.fairness:.3f} (target > 0.95)")
    out.append(f"high-priority p99 queueing delay {ours.delay['high'][1]:.0f} s (target < 60 s)")
    return [f"at load {load:g}, default: " + "; ".join(out)]


def run_all(
    data: Path, size: Size, loads: list[float], policies: list[str], seed: int, queues_by: str
) -> list[Row]:
    rows = []
    for load in loads:
        w = workload(data, size, load, seed, queues_by)
        for policy in policies:
            started = time.perf_counter()
            outcome = run_observed(scenario(w, policy))
            outcome.wall_seconds = time.perf_counter() - started
            rows.append(measure(w, policy, load, outcome))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/openb"))
    parser.add_argument("--full", action="store_true", help="all pods on every 32nd node")
    parser.add_argument("--loads", default="0.7,0.9,1.1")
    parser.add_argument("--policies", default="fifo,volcano,default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--queues", choices=("random", "qos"), default="random")
    args = parser.parse_args()
    size = FULL if args.full else QUICK
    rows = run_all(
        Path(args.data),
        size,
        [float(x) for x in args.loads.split(",")],
        args.policies.split(","),
        args.seed,
        args.queues,
    )
    print(table(rows))
    for line in verdicts(rows):
        print(line)


if __name__ == "__main__":
    main()
