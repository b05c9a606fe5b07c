"""What a server's settings decide about its Kubernetes backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: the schedulerName pods carry for aipaas to place them (ours and others')
SCHEDULER_NAME = "aipaas"
#: a job annotation naming its tasks' container image
IMAGE_ANNOTATION = "kubernetes.aipaas.dev/image"
DEFAULT_IMAGE = "python:3.12-slim"


@dataclass(frozen=True)
class KubeOptions:
    #: a kubeconfig file; None: in-cluster config, then $KUBECONFIG, then ~/.kube/config
    kubeconfig: str | None = None
    context: str | None = None
    #: tenant -> namespace where it differs from the tenant's name
    namespaces: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = SCHEDULER_NAME
    default_image: str = DEFAULT_IMAGE
    #: how often a running pod's log is copied to the task's log file (seconds)
    log_seconds: float = 10.0
    #: threads that carry out starts (create, allocate, bind) while the controller goes on,
    #: as kube-scheduler binds in goroutines of their own; 0: each start in the caller's
    #: thread, done when ``start`` returns
    start_workers: int = 32
    #: the cluster's DNS domain: a multi-pod job's ranks are ``rank-N.<job>.<namespace>.svc.``
    #: followed by it (backends/kubernetes/job_services.py)
    cluster_domain: str = "cluster.local"
    #: where the highest fencing token is kept (a ConfigMap ``aipaas-fencing``: fencing.py)
    fencing_namespace: str = "default"

    def namespace(self, tenant: str) -> str:
        return self.namespaces.get(tenant, tenant)

    def tenant(self, namespace: str) -> str | None:
        """The tenant a namespace belongs to (the inverse of ``namespace``); None for the
        namespace named like a tenant that is mapped elsewhere (it is not that tenant's)."""
        for tenant, mapped in self.namespaces.items():
            if mapped == namespace:
                return tenant
        return None if namespace in self.namespaces else namespace


def parse_namespaces(text: str) -> dict[str, str]:
    """``acme=team-acme,beta=ml-beta`` -> {tenant: namespace}; ValueError naming the bad pair."""
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        tenant, sep, namespace = pair.partition("=")
        if not sep or not tenant.strip() or not namespace.strip():
            raise ValueError(f"kube_namespaces: {pair!r} is not TENANT=NAMESPACE")
        out[tenant.strip()] = namespace.strip()
    return out
