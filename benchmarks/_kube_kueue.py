"""Kueue beside kube-scheduler on one of benchmarks/kube_side_by_side.py's fresh clusters: the
"kube-scheduler + Kueue" rows (issue 26).

Kueue v0.17.0 is built from its Go module by scripts/kueue_build.sh; its CRDs and webhook
manifests are read from that module in the Go module cache, nothing of it is copied here. Kueue
runs out of cluster as its own process: a client certificate of its own (user ``kueue`` in
system:masters, the cluster's admin group: a benchmark's shortcut for Kueue's ClusterRole) so
that the audit log tells its requests apart, a Configuration file (config.kueue.x-k8s.io/v1beta2)
with internal certificate management off, its webhook server on 127.0.0.1 with a serving
certificate signed by the cluster's CA, the ``pod`` integration only, leader election off. Kueue's
webhooks for pods and for its own kinds are registered with ``clientConfig.url`` pointing there.

Kueue is an admission layer: its pod webhook gates each pod (schedulingGates) that names a
LocalQueue, it admits a pod's Workload (or a plain pod group's, all members at once) when the
ClusterQueue's quota has room, and removes the gate; kube-scheduler binds. Kueue 0.17 counts DRA
devices in quota only for ResourceClaimTemplates (pkg/dra/claims.go skips claims named by
resourceClaimName), and templates become claims only in the controller manager, which these
clusters do not run; so the quota counts pods, set to the GPUs of the cluster divided by the GPUs
each pod claims: what fits is admitted, the rest waits in the queue.

Who calls it: benchmarks/kube_side_by_side.py.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "scripts" / "kueue_build.sh"
#: the user of Kueue's client certificate (the audit log's username for its requests)
USER = "kueue"
LOCAL_QUEUE = "bench"
CLUSTER_QUEUE = "bench"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
#: the webhooks registered: Kueue's for pods and for its own kinds (the rest serve integrations
#: that are off)
WEBHOOK_GROUPS = ({""}, {"kueue.x-k8s.io"})


def queue_pod(document: dict[str, Any], group: str | None, members: int) -> dict[str, Any]:
    """``document`` (a pod for kube-scheduler) sent to Kueue's LocalQueue; with ``group``, a
    member of a Kueue plain pod group of ``members`` pods."""
    meta = document["metadata"]
    meta.setdefault("labels", {})[QUEUE_LABEL] = LOCAL_QUEUE
    if group is not None:
        meta["labels"][GROUP_LABEL] = group
        meta.setdefault("annotations", {})[GROUP_COUNT] = str(members)
    return document


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificate(pki: Path, name: str, subject: str, extensions: list[str]) -> None:
    """A key and certificate signed by the cluster's CA (as scripts/kube_cluster.sh makes its
    own)."""
    key, csr, ext = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.ext"
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", subject,
    )  # fmt: skip
    ext.write_text("\n".join(["basicConstraints=CA:FALSE", *extensions]) + "\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
        "-CAcreateserial", "-days", "30", "-extfile", str(ext), "-out", str(pki / f"{name}.crt"),
    )  # fmt: skip
    csr.unlink()
    ext.unlink()


def _kubectl(state: Path, *args: str, text: str | None = None) -> str:
    kubectl = Path((state / "bin").read_text().strip()) / "kubectl"
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(state / "admin.kubeconfig"), *args],
        input=text,
        text=True,
        capture_output=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


def _apply(state: Path, documents: list[dict[str, Any]]) -> None:
    _kubectl(state, "apply", "--server-side", "-f", "-", text=yaml.safe_dump_all(documents))


def _webhooks(module: Path, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for pods and its own kinds, each pointing at ``url``."""
    manifests = module / "config" / "components" / "webhook" / "manifests.yaml"
    out = []
    for document in yaml.safe_load_all(manifests.read_text()):
        if not document:
            continue
        kept = []
        for hook in document["webhooks"]:
            if set(hook["rules"][0]["apiGroups"]) not in WEBHOOK_GROUPS:
                continue
            hook["clientConfig"] = {
                "url": url + hook["clientConfig"]["service"]["path"],
                "caBundle": ca_bundle,
            }
            # as Kueue's kustomization does: never in the way of the system's own pods
            hook["namespaceSelector"] = {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", "kueue-system"],
                    }
                ]
            }
            kept.append(hook)
        document["metadata"]["name"] = "kueue-" + document["metadata"]["name"]
        document["webhooks"] = kept
        out.append(document)
    return out


def _queues(namespace: str, pods: int) -> list[dict[str, Any]]:
    group = "kueue.x-k8s.io/v1beta2"
    return [
        {"apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": group,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "pods"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100000"},
                                    {"name": "memory", "nominalQuota": "100000Ti"},
                                    {"name": "pods", "nominalQuota": str(pods)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": group,
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        },
    ]


def _wait(what: str, ready: Any, process: subprocess.Popen[bytes], log: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            if ready():
                return
        except (OSError, httpx.TransportError):
            pass
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    raise RuntimeError(f"{what}: Kueue did not come up; its log:\n{tail}")


@contextmanager
def kueue(state: Path, namespace: str, pods: int) -> Iterator[int]:
    """Kueue on the cluster in ``state`` (started by scripts/kube_cluster.sh, ``namespace``
    made), with a LocalQueue in ``namespace`` and a ClusterQueue admitting ``pods`` pods at
    once; yields Kueue's pid."""
    binary = subprocess.run(["bash", str(BUILD)], check=True, capture_output=True, text=True)
    module_dir = subprocess.run(
        ["bash", str(BUILD), "--print-module"], check=True, capture_output=True, text=True
    )
    module = Path(module_dir.stdout.strip())
    pki = state / "pki"
    _certificate(pki, "kueue", f"/O=system:masters/CN={USER}", ["extendedKeyUsage=clientAuth",
                 "keyUsage=critical,digitalSignature,keyEncipherment"])  # fmt: skip
    _certificate(pki, "kueue-webhook", "/CN=kueue-webhook", [
        "keyUsage=critical,digitalSignature,keyEncipherment", "extendedKeyUsage=serverAuth",
        "subjectAltName=IP:127.0.0.1",
    ])  # fmt: skip
    certs = state / "kueue-certs"  # controller-runtime reads tls.crt and tls.key from here
    certs.mkdir(exist_ok=True)
    (certs / "tls.crt").write_bytes((pki / "kueue-webhook.crt").read_bytes())
    (certs / "tls.key").write_bytes((pki / "kueue-webhook.key").read_bytes())
    # Kueue 0.17 with its certificate management off reads a metrics certificate from this fixed
    # path (cmd/kueue/main.go) even when its metrics server is off, and exits without one
    metrics_certs = Path("/etc/kueue/metrics/certs")
    metrics_certs.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (metrics_certs / name).write_bytes((certs / name).read_bytes())
    admin = (state / "admin.kubeconfig").read_text()
    kubeconfig = state / "kueue.kubeconfig"
    kubeconfig.write_text(admin.replace("pki/admin.", "pki/kueue."))

    crds = module / "config" / "components" / "crd" / "bases"
    _kubectl(state, "apply", "--server-side", "-f", str(crds))
    _kubectl(state, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    _kubectl(state, "create", "namespace", "kueue-system")

    webhook_port, health_port = _free_port(), _free_port()
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "manageJobsWithoutQueueName": False,
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        # kube-scheduler here runs with --kube-api-qps 1000: the same for Kueue (its default is 50)
        "clientConnection": {"qps": 1000, "burst": 1000},
        "integrations": {"frameworks": ["pod"]},
        # the visibility API would need an APIService in front of it; nothing here reads it
        "featureGates": {"VisibilityOnDemand": False},
    }
    config_file = state / "kueue-config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    log = state / "log" / "kueue.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [binary.stdout.strip(), "--config", str(config_file), "--zap-log-level", "error"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=out,
            stderr=out,
        )
    try:
        health = f"http://127.0.0.1:{health_port}/readyz"
        _wait(
            "readyz",
            lambda: httpx.get(health, timeout=2).status_code == 200,
            process,
            log,
            120,
        )
        ca_bundle = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        _apply(state, _webhooks(module, f"https://127.0.0.1:{webhook_port}", ca_bundle))
        # the webhooks answer (a dry-run ResourceFlavor goes through them) before anything is made
        _wait(
            "webhooks",
            lambda: _dry_run(state, _queues(namespace, pods)[:1]),
            process,
            log,
            60,
        )
        _apply(state, _queues(namespace, pods))
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def _dry_run(state: Path, documents: list[dict[str, Any]]) -> bool:
    try:
        _kubectl(state, "create", "--dry-run=server", "-f", "-", text=yaml.safe_dump_all(documents))
    except RuntimeError:
        return False
    return True
