"""The backend's informers on the real API server: one list, then a watch that brings every
change; a watch from a version etcd has compacted away is answered 410 Gone and the informer
lists again; and cycles of the controller read the cluster from memory (no list per cycle)."""

from __future__ import annotations

import time

import httpx

from aipaas.backends.kubernetes.api import Gone
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.backends.kubernetes.informer import Informer
from tests.kube.kube_cluster import Cluster, gpu_node
from tests.support.ctl_world import World

ONE = """    - name: main
      command: [sh, -c, "echo hello"]
      resources: {cpu: 1, memory: 1Gi}
"""


def wait(done: object, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(done) and done():
            return
        time.sleep(0.02)
    raise AssertionError("not reached in time")


def test_an_informer_lists_once_then_sees_changes_through_its_watch(cluster: Cluster) -> None:
    informer = Informer(cluster.admin, "Node").start()
    assert informer.wait_synced(10)
    assert {n["metadata"]["name"] for n in informer.items()} == {"gpu-a", "gpu-b"}
    cluster.put(gpu_node("gpu-c", cluster.kubelet.port))
    wait(lambda: informer.get("", "gpu-c") is not None)
    cluster.remove("Node", "", "gpu-c")
    wait(lambda: informer.get("", "gpu-c") is None)
    assert informer.lists == 1 and informer.events >= 2
    informer.stop()


def template(name: str, note: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "acme", "labels": {"note": note}},
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    }


def test_a_watch_from_a_compacted_version_is_gone_and_the_informer_lists_again(
    cluster: Cluster,
) -> None:
    """On PodTemplates, which the test cluster serves straight from etcd (no watch cache,
    whose window would answer an old version from memory): history compacted in etcd."""
    first = cluster.admin.create(template("t1", "0"))
    old = first["metadata"]["resourceVersion"]
    for i in range(1, 4):
        written = cluster.admin.patch(
            "PodTemplate", "t1", {"metadata": {"labels": {"note": str(i)}}}, "acme"
        )
    etcd = (cluster.state / "etcd-url").read_text().strip()
    revision = written["metadata"]["resourceVersion"]
    answer = httpx.post(f"{etcd}/v3/kv/compaction", json={"revision": revision, "physical": True})
    assert answer.status_code == 200, answer.text
    try:
        list(cluster.admin.watch("PodTemplate", old, timeout_seconds=1))
        raise AssertionError("a watch from a compacted version was not refused")
    except Gone as gone:
        assert gone.code == 410
    informer = Informer(cluster.admin, "PodTemplate", version=old).start()  # an old watch resumed
    wait(lambda: informer.lists == 1)
    held = informer.get("acme", "t1")
    assert held is not None and held["metadata"]["labels"]["note"] == "3"
    informer.stop()
    cluster.admin.delete("PodTemplate", "t1", "acme")


def test_controller_cycles_read_the_cluster_from_memory(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("quiet", ONE)
    controller.run_cycle()  # informers start: each kind listed once
    cluster.mark_requests()
    for _ in range(10):
        controller.run_cycle()
    lists = [r for r in cluster.requests() if r.verb == "list"]
    assert lists == []
