"""The data-plane simulator: jobs placed by the real scheduler, reading data through caches.

Each step (``step_s`` of simulated time): arrivals join the queue; waiting jobs are placed in
submission order by :class:`aipaas.scheduler.framework.runtime.Scheduler` under the
``default`` profile (with DataAffinity for the policies that have it), a job waiting past
``starvation_s`` blocking the ones behind it; prefetch (when the policy has it) plans loads for
the queue's heads; then bandwidth is shared max-min fairly, the running jobs' reads first and
prefetch loads from what is left, and every job computes at the pace its slowest pod's data
arrives (a pod reading its node's cache when the bytes it reads next are there, the source
otherwise). The lost pace, times the job's GPUs, is GPU time waiting for data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

import numpy as np

from aipaas.data.affinity import DataNeed, DataView
from aipaas.data.affinity_profile import with_data_affinity
from aipaas.data.sim_bandwidth import INFINITE, Flow, max_min_rates
from aipaas.data.sim_cache import SimEntry, SimNodeCache
from aipaas.data.sim_model import JobResult, JobRun, PodRun, Policy, SimSettings
from aipaas.data.sim_paths import capacity as link_capacity
from aipaas.data.sim_paths import complete_copies, pod_links, remote_links
from aipaas.data.sim_prefetch import run_prefetch
from aipaas.data.sim_result import SimResult
from aipaas.data.sim_trace import SimJob, Trace
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.profile import load_profile
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.framework.types import Placement, PodRequest, Unschedulable
from aipaas.scheduler.plugins.data_affinity import data_affinity_of

CPU_PER_GPU_MILLI = 12_000
MEMORY_PER_GPU_MIB = 100 * 1024


def pod_requests(job: SimJob, gpus_per_node: int) -> list[PodRequest]:
    return [
        PodRequest(f"{job.name}/{i}", g * CPU_PER_GPU_MILLI, g * MEMORY_PER_GPU_MIB, g, 1000)
        for i, g in enumerate(job.pods(gpus_per_node))
    ]


class DataSim:
    def __init__(self, trace: Trace, policy: Policy, settings: SimSettings | None = None) -> None:
        self.trace = trace
        self.policy = policy
        self.settings = settings or SimSettings()
        config = trace.config
        self.gpus_per_node = config.gpus_per_node
        nodes = [
            NodeSpec(
                f"node-{i:03d}",
                cpu_milli=config.gpus_per_node * CPU_PER_GPU_MILLI,
                memory_mib=config.gpus_per_node * MEMORY_PER_GPU_MIB,
                gpu_count=config.gpus_per_node,
                gpu_model="A100",
            )
            for i in range(config.nodes)
        ]
        self.state = ClusterState(nodes)
        workload = [p for job in trace.jobs[:300] for p in pod_requests(job, self.gpus_per_node)]
        profile = (
            with_data_affinity("default", self.settings.affinity_weight)
            if policy.affinity
            else load_profile("default")
        )
        self.scheduler = Scheduler(self.state, profile, seed=config.seed, workload=workload)
        self.view = DataView()
        plugin = data_affinity_of(self.scheduler)
        if plugin is not None:
            plugin.view = self.view
        capacity = self.settings.plane.cache_bytes_per_node
        self.caches = {node.name: SimNodeCache(node.name, capacity) for node in nodes}
        self.rng = np.random.default_rng(config.seed + 1)
        self.pending: list[SimJob] = []
        self.running: list[JobRun] = []
        self.results: list[JobResult] = []
        #: Prefetch loads running: (node, dataset) -> the entry they fill.
        self.loads: dict[tuple[str, str], SimEntry] = {}
        self.now = 0.0
        self.window_end = max((job.submit_s for job in trace.jobs), default=0.0)
        self.source_bytes = 0.0
        self.allocated_gpu_s = 0.0
        self.computing_gpu_s = 0.0
        #: Allocated GPU-seconds and capacity GPU-seconds over the steps when a job waited.
        self.busy_allocated_gpu_s = 0.0
        self.busy_capacity_gpu_s = 0.0

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> SimResult:
        arrivals = sorted(self.trace.jobs, key=lambda job: job.submit_s)
        step = self.settings.step_s
        limit = self.window_end + self.settings.drain_limit_s
        next_arrival = 0
        changed = True
        while next_arrival < len(arrivals) or self.pending or self.running:
            if self.now > limit:
                raise RuntimeError(f"{self.policy.name}: jobs still queued at {self.now:.0f} s")
            while next_arrival < len(arrivals) and arrivals[next_arrival].submit_s <= self.now:
                self.pending.append(arrivals[next_arrival])
                next_arrival += 1
                changed = True
            if changed and self.pending:
                self.schedule()
                if self.policy.prefetch:
                    run_prefetch(self)
            changed = self.advance(step)
            self.now += step
        return SimResult.of(self)

    def schedule(self) -> None:
        if self.policy.affinity:
            self.refresh_view()
        failed: list[tuple[int, int]] = []
        started: set[str] = set()
        for job in self.pending:
            pods = pod_requests(job, self.gpus_per_node)
            shape = (pods[0].gpu_count, len(pods))
            hopeless = any(shape[0] >= g and shape[1] >= k for g, k in failed)
            placed = None if hopeless else self.scheduler.schedule_gang(pods)
            if placed is None or isinstance(placed, Unschedulable):
                failed.append(shape)
                if self.now - job.submit_s > self.settings.starvation_s:
                    break  # it has waited too long: nothing behind it starts before it
                continue
            self.start(job, placed)
            started.add(job.name)
        self.pending = [job for job in self.pending if job.name not in started]

    def refresh_view(self) -> None:
        self.view.cached = {
            node: {name: int(entry.bytes) for name, entry in cache.entries.items()}
            for node, cache in self.caches.items()
        }
        self.view.loading = {}
        for node, name in self.loads:
            self.view.loading.setdefault(node, set()).add(name)
        self.view.needs = {
            job.name: (DataNeed(job.dataset.name, job.dataset.size_bytes),) for job in self.pending
        }

    def start(self, job: SimJob, placements: list[Placement]) -> None:
        pods: list[PodRun] = []
        for placement in placements:
            gpus = len(placement.gpus)
            entry = None
            if self.policy.cache:
                scored = None
                if self.policy.prefetch:
                    demand = Counter(j.dataset.name for j in self.pending)
                    scored = (demand, self.settings.prefetch)
                entry = self.caches[placement.node].admit_reader(job.dataset, self.now, scored)
            rate = gpus * job.read_bps_per_gpu
            pods.append(PodRun(placement.node, gpus, rate, entry, dataset=job.dataset.name))
        factor = float(self.rng.lognormal(0.0, self.settings.estimate_sigma))
        self.running.append(JobRun(job, self.now, pods, list(placements), estimate_factor=factor))

    # --- one step of data and compute -------------------------------------------------------

    def advance(self, step: float) -> bool:
        """Move data and compute on by ``step`` seconds; True when a job ended or a load did."""
        pods = [pod for run in self.running for pod in run.pods]
        copies = complete_copies(self.caches) if self.policy.peers else {}
        flows = [Flow(pod.demand, pod_links(pod, copies, self.policy.peers)) for pod in pods]
        capacity = link_capacity(self.settings.plane, self.caches)
        for pod, flow, rate in zip(pods, flows, max_min_rates(flows, capacity), strict=True):
            pod.rate = rate
            for link in flow.links:
                capacity[link] = max(0.0, capacity[link] - rate)
        changed = self._advance_loads(step, capacity, copies)
        if self.pending and self.now < self.window_end:
            total = int(self.state.gpu_count.sum())
            free = int(self.state.gpu_free_total.sum()) // 1000
            self.busy_allocated_gpu_s += (total - free) * step
            self.busy_capacity_gpu_s += total * step
        for run in self.running:
            self._advance_job(run, step)
        ended = [run for run in self.running if run.progress_s >= run.job.duration_s]
        for run in ended:
            self._finish(run, step)
        return changed or bool(ended)

    def _advance_loads(
        self, step: float, capacity: dict[Hashable, float], copies: dict[str, list[str]]
    ) -> bool:
        keys = list(self.loads)
        peers = self.policy.peers
        flows = [Flow(INFINITE, remote_links(node, name, copies, peers)) for node, name in keys]
        done = False
        for key, flow, rate in zip(keys, flows, max_min_rates(flows, capacity), strict=True):
            entry = self.loads[key]
            copied = min(rate * step, entry.dataset.size_bytes - entry.bytes)
            entry.bytes += copied
            if "source" in flow.links:
                self.source_bytes += copied
            if entry.complete:
                entry.loading = False
                del self.loads[key]
                done = True
        return done

    def _advance_job(self, run: JobRun, step: float) -> None:
        speed = min(min(1.0, pod.rate / pod.demand) for pod in run.pods)
        gpus = run.job.gpus
        size = run.job.dataset.size_bytes
        first_pass = min(pod.consumed for pod in run.pods) < size
        run.progress_s += speed * step
        run.stall_gpu_s += (1.0 - speed) * gpus * step
        if first_pass:
            run.first_pass_stall_s += (1.0 - speed) * step
        in_window = max(0.0, min(step, self.window_end - self.now))
        self.allocated_gpu_s += gpus * in_window
        self.computing_gpu_s += speed * gpus * in_window
        for pod in run.pods:
            read = speed * pod.demand * step
            if pod.path == "source":
                # A pod filling its cache reads the rest of the pass from there once it is in.
                filling = pod.entry is not None and pod.consumed < size
                self.source_bytes += min(read, size - pod.consumed) if filling else read
            pod.consumed += read
            if pod.entry is not None:
                pod.entry.last_used = self.now + step
                if pod.path != "cache" and not pod.entry.complete:
                    pod.entry.bytes = min(float(size), max(pod.entry.bytes, pod.consumed))

    def _finish(self, run: JobRun, step: float) -> None:
        for placement in run.placements:
            assert isinstance(placement, Placement)
            self.state.release(placement)
        for pod in run.pods:
            if pod.entry is not None:
                pod.entry.readers -= 1
        self.running.remove(run)
        job = run.job
        self.results.append(
            JobResult(
                job.name,
                job.gpus,
                job.submit_s,
                run.start_s,
                self.now + step,
                run.stall_gpu_s,
                run.first_pass_stall_s,
            )
        )
