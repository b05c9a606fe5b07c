"""A headless Service per multi-pod job on a real kube-apiserver: the 2-task gang's pods get
``hostname`` rank-<RANK> and ``subdomain`` the job's Service, MASTER_ADDR names rank 0's pod
by DNS (``rank-0.<service>.<namespace>.svc.cluster.local``, which cluster DNS answers for a
headless Service's pods, as it does for JobSet's), the Service selects exactly the job's pods,
a one-task job gets none, and a cancel takes the Service away with the pods."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.backend import KubernetesBackend
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_scenarios import start_gang
from tests.support.ctl_world import World

MASTER = "rank-0.train.acme.svc.cluster.local"


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def job_pods(cluster: Cluster, job: str) -> list[dict[str, Any]]:
    return [p for p in cluster.list("Pod") if p["metadata"]["labels"].get("aipaas.dev/job") == job]


def test_a_gang_gets_a_headless_service_and_names_rank_0_by_dns(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    start_gang(world, backend)
    pods = job_pods(cluster, "train")
    assert len(pods) == 2
    hosts = {env_of(p)["RANK"]: p["spec"]["hostname"] for p in pods}
    assert hosts == {"0": "rank-0", "1": "rank-1"}
    assert {p["spec"]["subdomain"] for p in pods} == {"train"}
    assert {env_of(p)["MASTER_ADDR"] for p in pods} == {MASTER}
    service = cluster.get("Service", "acme", "train")
    assert service is not None
    assert service["spec"]["clusterIP"] == "None"  # headless: DNS answers the pods' IPs
    assert service["spec"]["publishNotReadyAddresses"] is True
    selector = service["spec"]["selector"]
    everyone = cluster.list("Pod", "acme")
    selected = [
        p["metadata"]["name"]
        for p in everyone
        if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    assert sorted(selected) == sorted(p["metadata"]["name"] for p in pods)


def test_a_one_task_job_gets_no_service(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("solo", "    - {name: main, command: [python, run.py], resources: {cpu: 1}}\n")
    for _ in range(2):
        controller.run_cycle()
    (pod,) = job_pods(cluster, "solo")
    assert "subdomain" not in pod["spec"] and "hostname" not in pod["spec"]
    assert cluster.list("Service", "acme") == []


def test_cancelling_the_job_deletes_its_service(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = start_gang(world, backend)
    assert cluster.get("Service", "acme", "train") is not None
    world.service.cancel("train", "acme")
    for _ in range(4):
        controller.run_cycle()
        if cluster.get("Service", "acme", "train") is None:
            break
    assert cluster.get("Service", "acme", "train") is None
