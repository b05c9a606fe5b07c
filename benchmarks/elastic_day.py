"""A day of diurnal inference load plus a batch backlog, in simulation (issue 14): SLO
attainment, GPU-hours and batch GPU-hours for three set-ups of the same GPUs.

    .venv/bin/python benchmarks/elastic_day.py [--seed 7] [--write-doc docs/elastic.md]

- static: every service holds its peak replica count all day, on nodes powered all day;
- autoscaled: the replica autoscaler (autoscale/replicas.py, H4's, unchanged) sets replicas
  from the measured rate, and the node pool autoscaler (autoscale/pool_plan.py) grows the pool
  for replicas that wait for a GPU and drains and removes nodes idle past the threshold;
- autoscaled + lending: the pool stays at the static size (the lender's guaranteed GPUs), the
  replicas are autoscaled, and every GPU they leave idle is lent to spot batch jobs, evicted
  (most recently started first) when a replica needs the GPU.

SLO attainment is the share of the day's requests answered within the bound, from an M/M/c
queue per service and step (benchmarks/_elastic_model.py states the assumptions). Prints a
markdown table; with --write-doc it replaces the table between the markers of the doc.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from _elastic_model import Curve, SpotTier, backlog, rates, within_bound
from aipaas.api.service import ServiceSpec
from aipaas.autoscale.pool_plan import Demand, NodeUse, PendingJob, PoolLimits, PoolShape, plan_pool
from aipaas.autoscale.pool_provider import NodeState
from aipaas.autoscale.replicas import Load, ScalerMemory, decide

DAY_S = 86_400
STEP_S = 15.0
SERVICES = (("chat", 600.0), ("embed", 300.0), ("rerank", 150.0))  # peak requests per second
SERVICE_S = 0.1  # mean time a request holds its replica (exponential)
BOUND_S = 0.5  # the latency bound of the SLO
TARGET_UTILISATION = 0.65  # the autoscaler aims each replica at this share of its capacity
STARTUP_S = 60.0  # a replica's model load once it has its GPU
NODE_GPUS = 8
PROVISION_S = 180.0
IDLE_S = 600.0
GRACE_S = 30.0  # a spot task's grace period: a replica taking its GPU loads after it
CHECKPOINT_S = 900.0
BACKLOG_JOBS = 1500
START = datetime(2026, 1, 5, tzinfo=UTC)
MARK_BEGIN, MARK_END = "<!-- elastic_day:begin -->", "<!-- elastic_day:end -->"


def service_spec() -> ServiceSpec:
    return ServiceSpec.model_validate(
        {
            "minReplicas": 1,
            "maxReplicas": 1000,
            "template": {"command": ["serve"], "resources": {"gpu": 1}},
            "autoscaling": {
                "metric": "rps",
                "target": TARGET_UTILISATION / SERVICE_S,
                "stableWindowSeconds": 60,
                "panicWindowSeconds": 15,
                "scaleDown": {"stabilizationWindowSeconds": 300},
            },
        }
    )


@dataclass
class Replicas:
    ready: int = 0
    starting: list[float] = field(default_factory=list)  # when each becomes ready
    waiting: int = 0  # replicas wanted with no GPU yet
    memory: ScalerMemory = field(default_factory=ScalerMemory)

    @property
    def holding(self) -> int:
        """Replicas holding a GPU."""
        return self.ready + len(self.starting)


@dataclass
class Result:
    name: str
    slo: float
    inference_gpu_h: float
    powered_gpu_h: float
    batch_gpu_h: float = 0.0
    batch_lost_gpu_h: float = 0.0
    evictions: int = 0
    peak_nodes: int = 0


def peak_replicas(curves: list[np.ndarray]) -> list[int]:
    target = TARGET_UTILISATION / SERVICE_S
    return [math.ceil(float(curve.max()) / target) for curve in curves]


def run(mode: str, curves: list[np.ndarray], observed: list[np.ndarray], seed: int) -> Result:
    steps = len(curves[0])
    spec = service_spec()
    peaks = peak_replicas(curves)
    static_nodes = math.ceil(sum(peaks) / NODE_GPUS)
    replicas = [Replicas(ready=p if mode == "static" else 1) for p in peaks]
    nodes: dict[str, tuple[NodeState, float]] = {}  # name -> (state, ready at)
    if mode == "autoscaled":
        nodes = {"n0": (NodeState.READY, 0.0)}
    spot = SpotTier(backlog(np.random.default_rng(seed + 1), BACKLOG_JOBS), CHECKPOINT_S, [])
    idle_since: dict[str, float] = {}
    served = answered = inference_s = powered_s = 0.0
    made = peak_nodes = 0
    for i in range(steps):
        now = i * STEP_S
        for name, (state, ready_at) in list(nodes.items()):
            if state == NodeState.PROVISIONING and now >= ready_at:
                nodes[name] = (NodeState.READY, ready_at)
        if mode in ("static", "lending"):  # the lender's GPUs stay powered
            capacity = static_nodes * NODE_GPUS
        else:
            capacity = NODE_GPUS * sum(s == NodeState.READY for s, _ in nodes.values())
        for group in replicas:
            group.ready += sum(1 for t in group.starting if t <= now)
            group.starting = [t for t in group.starting if t > now]
        for group, curve in zip(replicas, curves, strict=True):
            rate = float(curve[i])
            served += rate * STEP_S
            answered += rate * STEP_S * within_bound(rate, 1 / SERVICE_S, group.ready, BOUND_S)
        if mode != "static":
            for group, seen in zip(replicas, observed, strict=True):
                load = Load(now, float(seen[i]) * SERVICE_S, float(seen[i]))
                wall = START + timedelta(seconds=now)
                total = group.holding + group.waiting
                decision = decide(
                    spec,
                    group.memory,
                    load=load,
                    now=now,
                    wall=wall,
                    current=total,
                    ready=group.ready,
                )
                _resize(group, decision.desired)
        held = sum(g.holding for g in replicas)
        idle = capacity - held - spot.used()  # GPUs neither serving nor lent
        for group in replicas:  # replicas waiting for a GPU take free ones, then spot ones
            while group.waiting and held < capacity:
                group.waiting -= 1
                # a GPU taken from a spot task is free once the task's grace period is over
                delay = STARTUP_S if idle > 0 else GRACE_S + STARTUP_S
                idle -= 1
                group.starting.append(now + delay)
                held += 1
        if mode == "lending":
            spot.step(now, capacity - held)
        if mode == "autoscaled":
            made = _autoscale_nodes(nodes, replicas, idle_since, now, made)
            powered = len(nodes)
        else:
            powered = static_nodes
        peak_nodes = max(peak_nodes, powered)
        inference_s += held * STEP_S
        powered_s += powered * NODE_GPUS * STEP_S
    spot.close(steps * STEP_S)
    return Result(
        mode,
        answered / served,
        inference_s / 3600,
        powered_s / 3600,
        spot.useful_gpu_s / 3600,
        spot.lost_gpu_s / 3600,
        spot.evictions,
        peak_nodes,
    )


def _resize(group: Replicas, desired: int) -> None:
    """Replicas wanted: more wait for a GPU; fewer go, waiting ones first, then starting."""
    total = group.holding + group.waiting
    if desired > total:
        group.waiting += desired - total
        return
    extra = total - desired
    cut = min(extra, group.waiting)
    group.waiting -= cut
    extra -= cut
    cut = min(extra, len(group.starting))
    group.starting = group.starting[: len(group.starting) - cut]
    extra -= cut
    group.ready -= extra


def _autoscale_nodes(
    nodes: dict[str, tuple[NodeState, float]],
    replicas: list[Replicas],
    idle_since: dict[str, float],
    now: float,
    made: int,
) -> int:
    """The pool planner on the replicas' GPUs, packed onto the ready nodes in order (a node
    beyond the packed ones is idle)."""
    held = sum(g.holding for g in replicas)
    waiting = sum(g.waiting for g in replicas)
    uses = []
    for name in sorted(nodes, key=lambda n: int(n[1:])):
        state, _ = nodes[name]
        gpus = min(NODE_GPUS, held) if state == NodeState.READY else 0
        held -= gpus
        if gpus or state != NodeState.READY:
            idle_since.pop(name, None)
        else:
            idle_since.setdefault(name, now)
        uses.append(
            NodeUse(name, state, Demand(0, 0, gpus), 1 if gpus else 0, idle_since.get(name))
        )
    pending = [PendingJob(f"r{k}", (Demand(0, 0, 1),)) for k in range(waiting)]
    shape = PoolShape(cpu_milli=1, memory_mib=1, gpus=NODE_GPUS)
    plan = plan_pool(shape, PoolLimits(1, 64, None, IDLE_S), uses, pending, now)
    for name in plan.delete:
        del nodes[name]
    for name in plan.drain:
        nodes[name] = (NodeState.DRAINING, now)
    for name in plan.undrain:
        nodes[name] = (NodeState.READY, now)
    for _ in range(plan.create):
        nodes[f"n{made + 1}"] = (NodeState.PROVISIONING, now + PROVISION_S)
        made += 1
    return made


def table(results: list[Result], seed: int) -> str:
    static = results[0]
    lending = results[-1]
    freed = static.powered_gpu_h - lending.inference_gpu_h
    lines = [
        f"Seed {seed}; {len(SERVICES)} services, peaks "
        + ", ".join(f"{n} {p:g} req/s" for n, p in SERVICES)
        + f"; {BOUND_S:g} s bound, {SERVICE_S:g} s mean service time; {STEP_S:g} s steps.",
        "",
        "| set-up | SLO attainment | inference GPU-h | powered GPU-h | vs static "
        "| batch GPU-h done | batch GPU-h lost | evictions | peak nodes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {100 * r.slo:.2f}% | {r.inference_gpu_h:,.0f} | {r.powered_gpu_h:,.0f} "
            f"| {100 * (r.powered_gpu_h / static.powered_gpu_h - 1):+.1f}% "
            f"| {r.batch_gpu_h:,.0f} | {r.batch_lost_gpu_h:,.0f} | {r.evictions} | {r.peak_nodes} |"
        )
    lines += [
        "",
        f"Freed by autoscaling (static powered GPU-h minus the lending run's inference GPU-h): "
        f"{freed:,.0f} GPU-h; spot batch kept {lending.batch_gpu_h:,.0f} of them "
        f"({100 * lending.batch_gpu_h / freed:.1f}%), lost {lending.batch_lost_gpu_h:,.0f} "
        "to evictions (progress since the last checkpoint).",
    ]
    return "\n".join(lines)


def write_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    pattern = re.compile(re.escape(MARK_BEGIN) + ".*?" + re.escape(MARK_END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{path} has no {MARK_BEGIN} ... {MARK_END} markers")
    path.write_text(pattern.sub(lambda _: f"{MARK_BEGIN}\n{text}\n{MARK_END}", doc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write-doc", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    steps = int(DAY_S / STEP_S)
    curves = [rates(Curve(peak), steps, STEP_S, rng) for _, peak in SERVICES]
    observed = [rng.poisson(curve * STEP_S) / STEP_S for curve in curves]
    results = [
        run(mode, curves, observed, args.seed) for mode in ("static", "autoscaled", "lending")
    ]
    text = table(results, args.seed)
    print(text)
    if args.write_doc:
        write_doc(args.write_doc, text)


if __name__ == "__main__":
    main()
