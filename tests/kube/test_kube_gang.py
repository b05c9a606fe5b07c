"""A 2-task gang with a DRA claim per task, placed by aipaas on a Kubernetes cluster: the pods,
bindings and claim allocations written are compared field by field with what the
kube-scheduler's DRA plugin writes (Kubernetes documentation: "Install and use DRA" tutorial and
the resource.k8s.io/v1 API reference: the finalizer resource.kubernetes.io/delete-protection,
status.allocation.devices.results[{request, driver, pool, device}], a nodeSelector matching the
node's metadata.name field, reservedFor [{resource: pods, name, uid}])."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.backend import KubernetesBackend
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_scenarios import EXAMPLES, GANG, start_gang
from tests.support.ctl_world import World


def expected_claim_status(node: str, devices: list[str], pod: dict[str, Any]) -> dict[str, Any]:
    """What the DRA plugin writes for a claim of one request ``gpus`` on ``node``."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d}
                    for d in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        ],
    }


def test_a_gang_becomes_bound_pods_with_allocated_claims(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    start_gang(world, backend)
    assert world.phase("train") in ("Pending", "Running")
    pods = [
        p for p in cluster.list("Pod") if p["metadata"]["labels"].get("aipaas.dev/job") == "train"
    ]
    assert len(pods) == 2
    seen_devices: set[tuple[str, str]] = set()
    for pod in pods:
        spec = pod["spec"]
        assert spec["schedulerName"] == "aipaas"
        assert spec["nodeName"] in ("gpu-a", "gpu-b")
        assert spec["restartPolicy"] == "Never"
        container = spec["containers"][0]
        assert container["image"] == "nvcr.io/nvidia/pytorch:25.01-py3"
        assert container["command"] == ["python", "train.py"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["EPOCHS"] == "3" and env["WORLD_SIZE"] == "2"
        # the API server keeps quantities in canonical form
        assert container["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
        assert container["resources"]["claims"] == [{"name": "claim-0"}]
        task = pod["metadata"]["labels"]["aipaas.dev/task"]
        claim_name = f"train-{task}-gpus"
        assert spec["resourceClaims"] == [{"name": "claim-0", "resourceClaimName": claim_name}]
        assert pod["metadata"]["namespace"] == "acme"
        assert pod["metadata"]["labels"]["aipaas.dev/tenant"] == "acme"

        claim = cluster.get("ResourceClaim", "acme", claim_name)
        assert claim is not None
        assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert claim["spec"] == {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 2,
                            "allocationMode": "ExactCount",  # the API server's default
                        },
                    }
                ]
            }
        }
        results = claim["status"]["allocation"]["devices"]["results"]
        devices = [r["device"] for r in results]
        status = claim["status"]
        assert status["allocation"].pop("allocationTimestamp")
        assert status == expected_claim_status(spec["nodeName"], devices, pod)
        seen_devices.update((spec["nodeName"], d) for d in devices)
    assert len(seen_devices) == 4  # no device given twice


def test_claims_are_written_before_the_binding_as_in_prebind(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    start_gang(world, backend)
    writes = [
        (r.verb, r.path) for r in cluster.requests() if r.verb not in ("get", "list", "watch")
    ]
    for pod in cluster.list("Pod"):
        name = pod["metadata"]["name"]
        claim = pod["spec"]["resourceClaims"][0]["resourceClaimName"]
        created = writes.index(("create", "/api/v1/namespaces/acme/pods"))
        status = writes.index(
            ("update", f"/apis/resource.k8s.io/v1/namespaces/acme/resourceclaims/{claim}/status")
        )
        bound = writes.index(("create", f"/api/v1/namespaces/acme/pods/{name}/binding"))
        assert created < status < bound


def test_the_real_api_server_accepts_every_write_of_a_gang(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """Admission, validation (the claims' allocation status included) and RBAC of a real
    kube-apiserver: nothing the backend sent was refused."""
    start_gang(world, backend)
    answered = cluster.requests()
    kinds = {(r.resource, r.subresource) for r in answered if r.verb in ("create", "update")}
    assert {("pods", ""), ("resourceclaims", ""), ("pods", "binding")} <= kinds
    assert ("resourceclaims", "status") in kinds
    writes = [r for r in answered if r.verb not in ("get", "list", "watch")]
    assert [r for r in writes if r.code >= 400] == []
    assert cluster.version.startswith("v1.37.")


def test_the_gpu_short_form_becomes_a_cluster_claim(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    controller.run_cycle()
    world.submit("short", "    - name: main\n      command: [x]\n      resources: {gpu: 2}\n")
    controller.run_cycle()
    [pod] = [p for p in cluster.list("Pod") if p["metadata"]["labels"]["aipaas.dev/job"] == "short"]
    print(world.job("short").status, pod["spec"])
    [ref] = pod["spec"]["resourceClaims"]
    claim = cluster.get("ResourceClaim", "acme", ref["resourceClaimName"])
    assert claim is not None and claim["metadata"]["labels"] == {"aipaas.dev/managed": "true"}
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {pod["spec"]["nodeName"]}
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})


def test_the_binding_is_the_one_the_scheduler_posts(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    start_gang(world, backend)
    bindings = [
        r.body for r in cluster.requests() if r.subresource == "binding" and r.body is not None
    ]
    pods = {p["metadata"]["name"]: p for p in cluster.list("Pod")}
    assert len(bindings) == 2
    for binding in bindings:
        pod = pods[binding["metadata"]["name"]]
        assert {k: v for k, v in binding.items() if k != "metadata"} | {
            "metadata": {k: v for k, v in binding["metadata"].items() if v}
        } == {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod["metadata"]["name"],
                "namespace": "acme",
                "uid": pod["metadata"]["uid"],
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": pod["spec"]["nodeName"]},
        }


SHARED_CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: acme}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""


def test_a_claim_shared_by_two_pods_is_allocated_once_and_reserved_for_both(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    controller = world.controller(backend, inventory_seconds=0)
    controller.run_cycle()
    world.service.apply_text(SHARED_CLAIM)
    world.submit(
        "both", GANG.replace("resourceClaimTemplateName: two-gpus", "resourceClaimName: shared")
    )
    controller.run_cycle()
    pods = [p for p in cluster.list("Pod") if p["metadata"]["labels"]["aipaas.dev/job"] == "both"]
    assert len(pods) == 2 and len({p["spec"]["nodeName"] for p in pods}) == 1
    claim = cluster.get("ResourceClaim", "acme", "shared")
    assert claim is not None
    assert sorted(r["uid"] for r in claim["status"]["reservedFor"]) == sorted(
        p["metadata"]["uid"] for p in pods
    )
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
    # the first pod to end leaves the claim to the other; the last one releases it
    cluster.set_pod_phase("acme", pods[0]["metadata"]["name"], "Succeeded", exit_code=0)
    controller.run_cycle()
    claim = cluster.get("ResourceClaim", "acme", "shared")
    assert claim is not None
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pods[1]["metadata"]["uid"]]
    assert claim["status"].get("allocation")
    cluster.set_pod_phase("acme", pods[1]["metadata"]["name"], "Succeeded", exit_code=0)
    controller.run_cycle()
    assert cluster.get("ResourceClaim", "acme", "shared") is None  # aipaas made it: deleted
