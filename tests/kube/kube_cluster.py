"""The tests' real cluster: kube-apiserver 1.37 and etcd started once per test session by
scripts/kube_cluster.sh (binaries built by scripts/kube_build.sh), with kwok playing the
kubelet of KWOK nodes. Each test gets it cleaned (``Cluster.reset``): its namespaces emptied,
the two GPU nodes gpu-a and gpu-b and their ResourceSlices made anew.

What a test writes through ``Cluster`` is waited for until the backends the test made
(``watchers``) have seen it through their informers' watches, as a cycle run at once after a
write on a real cluster could not rely on; the backend is level-triggered, and a test checks
what it does with the world it saw.
``Cluster`` is what a test does as the cluster's other parties: an admin creating objects, the
kubelet of gpu-a and gpu-b (``set_pod_phase`` writes pod status as the kubelet does; ``logs``
is served to the API server from a small HTTPS endpoint the nodes name as their kubelet, so
``pods/log`` goes through the real API server), another scheduler (``allocate``). What the
backend sent is read from the API server's audit log (``requests``), with each answer's code.
aipaas talks to it as the user ``aipaas``, holding only deploy/kubernetes/rbac.yaml's
ClusterRole: a request that role does not allow is refused as on a real cluster.
"""

from __future__ import annotations

import builtins
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from aipaas.backends.kubernetes.api import ApiError, KubeApi
from aipaas.backends.kubernetes.fake_dra import DEVICE_CLASS
from aipaas.backends.kubernetes.fencing import FENCE_NAME
from aipaas.backends.kubernetes.options import KubeOptions

if TYPE_CHECKING:
    from aipaas.backends.kubernetes.backend import KubernetesBackend

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "kube_cluster.sh"
RBAC = ROOT / "deploy" / "kubernetes" / "rbac.yaml"
NAMESPACES = ("acme", "beta", "other", "team-acme")
NODES = ("gpu-a", "gpu-b")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class Request:
    """One request the API server answered, from its audit log."""

    user: str
    verb: str
    path: str
    code: int
    resource: str
    subresource: str
    group: str = ""
    body: dict[str, Any] | None = None  # pods/binding only (the audit policy's Request level)


class Kubelet:
    """The kubelet endpoint of the test nodes, as far as the API server asks it: container
    logs (GET /containerLogs/NS/POD/CONTAINER), over HTTPS with the cluster's serving key."""

    def __init__(self, pki: Path) -> None:
        self.logs: dict[tuple[str, str], str] = {}
        logs = self.logs

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = self.path.split("?")[0].strip("/").split("/")
                text = None
                if len(parts) >= 3 and parts[0] == "containerLogs":
                    text = logs.get((parts[1], parts[2]))
                body = (text if text is not None else "").encode()
                self.send_response(200 if text is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki / "serving.crt", pki / "serving.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def gpu_node(
    name: str, kubelet_port: int, *, rack: str = "r1", ready: bool = True
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": "z1",
                "topology.aipaas.dev/rack": rack,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            },
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        },
    }


class Cluster:
    def __init__(self, state: Path, bin_dir: Path) -> None:
        self.state = state
        self.bin = bin_dir
        self.kubeconfig = state / "admin.kubeconfig"
        self.aipaas_kubeconfig = state / "aipaas.kubeconfig"
        self.admin = KubeApi.connect(KubeOptions(kubeconfig=str(self.kubeconfig)))
        self.kubelet = Kubelet(state / "pki")
        self.logs = self.kubelet.logs
        self.version = str(self.admin.version()["gitVersion"])
        self._audit_offset = 0
        self.watchers: list[KubernetesBackend] = []

    # -- set-up ------------------------------------------------------------------------------

    def grant_aipaas(self) -> None:
        """The ClusterRole of deploy/kubernetes/rbac.yaml, bound to the user aipaas."""
        for document in yaml.safe_load_all(RBAC.read_text()):
            if document and document["kind"] == "ClusterRole":
                self.apply(document)
        self.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "aipaas-scheduler-test-user"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "aipaas-scheduler",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "aipaas"}
                ],
            }
        )

    def apply(self, document: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
        """Create, or replace what exists."""
        name = document["metadata"]["name"]
        namespace = document["metadata"].get("namespace")
        found = self.admin.get(kind or document["kind"], name, namespace)
        if found is None:
            return self.admin.create(document, kind)
        body = {**document, "metadata": {**document["metadata"], **_keep(found)}}
        from aipaas.backends.kubernetes.api import path

        url = path(kind or document["kind"], namespace, name)
        answer: dict[str, Any] = self.admin._send("PUT", url, body=body)
        return answer

    def seen(self, obj: dict[str, Any] | None, kind: str | None = None, gone: bool = False) -> None:
        """Wait until each watching backend's informer holds ``obj`` at its version (or, when
        ``gone``, no longer holds it)."""
        if not obj:
            return
        kind = kind or str(obj.get("kind"))
        meta = obj["metadata"]
        want = int(meta.get("resourceVersion") or 0)
        for backend in self.watchers:
            informer = (backend._informers or {}).get(kind)
            if informer is None or informer.stopped:
                continue  # not started (it lists afresh when first used), or closed
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                held = informer.get(meta.get("namespace") or "", meta["name"])
                if gone and held is None:
                    break
                version = int((held or {}).get("metadata", {}).get("resourceVersion") or -1)
                if not gone and version >= want:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError(f"the backend's {kind} informer did not see {meta['name']}")

    def reset(self) -> None:
        """Empty the test namespaces and make gpu-a and gpu-b (4 GPUs each) anew."""
        self.watchers.clear()
        for namespace in NAMESPACES:
            if self.admin.get("Namespace", namespace) is None:
                self.admin.create(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                )
        for kind in ("Pod", "ResourceClaim", "Event", "Service", "PodTemplate"):
            for obj in self.admin.list(kind):
                meta = obj["metadata"]
                if meta.get("namespace") in SYSTEM_NAMESPACES:
                    continue
                self.remove(kind, meta.get("namespace", ""), meta["name"])
        for crd_kind in ("PodGroup.scheduling.volcano.sh", "PodGroup.scheduling.x-k8s.io"):
            try:
                for obj in self.admin.list(crd_kind):
                    self.admin.delete(
                        crd_kind, obj["metadata"]["name"], obj["metadata"]["namespace"]
                    )
            except ApiError:
                pass  # its CRD is not installed
        for obj in self.admin.list("ResourceSlice"):
            self.admin.delete("ResourceSlice", obj["metadata"]["name"])
        # each test's controllers have stores of their own, whose lease tokens start at 1: the
        # mark an earlier test's controller left would fence them all (backends/kubernetes/
        # fencing.py), as it fences a new store against a cluster a different one ran
        self.admin.delete("ConfigMap", FENCE_NAME, "default")
        for obj in self.admin.list("Node"):
            self.remove("Node", "", obj["metadata"]["name"])
        self.apply(DEVICE_CLASS)
        for node in NODES:
            self.put(gpu_node(node, self.kubelet.port, rack="r1" if node == "gpu-a" else "r2"))
            self.put(gpu_slice(node, 4))
        self.logs.clear()
        self.mark_requests()

    # -- what others do ----------------------------------------------------------------------

    def put(self, obj: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
        """Create as an admin (a namespace that exists is left as it is)."""
        if obj["kind"] == "Namespace":
            found = self.admin.get("Namespace", obj["metadata"]["name"])
            if found is not None:
                return found
        created = self.admin.create(obj, kind)
        self.seen(created, kind)
        return created

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.admin.get(kind, name, namespace or None)

    def list(self, kind: str, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        found = self.admin.list(kind, namespace=namespace)
        return [o for o in found if o["metadata"].get("namespace") not in SYSTEM_NAMESPACES]

    def remove(self, kind: str, namespace: str, name: str) -> None:
        """Gone at once: finalizers dropped, no grace (an admin's forced delete)."""
        try:
            found = self.admin.get(kind, name, namespace or None)
            if found is not None and found["metadata"].get("finalizers"):
                self.admin.patch(kind, name, {"metadata": {"finalizers": None}}, namespace or None)
            self.admin.delete(kind, name, namespace or None, grace=0)
            self.seen(found, kind, gone=True)
        except ApiError as err:
            if err.code != 404:
                raise

    def set_pod_phase(
        self, namespace: str, name: str, phase: str, exit_code: int | None = None
    ) -> None:
        """What the kubelet reports: the phase and, once ended, the container's exit code."""
        pod = self.admin.get("Pod", name, namespace)
        assert pod is not None, f"no pod {namespace}/{name}"
        container = pod["spec"]["containers"][0]
        status: dict[str, Any] = {"phase": phase}
        if exit_code is not None:
            terminated = {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
            }
            status["containerStatuses"] = [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ]
        written = self.admin.patch("Pod", name, {"status": status}, namespace, subresource="status")
        self.seen(written, "Pod")

    def allocate(self, claim: str, namespace: str, status: dict[str, Any]) -> None:
        """Write a claim's status as another scheduler does."""
        found = self.admin.get("ResourceClaim", claim, namespace)
        assert found is not None
        self.seen(self.admin.replace_status({**found, "status": status}), "ResourceClaim")

    def events(self, namespace: str, pod: str) -> builtins.list[dict[str, Any]]:
        return [
            e
            for e in self.admin.list("Event", namespace=namespace)
            if (e.get("regarding") or {}).get("name") == pod
        ]

    # -- what was asked ----------------------------------------------------------------------

    def mark_requests(self) -> None:
        """``requests`` reads what came after this point."""
        audit = self.state / "audit.log"
        self._audit_offset = audit.stat().st_size if audit.exists() else 0

    def requests(self, user: str = "aipaas") -> builtins.list[Request]:
        """The requests ``user`` made since the mark, in the order the server answered."""
        time.sleep(0.05)
        out: builtins.list[Request] = []
        with (self.state / "audit.log").open() as audit:
            audit.seek(self._audit_offset)
            for line in audit:
                entry = json.loads(line)
                stage = entry.get("stage")
                # a watch is logged when it starts (it completes only when it ends)
                if stage != "ResponseComplete" and not (
                    stage == "ResponseStarted" and entry.get("verb") == "watch"
                ):
                    continue
                if entry.get("user", {}).get("username") != user:
                    continue
                ref = entry.get("objectRef") or {}
                out.append(
                    Request(
                        user=user,
                        verb=str(entry.get("verb")),
                        path=str(entry.get("requestURI", "")).split("?")[0],
                        code=int((entry.get("responseStatus") or {}).get("code") or 0),
                        resource=str(ref.get("resource", "")),
                        subresource=str(ref.get("subresource", "")),
                        group=str(ref.get("apiGroup", "")),
                        body=entry.get("requestObject"),
                    )
                )
        return out

    def close(self) -> None:
        self.kubelet.close()
        self.admin.close()


def _keep(found: dict[str, Any]) -> dict[str, Any]:
    return {"resourceVersion": found["metadata"]["resourceVersion"]}


def gpu_slice(node: str, count: int) -> dict[str, Any]:
    from tests.kube.kube_objects import gpu_slice as shaped

    return shaped(node, count)


def start(state: Path) -> Iterator[Cluster]:
    """Start the cluster (scripts/kube_cluster.sh: kwok and an audit log), yield it, stop it."""
    env = {**os.environ, "AIPAAS_KUBE_STATE": str(state)}
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(state), "--kwok", "--audit"],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if started.returncode != 0:
        raise RuntimeError(f"kube_cluster.sh start failed:\n{started.stdout}\n{started.stderr}")
    cluster = Cluster(state, Path((state / "bin").read_text().strip()))
    try:
        cluster.grant_aipaas()
        yield cluster
    finally:
        cluster.close()
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, check=False)
