"""A task's life on the cluster: its pod ends (exit codes, logs, claims released), a restarted
server adopts its pods by label without starting duplicates, a removed node loses its tasks,
and a stop deletes the pod while keeping its end readable."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aipaas.backends.base import LaunchRequest, TaskState
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.store import TaskRepository
from tests.kube.kube_backend import make_backend
from tests.kube.kube_cluster import Cluster
from tests.support.ctl_world import World

ONE = """    - name: main
      command: [sh, -c, "echo hello"]
      resources: {cpu: 1, memory: 1Gi}
"""
PAIR = ONE.replace("- name: main", "- name: worker\n      replicas: 2")


def pods_of(cluster: Cluster, job: str) -> list[dict]:  # type: ignore[type-arg]
    return [p for p in cluster.list("Pod") if p["metadata"]["labels"].get("aipaas.dev/job") == job]


def test_a_pod_that_succeeds_ends_its_task_with_its_log(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("hello", ONE)
    controller.run_cycle()
    [pod] = pods_of(cluster, "hello")
    name = pod["metadata"]["name"]
    cluster.logs[("acme", name)] = "hello\n"
    cluster.set_pod_phase("acme", name, "Running")
    controller.run_cycle()
    assert world.phase("hello") == "Running"
    cluster.set_pod_phase("acme", name, "Succeeded", exit_code=0)
    controller.run_cycle()
    assert world.phase("hello") == "Succeeded"
    log_file = Path(pod["metadata"]["annotations"]["aipaas.dev/log-path"])
    assert log_file.read_text() == "hello\n"


def test_a_failed_container_reports_its_exit_code(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("crash", ONE)
    controller.run_cycle()
    [pod] = pods_of(cluster, "crash")
    cluster.set_pod_phase("acme", pod["metadata"]["name"], "Failed", exit_code=3)
    controller.run_cycle()
    status = world.job("crash").status
    assert status is not None and status.phase.value == "Failed"
    tasks = TaskRepository(world.store).for_job(world.job("crash").metadata.uid or "")
    assert [t.exit_code for t in tasks] == [3]


def test_a_restarted_server_adopts_its_pods_without_duplicates(
    world: World, cluster: Cluster, tmp_path: Path
) -> None:
    world.setup()
    first = make_backend(cluster, tmp_path)
    controller = world.controller(first, inventory_seconds=0)
    world.submit("pair", PAIR)
    controller.run_cycle()
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(cluster, "pair")}
    assert len(before) == 2
    first.close()
    # a new process: a new backend and controller over the same store and cluster
    second = make_backend(cluster, tmp_path)
    restarted = world.controller(second, inventory_seconds=0)
    for name in before:
        cluster.set_pod_phase("acme", name, "Running")
    restarted.run_cycle()
    restarted.run_cycle()
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(cluster, "pair")}
    assert after == before
    assert world.phase("pair") == "Running"
    second.close()


def test_a_second_start_of_the_same_request_creates_nothing(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    request = LaunchRequest(
        request_id="uid-1.main-0.0",
        task="main-0",
        job="again",
        tenant="acme",
        node="gpu-a",
        command=("true",),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
        labels={"team": "vision", "example.com/run": "r-1", "bad key": "x", "long": "v" * 64},
    )
    backend.start(request)
    backend.start(request)
    labels = pods_of(cluster, "again")[0]["metadata"]["labels"]
    assert labels["team"] == "vision" and labels["example.com/run"] == "r-1"
    assert "bad key" not in labels and "long" not in labels  # what Kubernetes refuses: left off
    assert len(pods_of(cluster, "again")) == 1
    assert [p["spec"]["nodeName"] for p in pods_of(cluster, "again")] == ["gpu-a"]
    assert backend.status(["uid-1.main-0.0"])["uid-1.main-0.0"].state is TaskState.RUNNING


def test_a_pod_left_unbound_by_a_crash_is_bound_on_the_next_status(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    from aipaas.backends.kubernetes.manifests import pod_manifest

    request = LaunchRequest(
        request_id="uid-2.main-0.0",
        task="main-0",
        job="crashed",
        tenant="acme",
        node="gpu-b",
        command=("true",),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
    )
    backend.api.create(pod_manifest(request, backend.options, []))  # the start died here
    assert backend.status([request.request_id])[request.request_id].state is TaskState.RUNNING
    [pod] = pods_of(cluster, "crashed")
    assert pod["spec"]["nodeName"] == "gpu-b"


def test_a_removed_node_loses_its_tasks(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup()
    controller = world.controller(backend, inventory_seconds=0)
    world.submit("pair", PAIR)
    controller.run_cycle()
    pods = pods_of(cluster, "pair")
    for pod in pods:
        cluster.set_pod_phase("acme", pod["metadata"]["name"], "Running")
    controller.run_cycle()
    gone = pods[0]["spec"]["nodeName"]
    cluster.remove("Node", "", gone)
    controller.run_cycle()
    controller.run_cycle()
    records = TaskRepository(world.store).for_job(world.job("pair").metadata.uid or "")
    lost = [r for r in records if r.node == gone]
    assert lost and all(r.phase == "Lost" for r in lost), [(r.name, r.phase) for r in records]
    assert any(gone in (r.message or "") for r in lost)
    world.submit("after", ONE)  # nothing new goes to the removed node
    controller.run_cycle()
    assert [p["spec"]["nodeName"] for p in pods_of(cluster, "after")] != [gone]
    assert len(pods_of(cluster, "after")) == 1


def test_a_stopped_pod_is_deleted_once_its_end_is_read(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    request = LaunchRequest(
        request_id="uid-3.main-0.0",
        task="main-0",
        job="stopped",
        tenant="acme",
        node="gpu-a",
        command=("sleep", "100"),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
    )
    backend.start(request)
    [pod] = pods_of(cluster, "stopped")
    cluster.set_pod_phase("acme", pod["metadata"]["name"], "Running")
    backend.stop(request.request_id, grace_seconds=7)
    held = cluster.get("Pod", "acme", pod["metadata"]["name"])
    assert held is not None and held["metadata"].get("deletionTimestamp")  # terminating
    assert held["metadata"]["deletionGracePeriodSeconds"] == 7  # SIGTERM, then 7 s
    assert backend.status([request.request_id])[request.request_id].state is TaskState.RUNNING
    # the kubelet: the container ended by SIGTERM, then its final delete (no grace left)
    cluster.set_pod_phase("acme", pod["metadata"]["name"], "Failed", exit_code=143)
    cluster.admin.delete("Pod", pod["metadata"]["name"], "acme", grace=0)
    first = backend.status([request.request_id])[request.request_id]
    assert (first.state, first.exit_code) == (TaskState.FAILED, 143)
    # aipaas deleted it to stop it: its end read, aipaas's finalizer goes, and the pod with it
    assert cluster.get("Pod", "acme", pod["metadata"]["name"]) is None


def test_a_pod_of_the_same_name_made_by_someone_else_is_not_taken(
    cluster: Cluster, backend: KubernetesBackend
) -> None:
    from aipaas.backends.kubernetes.api import Conflict
    from aipaas.backends.kubernetes.manifests import pod_name
    from tests.kube.kube_objects import user_pod

    request = LaunchRequest(
        request_id="uid-4.main-0.0",
        task="main-0",
        job="squat",
        tenant="acme",
        node="gpu-a",
        command=("true",),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
    )
    cluster.put(user_pod(pod_name(request)))  # squatting the name aipaas will use
    with pytest.raises(Conflict):
        backend.start(request)
    assert not (cluster.get("Pod", "acme", pod_name(request)) or {})["spec"].get("nodeName")


def test_starts_run_in_worker_threads_and_a_stop_waits_for_its_start(
    cluster: Cluster, tmp_path: Path
) -> None:
    backend = make_backend(cluster, tmp_path, start_workers=4)
    requests = [
        LaunchRequest(
            request_id=f"uid-9.main-{i}.0",
            task=f"main-{i}",
            job="pooled",
            tenant="acme",
            node="gpu-a",
            command=("true",),
            env={},
            working_dir=None,
            gpus=(),
            gpu_milli=0,
            log_path="",
        )
        for i in range(4)
    ]
    for request in requests:
        backend.start(request)  # returns at once: the workers create and bind
    backend.start(requests[0])  # under way: not begun twice
    backend.stop(requests[3].request_id, grace_seconds=0)  # after its start, never before
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        states = backend.status([r.request_id for r in requests[:3]])
        if all(s.state is TaskState.RUNNING for s in states.values()):
            break
        time.sleep(0.05)
    pods = {p["metadata"]["labels"]["aipaas.dev/task"]: p for p in pods_of(cluster, "pooled")}
    assert sorted(pods) == ["main-0", "main-1", "main-2", "main-3"]  # one pod each
    assert all(pods[f"main-{i}"]["spec"].get("nodeName") == "gpu-a" for i in range(3))
    assert pods["main-3"]["metadata"].get("deletionTimestamp")  # stopped once it was made
    backend.close()
