"""Scenarios several Kubernetes test modules start from: a 2-task gang with a claim per task
submitted to aipaas, and gangs of pods submitted to the cluster by others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.controller.cycle import Controller
from aipaas.controller.kube_import import KubeImport
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import user_pod
from tests.support.ctl_world import World

EXAMPLES = Path(__file__).parents[2] / "examples" / "dra"
TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus, namespace: acme}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""
GANG = """    - name: worker
      replicas: 2
      command: [python, train.py]
      env: {EPOCHS: "3"}
      resources:
        cpu: 4
        memory: 16Gi
        claims: [{name: gpus, resourceClaimTemplateName: two-gpus}]
"""
IMAGE = "{kubernetes.aipaas.dev/image: 'nvcr.io/nvidia/pytorch:25.01-py3'}"


def start_gang(world: World, backend: KubernetesBackend) -> Controller:
    world.setup()
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    controller = world.controller(backend, inventory_seconds=0)
    controller.run_cycle()  # the cluster's slices are published
    world.service.apply_text(TEMPLATE)
    world.submit("train", GANG, extra="  minAvailable: 2\n", annotations=IMAGE)
    controller.run_cycle()
    return controller


def gpu_claim(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "acme"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
    }


def controller_for(world: World, backend: KubernetesBackend) -> Controller:
    world.setup("{gpu: 100, cpu: 640, memory: 4Ti}")
    world.service.apply_text((EXAMPLES / "nvidia-classes.yaml").read_text())
    return world.controller(
        backend,
        inventory_seconds=0,
        extensions=[KubeImport("research", settle_seconds=0, every_seconds=0)],
    )


def submit_gang(cluster: Cluster, group: str, size: int, gpus: int, **options: Any) -> list[str]:
    names = []
    for i in range(size):
        name = f"{group}-{i}"
        cluster.put(gpu_claim(f"{name}-gpu", gpus))
        pod = user_pod(name, group=group, claim=f"{name}-gpu", **options)
        cluster.put(pod)
        names.append(name)
    return names
