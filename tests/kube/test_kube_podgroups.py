"""Pods that others create with ``schedulerName: aipaas`` and a PodGroup (Volcano's
scheduling.volcano.sh/v1beta1, KAI-Scheduler's scheduling.run.ai/v2alpha2, or the
scheduler-plugins' scheduling.x-k8s.io/v1alpha1) of minMember 4, on the real API server with
our own CRDs of those kinds: the group is bound all together or not at all (while fewer pods
than minMember exist, and when the whole group does not fit), and a Volcano or KAI group's
queue is the job's queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aipaas.api.job import Job
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.kubernetes.podgroups import COSCHEDULING, KAI, VOLCANO
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import user_pod
from tests.kube.kube_scenarios import controller_for, gpu_claim
from tests.support.ctl_world import World

CRDS = Path(__file__).parents[2] / "deploy" / "kube-build" / "podgroup-crds.yaml"


@pytest.fixture
def crds(cluster: Cluster) -> Cluster:
    for document in yaml.safe_load_all(CRDS.read_text()):
        cluster.apply(document)
    for kind in (VOLCANO, KAI, COSCHEDULING):  # served once the CRD is established
        for _ in range(100):
            try:
                cluster.admin.list(kind, namespace="acme")
                break
            except Exception:
                import time

                time.sleep(0.1)
    return cluster


def pod_group(kind: str, name: str, min_member: int, queue: str | None = None) -> dict[str, Any]:
    api_version = {
        VOLCANO: "scheduling.volcano.sh/v1beta1",
        KAI: "scheduling.run.ai/v2alpha2",
        COSCHEDULING: "scheduling.x-k8s.io/v1alpha1",
    }[kind]
    spec: dict[str, Any] = {"minMember": min_member}
    if queue:
        spec["queue"] = queue
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "acme"},
        "spec": spec,
    }


def member(kind: str, group: str, index: int, gpus: int) -> dict[str, Any]:
    name = f"{group}-{index}"
    pod = user_pod(name, claim=f"{name}-gpu")
    meta = pod["metadata"]
    if kind == VOLCANO:  # Volcano's pods name their group in an annotation
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    elif kind == KAI:  # KAI's pod grouper writes an annotation too
        meta["annotations"] = {"pod-group-name": group}
    else:  # the coscheduling plugin's in a label
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = group
    return pod


def add_members(cluster: Cluster, kind: str, group: str, indexes: range, gpus: int) -> None:
    for i in indexes:
        cluster.put(gpu_claim(f"{group}-{i}-gpu", gpus))
        cluster.put(member(kind, group, i, gpus))


def bound(cluster: Cluster, group: str, count: int) -> list[bool]:
    return [
        bool((cluster.get("Pod", "acme", f"{group}-{i}") or {})["spec"].get("nodeName"))
        for i in range(count)
    ]


@pytest.mark.parametrize(
    "kind", [VOLCANO, KAI, COSCHEDULING], ids=["volcano", "kai", "coscheduling"]
)
def test_a_group_of_min_member_4_waits_for_its_fourth_pod_then_binds_all(
    world: World, crds: Cluster, backend: KubernetesBackend, kind: str
) -> None:
    controller = controller_for(world, backend)
    crds.put(pod_group(kind, "four", 4), kind)
    add_members(crds, kind, "four", range(3), gpus=1)
    for _ in range(4):
        controller.run_cycle()
    assert bound(crds, "four", 3) == [False] * 3  # 3 of 4: none bound
    add_members(crds, kind, "four", range(3, 4), gpus=1)
    for _ in range(4):
        controller.run_cycle()
    assert bound(crds, "four", 4) == [True] * 4
    jobs = [j for j in world.store.list_objects("Job", "acme") if isinstance(j, Job)]
    assert [j.spec.min_available for j in jobs] == [4]


@pytest.mark.parametrize(
    "kind", [VOLCANO, KAI, COSCHEDULING], ids=["volcano", "kai", "coscheduling"]
)
def test_a_group_that_does_not_fit_whole_binds_no_pod(
    world: World, crds: Cluster, backend: KubernetesBackend, kind: str
) -> None:
    controller = controller_for(world, backend)
    crds.put(pod_group(kind, "big", 4), kind)
    add_members(crds, kind, "big", range(4), gpus=3)  # 4 x 3 GPUs on two nodes of 4: 2 fit
    for _ in range(6):
        controller.run_cycle()
    assert bound(crds, "big", 4) == [False] * 4


@pytest.mark.parametrize("kind", [VOLCANO, KAI], ids=["volcano", "kai"])
def test_a_group_names_the_queue_of_its_job(
    world: World, crds: Cluster, backend: KubernetesBackend, kind: str
) -> None:
    controller = controller_for(world, backend)
    world.service.apply_text(
        "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: batch, tenant: acme}\n"
    )
    crds.put(pod_group(kind, "queued", 2, queue="batch"), kind)
    add_members(crds, kind, "queued", range(2), gpus=1)
    for _ in range(4):
        controller.run_cycle()
    [job] = [j for j in world.store.list_objects("Job", "acme") if isinstance(j, Job)]
    assert job.spec.queue == "batch"
    assert bound(crds, "queued", 2) == [True, True]
