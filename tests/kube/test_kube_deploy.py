"""deploy/kubernetes: every manifest is valid against the Kubernetes 1.37 schemas in strict
mode (offline), and the ClusterRole grants exactly the verbs the backend was seen to use
against the API server (least privilege: nothing missing, nothing extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from aipaas.backends.kubernetes.backend import KubernetesBackend
from tests.kube.kube_cluster import Cluster, Request
from tests.kube.kube_scenarios import start_gang, submit_gang
from tests.support.ctl_world import World

DEPLOY = Path(__file__).parents[2] / "deploy" / "kubernetes"


def documents() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_manifest_is_valid_in_strict_mode(doc: dict[str, Any]) -> None:
    check_strictly_valid(doc)


def check_strictly_valid(doc: dict[str, Any]) -> None:
    """Raises (kubernetes_validate's ValidationError, naming the field) unless ``doc`` is valid
    against the 1.37 schemas with no unknown field."""
    kubernetes_validate.validate(doc, "1.37", strict=True)


def test_the_deployment_runs_the_backend_as_its_service_account() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in documents()}
    pod = docs[("Deployment", "aipaas")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "aipaas"
    assert ("ServiceAccount", "aipaas") in docs
    binding = docs[("ClusterRoleBinding", "aipaas-scheduler")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "aipaas", "namespace": "aipaas-system"}
    ]
    container = pod["containers"][0]
    assert container["args"][:3] == ["server", "--backend", "kubernetes"]
    secret = next(e for e in container["env"] if e["name"] == "AIPAAS_DB_URL")
    assert secret["valueFrom"]["secretKeyRef"] == {"name": "aipaas-postgres", "key": "url"}
    assert pod["securityContext"]["runAsNonRoot"] is True


def granted() -> set[tuple[str, str, str]]:
    role = next(d for d in documents() if d["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(requests: list[Request]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) of each request, as RBAC names them."""
    return {
        (r.group, r.resource + (f"/{r.subresource}" if r.subresource else ""), r.verb)
        for r in requests
    }


# granted though no request of this scenario names them: the API server checks
# resourceclaims/binding when a claim's status.allocation or reservedFor changes (1.36+); the
# coscheduling and KAI PodGroups are read for pods of those conventions, which this scenario
# does not make;
# a claim or a pod is read from the server only when the informer's copy is stale (a write
# conflicts) or a start finds its pod made already; the fencing ConfigMap is written only by
# a controller holding a lease (this world's has none: it reads the mark), as
# test_kube_fencing.py does as the user aipaas
IMPLIED = {
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "pods", "get"),
    ("resource.k8s.io", "resourceclaims/binding", "update"),
    ("scheduling.x-k8s.io", "podgroups", "get"),
    ("scheduling.run.ai", "podgroups", "get"),
    ("resource.k8s.io", "resourceclaims", "get"),
}


def test_the_cluster_role_grants_exactly_what_the_backend_uses(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    start_gang(world, backend)  # our own pods, claims allocated
    controller = with_import(world, backend)
    submit_gang(cluster, "theirs", 2, 1)  # others' pods: read, marked, bound
    for _ in range(4):
        controller.run_cycle()
    for pod in cluster.list("Pod"):
        cluster.logs[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = "done\n"
        cluster.set_pod_phase(pod["metadata"]["namespace"], pod["metadata"]["name"], "Running")
    controller.run_cycle()
    for record in world.store.list_objects("Job", "acme"):
        world.service.cancel(record.name, "acme")  # stops delete pods, release claims
    for _ in range(3):
        controller.run_cycle()
    backend.events.flush()
    requests = cluster.requests()
    assert [r for r in requests if r.code == 403] == []  # the role allowed everything asked
    assert used(requests) == granted() - IMPLIED


def with_import(world: World, backend: KubernetesBackend) -> Any:
    from aipaas.controller.kube_import import KubeImport

    return world.controller(
        backend,
        inventory_seconds=0,
        extensions=[KubeImport("research", settle_seconds=0, every_seconds=0)],
    )


def test_the_container_image_installs_the_kubernetes_extra_and_runs_unprivileged() -> None:
    text = (DEPLOY.parent / "Containerfile").read_text()
    assert "'.[kubernetes]'" in text and "USER 10001" in text
    assert 'CMD ["server", "--backend", "kubernetes"' in text
