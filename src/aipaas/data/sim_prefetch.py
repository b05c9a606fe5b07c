"""Prefetch in the simulator: predict where the queue's heads run, plan, apply the plan.

The same :func:`aipaas.data.prefetch_policy.plan_prefetch` the live controller calls decides;
this module only builds its input from the simulated cluster and carries out its answer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from aipaas.data.prefetch_policy import DatasetNeed, PrefetchInput, QueuedJob, plan_prefetch
from aipaas.data.sim_cache import SimEntry
from aipaas.data.sim_predict import HeadJob, NodeTimeline, predict_nodes

if TYPE_CHECKING:
    from aipaas.data.sim_run import DataSim


def timelines(sim: DataSim) -> dict[str, NodeTimeline]:
    """Free whole GPUs per node now, and when the running jobs are expected to free theirs."""
    out = {
        node.name: NodeTimeline(int(sim.state.whole_gpus_free[i]))
        for i, node in enumerate(sim.state.nodes)
    }
    for run in sim.running:
        left = max(0.0, run.job.duration_s - run.progress_s) * run.estimate_factor
        for pod in run.pods:
            out[pod.node].releases.append((sim.now + left, pod.gpus))
    return out


def warmth(sim: DataSim, heads: list[HeadJob]) -> dict[str, dict[str, float]]:
    """Share of each head job's dataset on each node (a running load counts half)."""
    jobs = {job.name: job for job in sim.pending}
    out: dict[str, dict[str, float]] = {}
    for head in heads:
        dataset = jobs[head.name].dataset
        shares: dict[str, float] = {}
        for node, cache in sim.caches.items():
            entry = cache.entries.get(dataset.name)
            if entry is not None:
                held = entry.bytes / max(dataset.size_bytes, 1)
                shares[node] = held + (0.5 * (1 - held) if entry.loading else 0.0)
        out[head.name] = shares
    return out


def run_prefetch(sim: DataSim) -> None:
    options = sim.settings.prefetch
    if sim.policy.peers:  # caches serve each other: any copy of queued data spares the source
        options = replace(options, seed_copies=True)
    heads = [
        HeadJob(job.name, tuple(job.pods(sim.gpus_per_node)))
        for job in sim.pending[: options.lookahead_jobs]
    ]
    starts: dict[str, float] = {}
    predicted = predict_nodes(heads, timelines(sim), sim.now, warmth(sim, heads), starts)
    queue = [
        QueuedJob(
            job.name,
            (DatasetNeed(job.dataset.name, job.dataset.size_bytes),),
            predicted.get(job.name, ()),
            starts.get(job.name),
        )
        for job in sim.pending
    ]
    snapshot = [cache.snapshot() for cache in sim.caches.values()]
    plan = plan_prefetch(PrefetchInput(queue, snapshot, sim.now, options))
    datasets = {job.dataset.name: job.dataset for job in sim.pending}
    for eviction in plan.evictions:
        entry = sim.caches[eviction.node].entries.pop(eviction.dataset)
        if entry.readers or entry.loading:
            raise AssertionError(f"the policy evicted {eviction.dataset} in use on {eviction.node}")
    for load in plan.loads:
        cache = sim.caches[load.node]
        entry = cache.entries.get(load.dataset) or SimEntry(datasets[load.dataset])
        cache.entries[load.dataset] = entry
        entry.loading = True
        entry.last_used = sim.now
        sim.loads[(load.node, load.dataset)] = entry
