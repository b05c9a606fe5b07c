"""aipaas's DRA allocations against the real kube-scheduler's, on one real cluster.

This module starts a cluster of its own (scripts/kube_cluster.sh ``--scheduler --kwok
--audit``: kube-apiserver, kube-scheduler with its default profile, its DRA plugin on, and
kwok, all v1.37.2), since the session's cluster runs no kube-scheduler. For each case the test
publishes ResourceSlices as a DRA driver would (driver ``gpu.nvidia.com``, NVIDIA's attribute
names), then creates the same claims and pods twice: first with ``schedulerName:
default-scheduler`` (kube-scheduler's DRA plugin allocates), then, once those are gone, with
``schedulerName: aipaas`` (aipaas imports the pods and allocates through the Kubernetes
backend). The two claims' ``status.allocation`` are compared: the keys of the allocation and of
each result, the request names ("parent/subrequest" for firstAvailable), driver, pool,
adminAccess, tolerations, the nodeSelector and ``devices.config``; the device itself only as
one of the same candidates (of equal devices either may be picked).

Feature gates: none is passed. With kube-scheduler and kube-apiserver v1.37.2,
DRAPrioritizedList and DRAAdminAccess are GA and locked on, DRADeviceTaints is GA (on by
default), DRAPartitionableDevices and DRAConsumableCapacity are beta and on by default (each
binary's ``--feature-gates`` answers so), so the cluster starts with the defaults the other
tests use.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.controller.cycle import Controller
from tests.kube.kube_cluster import SCRIPT, Cluster
from tests.kube.kube_objects import DRIVER, user_pod
from tests.kube.kube_scenarios import EXAMPLES, controller_for
from tests.support.ctl_world import World

NODE = "gpu-a"
POOL = NODE
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
TAINT = {"key": "gpu.nvidia.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster with kube-scheduler running, for this module only (stopped at its end)."""
    state = tmp_path_factory.mktemp("kube-scheduler-cluster")
    env = {**os.environ, "AIPAAS_KUBE_STATE": str(state)}
    command = ["bash", str(SCRIPT), "start", str(state), "--scheduler", "--kwok", "--audit"]
    started = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if started.returncode != 0:
        raise RuntimeError(f"kube_cluster.sh start failed:\n{started.stdout}\n{started.stderr}")
    cluster = Cluster(state, Path((state / "bin").read_text().strip()))
    try:
        cluster.grant_aipaas()
        yield cluster
    finally:
        cluster.close()
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, check=False)


# -- what the driver publishes -------------------------------------------------------------------


def device(name: str, kind: str = "gpu", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": kind},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "uuid": {"string": f"GPU-{NODE}-{name}"},
        },
        "capacity": {"memory": {"value": "80Gi" if kind == "gpu" else "40Gi"}},
        **extra,
    }


def resource_slice(
    name: str, devices: list[dict[str, Any]], *, count: int = 1, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": POOL, "generation": 1, "resourceSliceCount": count},
            # a slice holds devices or counter sets, never both (the server refuses it)
            **({"devices": devices} if devices else {}),
            **spec,
        },
    }


def publish(cluster: Cluster, *slices: dict[str, Any]) -> None:
    """Only gpu-a publishes devices, only these (so both schedulers choose the same node)."""
    for found in cluster.admin.list("ResourceSlice"):
        cluster.remove("ResourceSlice", "", found["metadata"]["name"])
    for document in yaml.safe_load_all((EXAMPLES / "nvidia-classes.yaml").read_text()):
        cluster.apply(document)  # the MIG class too: kube-scheduler reads the cluster's classes
    for made in slices:
        cluster.put(made)


def mig_partitions() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Three MIG-like 3g.40gb partitions of gpu-0, each consuming 40Gi and 3 compute slices of
    its counter set (80Gi, 7): any two fit, three do not."""
    partitions = [
        device(
            f"gpu-0-mig-3g-{i}",
            kind="mig",
            consumesCounters=[
                {
                    "counterSet": "gpu-0",
                    "counters": {"memory": {"value": "40Gi"}, "compute": {"value": "3"}},
                }
            ],
        )
        for i in range(3)
    ]
    counters = {
        "name": "gpu-0",
        "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}},
    }
    return partitions, counters


# -- the claims ----------------------------------------------------------------------------------


def claim(name: str, requests: list[dict[str, Any]], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "acme"},
        "spec": {"devices": {"requests": requests, **devices}},
    }


def exactly(name: str, device_class: str = DRIVER, **fields: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **fields}}


# -- the two schedulers --------------------------------------------------------------------------

Claim = dict[str, Any]


class Round:
    """One scheduler's run of a case: it submits pods (each with its own claim) and waits
    until each is bound, or refused where the case expects that."""

    def __init__(self, cluster: Cluster, scheduler: str, controller: Controller | None) -> None:
        self.cluster = cluster
        self.scheduler = scheduler
        self.controller = controller
        self.pods: list[str] = []

    def submit(self, *claims: Claim, bound: bool = True) -> None:
        for document in claims:
            name = document["metadata"]["name"]
            self.cluster.put(document)
            pod = user_pod(name, claim=name)
            pod["spec"]["schedulerName"] = self.scheduler
            self.cluster.put(pod)
            self.pods.append(name)
        self._settle([d["metadata"]["name"] for d in claims], bound)

    def _settle(self, names: list[str], bound: bool) -> None:
        if self.controller is not None:
            for _ in range(4):
                self.controller.run_cycle()
            return
        # kube-scheduler: each pod is bound or, where the case expects it to wait, marked
        # unschedulable (PodScheduled False); a pod expected bound may be refused first, by a
        # scheduler whose informers have not seen the slices yet, and is then tried again
        deadline = time.monotonic() + 60
        waiting = set(names)
        while waiting and time.monotonic() < deadline:
            for name in sorted(waiting):
                pod = self.cluster.get("Pod", "acme", name) or {}
                conditions = (pod.get("status") or {}).get("conditions") or []
                refused = any(
                    c.get("type") == "PodScheduled" and c.get("status") == "False"
                    for c in conditions
                )
                if pod.get("spec", {}).get("nodeName") or (refused and not bound):
                    waiting.discard(name)
            time.sleep(0.1)
        assert not waiting, f"kube-scheduler neither bound nor refused {sorted(waiting)}"

    def node(self, name: str) -> str | None:
        pod = self.cluster.get("Pod", "acme", name) or {}
        found: str | None = pod.get("spec", {}).get("nodeName")
        return found

    def allocation(self, name: str) -> dict[str, Any] | None:
        found = self.cluster.get("ResourceClaim", "acme", name) or {}
        allocated: dict[str, Any] | None = (found.get("status") or {}).get("allocation")
        return allocated

    def clear(self) -> None:
        """Remove this round's pods and claims, so that the next round starts from the same
        devices."""
        # pods first, those still waiting first: a claim removed before a waiting pod would
        # free devices that kube-scheduler then gives that pod while the test clears
        for name in reversed(self.pods):
            self.cluster.remove("Pod", "acme", name)
        for name in self.pods:
            self.cluster.remove("ResourceClaim", "acme", name)


Case = Callable[[Round], dict[str, dict[str, Any] | None]]


def both(
    world: World, cluster: Cluster, backend: KubernetesBackend, case: Case
) -> tuple[dict[str, dict[str, Any] | None], dict[str, dict[str, Any] | None]]:
    """The case run by kube-scheduler, then by aipaas: each claim's allocation."""
    by_kube = Round(cluster, "default-scheduler", None)
    kube_allocations = case(by_kube)
    by_kube.clear()
    by_aipaas = Round(cluster, "aipaas", controller_for(world, backend))
    return kube_allocations, case(by_aipaas)


def shape(allocation: dict[str, Any] | None) -> Any:
    """What must be the same whoever allocated: everything but the device picked among equal
    ones, the share's id and the time of allocation."""
    if allocation is None:
        return None
    results = [
        {
            "keys": sorted(r),
            **{k: v for k, v in r.items() if k not in ("device", "shareID")},
        }
        for r in allocation["devices"]["results"]
    ]
    return {
        "keys": sorted(allocation),
        "devices": sorted(allocation["devices"]),
        "results": sorted(results, key=lambda r: str(r["request"])),
        "config": allocation["devices"].get("config"),
        "nodeSelector": allocation.get("nodeSelector"),
    }


def devices(allocation: dict[str, Any] | None) -> list[str]:
    return sorted(
        r["device"] for r in (allocation or {"devices": {"results": []}})["devices"]["results"]
    )


def assert_same(
    kube: dict[str, dict[str, Any] | None], aipaas: dict[str, dict[str, Any] | None]
) -> None:
    assert kube.keys() == aipaas.keys()
    for name in kube:
        written = json.dumps({"aipaas": aipaas[name], "kube-scheduler": kube[name]}, indent=1)
        assert shape(aipaas[name]) == shape(kube[name]), f"claim {name}: {written}"


# -- the cases -----------------------------------------------------------------------------------


def test_a_prioritized_list_takes_its_first_subrequest_that_fits(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """firstAvailable: three GPUs cannot be had (two exist), two can; the results name the
    request "gpu/two", and the configuration of the subrequest not taken is left out."""
    publish(cluster, resource_slice(f"{NODE}-gpus", [device("gpu-0"), device("gpu-1")]))
    # NVIDIA's driver's configuration form (the allocators copy it, none reads it)
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing"},
    }
    opaque = {"driver": DRIVER, "parameters": parameters}
    prioritized = claim(
        "prioritized",
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "three", "deviceClassName": DRIVER, "count": 3},
                    {"name": "two", "deviceClassName": DRIVER, "count": 2},
                ],
            }
        ],
        config=[
            {"requests": ["gpu/two"], "opaque": opaque},
            {"requests": ["gpu/three"], "opaque": opaque},
            {"requests": ["gpu"], "opaque": opaque},
        ],
    )

    def case(run: Round) -> dict[str, dict[str, Any] | None]:
        run.submit(prioritized)
        assert run.node("prioritized") == NODE
        return {"prioritized": run.allocation("prioritized")}

    kube, aipaas = both(world, cluster, backend, case)
    assert_same(kube, aipaas)
    for allocated in (kube, aipaas):
        assert devices(allocated["prioritized"]) == ["gpu-0", "gpu-1"]
        results = (allocated["prioritized"] or {})["devices"]["results"]
        assert {r["request"] for r in results} == {"gpu/two"}


def test_partitions_share_their_gpu_s_counters(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """Partitionable devices: three MIG-like partitions of one GPU, each consuming 40Gi and
    3 compute slices of its counter set (80Gi, 7): two fit, the third is allocated by
    neither scheduler."""
    partitions, counters = mig_partitions()
    publish(
        cluster,
        resource_slice(f"{NODE}-counters", [], count=2, sharedCounters=[counters]),
        resource_slice(f"{NODE}-partitions", partitions, count=2),
    )
    names = ("mig-one", "mig-two", "mig-three")
    claims = [claim(n, [exactly("mig", "mig.nvidia.com", count=1)]) for n in names]

    def case(run: Round) -> dict[str, dict[str, Any] | None]:
        run.submit(*claims[:2])
        run.submit(claims[2], bound=False)
        assert [run.node(n) for n in names] == [NODE, NODE, None]
        return {n: run.allocation(n) for n in names}

    kube, aipaas = both(world, cluster, backend, case)
    assert_same(kube, aipaas)
    every = {d["name"] for d in partitions}
    for allocated in (kube, aipaas):
        taken = devices(allocated["mig-one"]) + devices(allocated["mig-two"])
        assert len(set(taken)) == 2 and set(taken) <= every
        assert allocated["mig-three"] is None


def test_a_tainted_device_goes_only_to_a_claim_that_tolerates_it(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """A NoSchedule taint on the one GPU: a claim without a toleration is not allocated it,
    one with a matching toleration is, and its result carries the request's tolerations."""
    publish(cluster, resource_slice(f"{NODE}-gpus", [device("gpu-0", taints=[TAINT])]))
    toleration = {
        "key": TAINT["key"],
        "operator": "Equal",
        "value": "xid-79",
        "effect": "NoSchedule",
    }
    plain = claim("untolerated", [exactly("gpu", count=1)])
    tolerant = claim("tolerated", [exactly("gpu", count=1, tolerations=[toleration])])

    def case(run: Round) -> dict[str, dict[str, Any] | None]:
        run.submit(plain, bound=False)
        run.submit(tolerant)
        assert [run.node("untolerated"), run.node("tolerated")] == [None, NODE]
        return {
            "untolerated": run.allocation("untolerated"),
            "tolerated": run.allocation("tolerated"),
        }

    kube, aipaas = both(world, cluster, backend, case)
    assert_same(kube, aipaas)
    for allocated in (kube, aipaas):
        assert allocated["untolerated"] is None
        [result] = (allocated["tolerated"] or {})["devices"]["results"]
        assert result["device"] == "gpu-0" and result["tolerations"] == [toleration]


def test_partitions_kube_scheduler_holds_use_counters_aipaas_sees(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """Both schedulers on one GPU's partitions: the two kube-scheduler allocated take its
    counters, so aipaas does not allocate the third (the device left is free, the counters are
    not)."""
    partitions, counters = mig_partitions()
    publish(
        cluster,
        resource_slice(f"{NODE}-counters", [], count=2, sharedCounters=[counters]),
        resource_slice(f"{NODE}-partitions", partitions, count=2),
    )
    names = ("mig-one", "mig-two", "mig-three")
    claims = [claim(n, [exactly("mig", "mig.nvidia.com", count=1)]) for n in names]
    by_kube = Round(cluster, "default-scheduler", None)
    by_kube.submit(*claims[:2])
    assert [by_kube.node(n) for n in names[:2]] == [NODE, NODE]
    by_aipaas = Round(cluster, "aipaas", controller_for(world, backend))
    by_aipaas.submit(claims[2], bound=False)
    assert by_aipaas.node("mig-three") is None
    assert by_aipaas.allocation("mig-three") is None


def test_admin_access_takes_a_device_in_use(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """adminAccess in a namespace labelled for it: the one GPU, already allocated to another
    claim (by the same scheduler, before), is allocated again, with ``adminAccess: true`` in the
    result."""
    publish(cluster, resource_slice(f"{NODE}-gpus", [device("gpu-0")]))
    namespace = cluster.admin.get("Namespace", "acme") or {}
    labels = {**(namespace["metadata"].get("labels") or {}), ADMIN_LABEL: "true"}
    cluster.admin.patch("Namespace", "acme", {"metadata": {"labels": labels}})
    holder = claim("holder", [exactly("gpu", count=1)])
    monitor = claim("monitor", [exactly("gpu", count=1, adminAccess=True)])

    def case(run: Round) -> dict[str, dict[str, Any] | None]:
        run.submit(holder)
        run.submit(monitor)
        assert [run.node("holder"), run.node("monitor")] == [NODE, NODE]
        return {"holder": run.allocation("holder"), "monitor": run.allocation("monitor")}

    kube, aipaas = both(world, cluster, backend, case)
    assert_same(kube, aipaas)
    for allocated in (kube, aipaas):
        assert devices(allocated["holder"]) == ["gpu-0"]
        [result] = (allocated["monitor"] or {})["devices"]["results"]
        assert result["device"] == "gpu-0" and result["adminAccess"] is True


def test_admin_access_takes_a_device_kube_scheduler_holds(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """The one GPU allocated by kube-scheduler to one claim; a claim with adminAccess that
    aipaas schedules gets it too, as kube-scheduler's own second claim does in the case above,
    and an ordinary claim that aipaas schedules does not."""
    publish(cluster, resource_slice(f"{NODE}-gpus", [device("gpu-0")]))
    namespace = cluster.admin.get("Namespace", "acme") or {}
    labels = {**(namespace["metadata"].get("labels") or {}), ADMIN_LABEL: "true"}
    cluster.admin.patch("Namespace", "acme", {"metadata": {"labels": labels}})
    by_kube = Round(cluster, "default-scheduler", None)
    by_kube.submit(claim("holder", [exactly("gpu", count=1)]))
    assert devices(by_kube.allocation("holder")) == ["gpu-0"]
    by_aipaas = Round(cluster, "aipaas", controller_for(world, backend))
    by_aipaas.submit(claim("ordinary", [exactly("gpu", count=1)]), bound=False)
    assert by_aipaas.node("ordinary") is None and by_aipaas.allocation("ordinary") is None
    by_aipaas.submit(claim("monitor", [exactly("gpu", count=1, adminAccess=True)]))
    assert by_aipaas.node("monitor") == NODE
    [result] = (by_aipaas.allocation("monitor") or {})["devices"]["results"]
    assert result["device"] == "gpu-0" and result["adminAccess"] is True
