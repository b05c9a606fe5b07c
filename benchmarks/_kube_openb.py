"""Scenario (b) of benchmarks/kube_side_by_side.py: the openb default trace (shared data,
openb: the FGD paper's 1,213 GPU nodes and 8,152 pods) replayed as Kubernetes pods with DRA
claims until the first pod fails, and the GPU allocation at that point.

The nodes are KWOK nodes published by the fake DRA driver with their CPU, memory, GPU count
and model, each GPU a shareable device (``allowMultipleAllocations``, capacity ``compute``
0..100: DRA consumable capacity, KEP-5075). The pods come in the order the openb benchmarks
replay them (aipaas.sim.arrivals.paper_arrivals, seed 42, tune 1.3: the shuffled trace, then
resampled clones), each with its CPU and memory requests and, when it asks for GPUs, a
ResourceClaim of its own for one device of DeviceClass gpu.nvidia.com:
``capacity.requests.compute`` = the fraction in percent for a share of a GPU, ``count: N``
with ``compute: "100"`` (each device whole) otherwise. Both schedulers get the same
documents; only ``schedulerName`` differs.

The pods are created in chunks (``chunk`` pods, 8 clients); after each chunk the replay waits
until each of its pods is bound or was refused (a FailedScheduling event names it), then a
grace period, and stops after the first chunk with a pod still unbound: of those, the one
refused first is the first pod that failed. GPU allocation: the GPUs that the pods bound by
the moment of that pod's first refusal asked for (fractions counted as asked), over the
cluster's GPUs. A replay that reaches its time limit first, or whose chunk still has a pod
neither bound nor refused after ``wait`` seconds (the scheduler is too slow, the pod did not
fail), stops there; its allocation (all pods bound then) is a lower bound of the allocation at
the first failure.

Who calls it: benchmarks/kube_side_by_side.py (``--scenarios openb``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aipaas.backends.kubernetes.api import KubeApi
from aipaas.backends.kubernetes.fake_dra import FakeNode
from aipaas.scheduler.framework.types import PodRequest
from aipaas.sim.arrivals import paper_arrivals
from aipaas.sim.openb import load_nodes, load_pods

#: the trace's GPU models, as the nodes' productName
NODES_CSV = "openb_node_list_gpu_node.csv"
PODS_CSV = "openb_pod_list_default.csv"


@dataclass
class OpenbTrace:
    nodes: list[FakeNode]
    arrivals: list[PodRequest]
    total_gpus: int


def load_trace(
    data: Path, seed: int = 42, tune: float = 1.3, most_nodes: int | None = None
) -> OpenbTrace:
    """The trace's nodes (every k-th of them with ``most_nodes``, keeping the models' mix, for
    small trials) and the arrivals for their GPUs."""
    specs = load_nodes(data / NODES_CSV)
    if most_nodes is not None and most_nodes < len(specs):
        stride = -(-len(specs) // most_nodes)
        specs = specs[::stride]
    pods = load_pods(data / PODS_CSV, specs)
    total = sum(n.gpu_count for n in specs)
    arrivals = paper_arrivals(pods, total * 1000, seed, tune)
    nodes = [
        FakeNode(
            n.name,
            n.gpu_count,
            product=n.gpu_model,
            cpu=f"{n.cpu_milli}m",
            node_memory=f"{n.memory_mib}Mi",
            shared=True,
            # the trace packs many small pods on a node; the kubelet's default 110 is not
            # what the FGD paper's cluster limits
            max_pods=1000,
        )
        for n in specs
    ]
    return OpenbTrace(nodes, arrivals, total)


def pod_name(index: int) -> str:
    return f"o{index:05d}"


def claim_document(name: str, namespace: str, pod: PodRequest) -> dict[str, Any] | None:
    if not pod.gpu_count:
        return None
    share = pod.gpu_count == 1 and pod.gpu_milli < 1000
    compute = str(pod.gpu_milli // 10) if share else "100"
    exactly = {
        "deviceClassName": "gpu.nvidia.com",
        "count": 1 if share else pod.gpu_count,
        "capacity": {"requests": {"compute": compute}},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-gpu", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def pod_document(name: str, namespace: str, scheduler_name: str, pod: PodRequest) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": f"{max(pod.cpu_milli, 1)}m", "memory": f"{max(pod.memory_mib, 1)}Mi"}
    }
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}],
    }
    if pod.gpu_count:
        resources["claims"] = [{"name": "gpu"}]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "openb"}},
        "spec": spec,
    }


class RefusalWatcher:
    """One watch of the namespace's events: the pods a FailedScheduling event named."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api.fork()
        self.namespace = namespace
        self.refused: set[str] = set()
        #: pod name -> when its first refusal was seen (monotonic)
        self.when: dict[str, float] = {}
        #: pod name -> the last refusal's note (why)
        self.notes: dict[str, str] = {}
        self.stop = threading.Event()
        _, self.version = self.api.list_with_version("Event", namespace=namespace)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for event in self.api.watch("Event", self.version, timeout_seconds=30):
                    obj = event["object"]
                    self.version = obj["metadata"].get("resourceVersion", self.version)
                    if obj.get("reason") == "FailedScheduling":
                        regarding = obj.get("regarding") or {}
                        self.refused.add(str(regarding.get("name")))
                        self.when.setdefault(str(regarding.get("name")), time.monotonic())
                        self.notes[str(regarding.get("name"))] = str(obj.get("note", ""))
                    if self.stop.is_set():
                        return
            except Exception:  # a broken watch is started again
                time.sleep(0.1)


@dataclass
class ReplayOutcome:
    created: int = 0
    bound: int = 0
    gpus_bound: float = 0.0
    first_refused: str = ""
    why: str = ""
    #: the time limit ended the replay before any pod was refused
    timed_out: bool = False
    seconds: float = 0.0
    created_at: dict[str, float] = field(default_factory=dict)


def replay(
    api: KubeApi,
    bound_at: dict[str, float],
    namespace: str,
    scheduler_name: str,
    trace: OpenbTrace,
    *,
    chunk: int = 50,
    grace: float = 3.0,
    limit: float = 3600.0,
    wait: float = 300.0,
) -> ReplayOutcome:
    """Create the trace's pods chunk by chunk until a chunk ends with a pod refused (see the
    module's docstring), or for ``limit`` seconds. ``bound_at``: pod name -> when a watch saw
    it bound. The outcome counts the pods bound when the refused pod's first refusal was seen
    (all pods bound, when the limit ended it)."""
    refusals = RefusalWatcher(api, namespace)
    clients = [api.fork() for _ in range(8)]
    outcome = ReplayOutcome()
    started = time.monotonic()
    asked: dict[str, float] = {}
    try:
        for first in range(0, len(trace.arrivals), chunk):
            made = _create_chunk(clients, namespace, scheduler_name, trace.arrivals, first, chunk)
            for name, index, when in made:
                outcome.created_at[name] = when
                asked[name] = trace.arrivals[index].gpu_milli_total / 1000
            outcome.created += len(made)
            names = [name for name, _, _ in made]
            pending = _settle(bound_at, refusals.refused, names, grace, wait)
            refused = [n for n in pending if n in refusals.when]
            if refused:
                outcome.first_refused = min(refused, key=lambda n: refusals.when[n])
                outcome.why = refusals.notes.get(outcome.first_refused, "")
                break
            if pending:  # neither bound nor refused within ``wait``: too slow, not a failure
                outcome.timed_out = True
                break
            if time.monotonic() - started > limit:
                outcome.timed_out = True
                break
    finally:
        refusals.stop.set()
        for client in clients:
            client.close()
    until = refusals.when.get(outcome.first_refused, time.monotonic())
    outcome.seconds = until - started
    bound = [name for name in asked if bound_at.get(name, until + 1) <= until]
    outcome.bound = len(bound)
    outcome.gpus_bound = sum(asked[name] for name in bound)
    return outcome


def _create_chunk(
    clients: Sequence[KubeApi],
    namespace: str,
    scheduler_name: str,
    arrivals: Sequence[PodRequest],
    first: int,
    chunk: int,
) -> list[tuple[str, int, float]]:
    indices = list(range(first, min(first + chunk, len(arrivals))))

    def one(index: int) -> tuple[str, int, float]:
        client = clients[index % len(clients)]
        name = pod_name(index)
        claim = claim_document(name, namespace, arrivals[index])
        if claim is not None:
            client.create(claim)
        client.create(pod_document(name, namespace, scheduler_name, arrivals[index]))
        return name, index, time.monotonic()

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        return list(pool.map(one, indices))


def _settle(
    bound_at: dict[str, float],
    refused: set[str],
    names: Sequence[str],
    grace: float,
    wait: float,
) -> list[str]:
    """Wait until each pod is bound or refused (``wait`` seconds at most), then ``grace``
    seconds more while some are unbound; the pods still unbound, in creation order."""
    deadline = time.monotonic() + wait
    while any(n not in bound_at and n not in refused for n in names):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if all(n in bound_at for n in names):
            return []
        time.sleep(0.1)
    return [n for n in names if n not in bound_at]
