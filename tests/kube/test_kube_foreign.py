"""Pods that others submit with ``schedulerName: aipaas``: grouped by their pod-group
annotation (Volcano's, KAI's), stored as one Job in the queue they name, placed as one gang,
bound by Binding (no pod created) with their claims allocated by aipaas."""

from __future__ import annotations

import pytest

from aipaas.api.job import Job
from aipaas.backends.kubernetes.backend import KubernetesBackend
from aipaas.controller.kube_import import KubeImport
from aipaas.errors import InvalidObject
from tests.kube.kube_cluster import Cluster
from tests.kube.kube_objects import user_pod
from tests.kube.kube_scenarios import controller_for, gpu_claim, submit_gang
from tests.support.ctl_world import World


def imported_jobs(world: World) -> list[Job]:
    jobs = world.store.list_objects("Job", "acme")
    return [
        j for j in jobs if isinstance(j, Job) and "aipaas.dev/kube-pods" in j.metadata.annotations
    ]


def test_a_pod_group_is_scheduled_as_one_gang(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    names = submit_gang(cluster, "team-run", 2, 2)
    for _ in range(4):
        controller.run_cycle()
    [job] = imported_jobs(world)
    assert job.spec.min_available == 2 and job.spec.queue == "research"
    assert len(cluster.list("Pod")) == 2  # bound, none created
    for name in names:
        pod = cluster.get("Pod", "acme", name)
        assert pod is not None and pod["spec"]["nodeName"] in ("gpu-a", "gpu-b")
        assert pod["metadata"]["annotations"]["aipaas.dev/imported-as"] == job.name
        claim = cluster.get("ResourceClaim", "acme", f"{name}-gpu")
        assert claim is not None
        assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert "annotations" not in claim["metadata"]  # the user's claim: only the finalizer
        allocation = claim["status"]["allocation"]
        results = allocation["devices"]["results"]
        assert len(results) == 2 and {r["request"] for r in results} == {"gpu"}
        assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}
        terms = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] == [pod["spec"]["nodeName"]]
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}
        ]
    cluster.set_pod_phase("acme", names[0], "Succeeded", exit_code=0)
    cluster.set_pod_phase("acme", names[1], "Succeeded", exit_code=0)
    controller.run_cycle()
    assert world.phase(job.name) == "Succeeded"


def test_a_gang_that_does_not_fit_whole_binds_no_pod(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    names = submit_gang(cluster, "too-wide", 3, 4)  # 12 GPUs asked, 8 in the cluster
    for _ in range(4):
        controller.run_cycle()
    [job] = imported_jobs(world)
    assert world.phase(job.name) == "Pending"
    assert all(not (cluster.get("Pod", "acme", n) or {})["spec"].get("nodeName") for n in names)


def test_kai_convention_and_a_declared_size_wait_for_the_whole_group(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    pods = []
    for i in range(2):
        pod = user_pod(f"kai-{i}", group="kai-group")
        pod["metadata"]["annotations"] = {
            "pod-group-name": "kai-group",
            "kubernetes.aipaas.dev/group-size": "3",
        }
        pods.append(pod)
        cluster.put(pod)
    for _ in range(3):
        controller.run_cycle()
    assert imported_jobs(world) == []  # two of three: it waits
    third = user_pod("kai-2", group="kai-group")
    third["metadata"]["annotations"] = pods[0]["metadata"]["annotations"]
    cluster.put(third)
    for _ in range(3):
        controller.run_cycle()
    [job] = imported_jobs(world)
    assert [t.name for t in job.spec.tasks] == ["p0", "p1", "p2"]
    assert all(cluster.get("Pod", "acme", f"kai-{i}")["spec"].get("nodeName") for i in range(3))  # type: ignore[index]


def test_pods_of_a_namespace_without_a_tenant_wait(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    from tests.kube.kube_objects import namespace

    controller = controller_for(world, backend)
    cluster.put(namespace("other"))
    pod = user_pod("stray")
    pod["metadata"]["namespace"] = "other"
    cluster.put(pod)
    for _ in range(3):
        controller.run_cycle()
    assert not (cluster.get("Pod", "other", "stray") or {})["spec"].get("nodeName")
    assert world.store.list_objects("Job", "other") == []


def test_a_user_job_cannot_name_pods_to_bind(world: World) -> None:
    world.setup()
    with pytest.raises(InvalidObject) as raised:
        world.submit(
            "sneaky",
            "    - name: p0\n      command: [x]\n",
            annotations='{aipaas.dev/kube-pods: \'{"p0": {"name": "victim", "uid": "u"}}\'}',
        )
    assert "aipaas.dev/kube-pods" in str(raised.value)


def test_a_pod_that_requests_nothing_is_still_scheduled(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    pod = user_pod("best-effort")
    pod["spec"]["containers"][0]["resources"] = {}
    cluster.put(pod)
    for _ in range(3):
        controller.run_cycle()
    [job] = imported_jobs(world)
    assert job.spec.tasks[0].resources.cpu == "1m"
    assert (cluster.get("Pod", "acme", "best-effort") or {})["spec"].get("nodeName")


def test_a_group_still_growing_is_not_split(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """Without a declared size, a group is taken once its pods stayed the same for the settle
    time: pods a controller creates over several cycles become one gang, not two."""
    from aipaas.clock import VirtualClock

    world.setup()
    clock = VirtualClock()
    controller = world.controller(
        backend,
        clock,
        inventory_seconds=0,
        extensions=[KubeImport("research", 2.0, every_seconds=0)],
    )
    for i in range(3):
        cluster.put(user_pod(f"grow-{i}", group="grow"))
        controller.run_cycle()
        clock.advance(1.0)
        controller.run_cycle()
    assert imported_jobs(world) == []  # never the same pods for 2 s yet
    clock.advance(2.0)
    controller.run_cycle()
    [job] = imported_jobs(world)
    assert len(job.spec.tasks) == 3 and job.spec.min_available == 3


def test_a_pod_of_no_group_is_taken_in_the_first_cycle_that_sees_it(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    """A lone pod is a gang of one, complete at once: it does not wait out the settle time
    that a group without a declared size waits (nothing more can join it)."""
    from aipaas.clock import VirtualClock

    world.setup()
    controller = world.controller(
        backend,
        VirtualClock(),
        inventory_seconds=0,
        extensions=[KubeImport("research", 60.0, every_seconds=0)],
    )
    cluster.put(user_pod("lone"))
    cluster.put(user_pod("grouped-0", group="later"))
    controller.run_cycle()
    [job] = imported_jobs(world)  # the lone pod only; the group waits its 60 s
    import json

    from aipaas.backends.foreign_pods import IMPORTED_ANNOTATION

    pods = json.loads(job.metadata.annotations[IMPORTED_ANNOTATION])
    assert [entry["name"] for entry in pods.values()] == ["lone"]


def test_a_pod_waits_until_the_cluster_made_its_templates_claim(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    controller = controller_for(world, backend)
    pod = user_pod("templated")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    cluster.put(pod)
    for _ in range(3):
        controller.run_cycle()
    assert imported_jobs(world) == []  # its claim does not exist yet
    cluster.put(gpu_claim("templated-gpu-x7k2p", 1))  # what the resourceclaim controller makes
    made = [{"name": "gpu", "resourceClaimName": "templated-gpu-x7k2p"}]
    written = cluster.admin.patch(  # as the resourceclaim controller writes it
        "Pod",
        "templated",
        {"status": {"resourceClaimStatuses": made}},
        "acme",
        subresource="status",
    )
    cluster.seen(written)
    for _ in range(3):
        controller.run_cycle()
    [job] = imported_jobs(world)
    assert job.spec.tasks[0].resources.claims[0].resource_claim_name == "templated-gpu-x7k2p"
    claim = cluster.get("ResourceClaim", "acme", "templated-gpu-x7k2p")
    assert claim is not None and claim["status"]["reservedFor"][0]["name"] == "templated"
    assert (cluster.get("Pod", "acme", "templated") or {})["spec"].get("nodeName")


def test_others_pods_count_against_the_tenants_quota(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    world.setup("{cpu: 3, memory: 64Gi}")  # one pod of 2 CPUs fits, a gang of two does not
    controller = world.controller(
        backend,
        inventory_seconds=0,
        extensions=[KubeImport("research", settle_seconds=0, every_seconds=0)],
    )
    for i in range(2):
        cluster.put(user_pod(f"big-{i}", group="big"))
    for _ in range(4):
        controller.run_cycle()
    [job] = imported_jobs(world)
    status = world.job(job.name).status
    assert status is not None and status.phase.value == "Pending"
    assert "quota" in status.message.lower(), status.message
    assert all(
        not (cluster.get("Pod", "acme", f"big-{i}") or {})["spec"].get("nodeName") for i in range(2)
    )


def test_the_cluster_is_read_for_others_pods_at_most_once_a_second(
    world: World, cluster: Cluster, backend: KubernetesBackend
) -> None:
    from aipaas.clock import VirtualClock

    world.setup()
    clock = VirtualClock()
    controller = world.controller(
        backend, clock, inventory_seconds=0, extensions=[KubeImport("research", 0.0, 1.0)]
    )
    # a group without a declared size is taken once seen the same in two reads
    cluster.put(user_pod("patient", group="patient"))
    for _ in range(5):  # the same instant: read once, never twice, so never seen settled
        controller.run_cycle()
    assert imported_jobs(world) == []
    clock.advance(1.0)
    controller.run_cycle()
    assert len(imported_jobs(world)) == 1
