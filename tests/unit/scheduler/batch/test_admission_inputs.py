"""The session's admission inputs, decided inside the session (no check follows it): budgets'
holds on the queue tree, users' quotas, the GPUs DRA claims are given, pipelined starts, and
NoExecute taints with tolerationSeconds."""

from __future__ import annotations

from dataclasses import replace

from aipaas.metering.usage import SUBMITTER_ANNOTATION
from aipaas.scheduler.batch import from_api
from aipaas.scheduler.batch.cluster import SnapshotCluster
from aipaas.scheduler.batch.model import (
    Decisions,
    Job,
    Node,
    QueueNode,
    Resources,
    Snapshot,
    Task,
)
from aipaas.scheduler.batch.run import run_session
from aipaas.scheduler.framework.types import (
    NodeConstraints,
    Placement,
    PodRequest,
    Taint,
    Toleration,
)

NOW = 1000.0


def tree(
    hold_queue: str = "", hold_tenant: str = "", gpu_quota: int | None = None
) -> dict[str, QueueNode]:
    quota = Resources(gpu_quota * 1000, 2**62, 2**62, 2**62) if gpu_quota else None
    nodes = {
        "": QueueNode(key="", parent=None, tenant=""),
        "t": QueueNode(key="t", parent="", tenant="t", created=1, hold=hold_tenant),
        "t/q": QueueNode(key="t/q", parent="t", tenant="t", created=2, hold=hold_queue),
    }
    if quota is not None:
        nodes["t/q"] = replace(nodes["t/q"], quota=quota)
    return nodes


def gpu_job(name: str, gpus: int, *, user: str = "", order: int = 0, claims: bool = False) -> Job:
    request = PodRequest(
        name=f"t/{name}/w-0",
        cpu_milli=1000,
        memory_mib=1024,
        gpu_count=gpus,
        gpu_milli=1000 if gpus else 0,
    )
    task = Task("w-0", request, counts_claimed_gpus=claims)
    return Job(
        key=f"t/{name}",
        tenant="t",
        queue="t/q",
        tasks=[task],
        order=order,
        submitted=float(order),
        user=user,
    )


def cycle(snapshot: Snapshot) -> Decisions:
    engine = SnapshotCluster(snapshot.nodes)
    for job in snapshot.jobs:
        for task in job.running_tasks:
            assert task.placement is not None
            engine.hold(task.placement)
    return run_session(snapshot, engine)


NODES = [Node("n1", 8, 64_000, 512 * 1024)]


class TestHolds:
    def test_a_held_queue_starts_nothing_and_says_why(self) -> None:
        snapshot = Snapshot(NOW, NODES, tree(hold_queue="queue q: admission stopped by budget b"),
                            [gpu_job("a", 1)])  # fmt: skip
        decisions = cycle(snapshot)
        assert decisions.started == []
        assert decisions.reasons["t/a"] == (
            "AdmissionStopped",
            "queue q: admission stopped by budget b",
        )

    def test_a_held_tenant_holds_every_queue_below_it(self) -> None:
        snapshot = Snapshot(NOW, NODES, tree(hold_tenant="tenant t: admission stopped by budget b"),
                            [gpu_job("a", 1)])  # fmt: skip
        assert cycle(snapshot).reasons["t/a"][0] == "AdmissionStopped"

    def test_the_hold_comes_from_the_annotation_budgets_write(self) -> None:
        from aipaas.api.finops import ADMISSION_STOPPED
        from aipaas.api.queue import Queue
        from aipaas.api.tenancy import Tenant

        tenant = Tenant.model_validate({"metadata": {"name": "t"}, "spec": {}})
        queue = Queue.model_validate(
            {"metadata": {"name": "q", "tenant": "t", "annotations": {ADMISSION_STOPPED: "b1"}}}
        )
        built = from_api.queue_tree([tenant], [queue])
        assert built["t/q"].hold == "queue q: admission stopped by budget b1"
        assert built["t"].hold == ""


class TestUserQuotas:
    def test_the_second_job_of_a_user_at_its_quota_waits_and_another_users_starts(self) -> None:
        users = {"t/ana": Resources(2000, 2**62, 2**62, 2**62)}
        jobs = [gpu_job("a", 2, user="t/ana", order=0), gpu_job("b", 1, user="t/ana", order=1),
                gpu_job("c", 1, order=2)]  # fmt: skip
        decisions = cycle(Snapshot(NOW, NODES, tree(), jobs, users))
        assert sorted(s.job for s in decisions.started) == ["t/a", "t/c"]
        assert decisions.reasons["t/b"] == (
            "QuotaExceeded",
            "user ana quota: 2 GPUs reached (gpu: holds 2, needs 1 more)",
        )

    def test_the_submitter_annotation_is_the_servers(self) -> None:
        assert from_api.SUBMITTER_ANNOTATION == SUBMITTER_ANNOTATION


class _ClaimingCluster(SnapshotCluster):
    """An engine whose every placement's claims were given 3 whole GPUs."""

    def claimed_gpus(self, placement: Placement) -> int:
        return 3


class TestClaimedGpus:
    def test_a_start_whose_claims_break_the_quota_is_undone(self) -> None:
        # The task asks for no GPU by count; its claims get 3 once placed: 3 > quota 2.
        job = gpu_job("a", 0, claims=True)
        snapshot = Snapshot(NOW, NODES, tree(gpu_quota=2), [job])
        engine = _ClaimingCluster(NODES)
        decisions = run_session(snapshot, engine)
        assert decisions.started == []
        assert decisions.reasons["t/a"] == (
            "QuotaExceeded",
            "queue t/q is at its quota of 2 GPUs (gpu: holds 0, needs 3 more)",
        )
        assert engine.free("n1").cpu_milli == 64_000  # its placement was given back

    def test_within_the_quota_it_starts(self) -> None:
        job = gpu_job("a", 0, claims=True)
        decisions = run_session(Snapshot(NOW, NODES, tree(gpu_quota=3), [job]),
                                _ClaimingCluster(NODES))  # fmt: skip
        assert [s.job for s in decisions.started] == ["t/a"]


def running(name: str, node: str, since: float, tolerations: tuple[Toleration, ...] = ()) -> Job:
    request = PodRequest(name=f"t/{name}/w-0", cpu_milli=1000, memory_mib=1024,
                         constraints=NodeConstraints(tolerations=tolerations) if tolerations
                         else None)  # fmt: skip
    placement = Placement(pod=request.name, node=node, node_index=0, gpus=(), gpu_milli=0,
                          cpu_milli=1000, memory_mib=1024)  # fmt: skip
    task = Task("w-0", request, placement=placement, since=since)
    return Job(key=f"t/{name}", tenant="t", queue="t/q", tasks=[task], started=since)


def tainted(since: float | None) -> list[Node]:
    return [Node("n1", 0, 64_000, 512 * 1024, taints=(Taint("gone", "", "NoExecute", since),))]


class TestTolerationSeconds:
    """Kubernetes' taint manager: no toleration, at once; tolerationSeconds after the taint
    appeared (or the task started, if later); no tolerationSeconds, for ever."""

    def test_no_toleration_is_evicted_at_once(self) -> None:
        decisions = cycle(Snapshot(NOW, tainted(NOW), tree(), [running("a", "n1", 0)]))
        assert [e.job for e in decisions.evicted] == ["t/a"]

    def test_tolerated_without_seconds_stays_for_ever(self) -> None:
        forever = (Toleration("gone", "Exists", "", "NoExecute"),)
        decisions = cycle(Snapshot(NOW, tainted(0), tree(), [running("a", "n1", 0, forever)]))
        assert decisions.evicted == [] and decisions.due is None

    def test_seconds_run_from_when_the_taint_appeared(self) -> None:
        sixty = (Toleration("gone", "Exists", "", "NoExecute", 60),)
        before = cycle(Snapshot(NOW, tainted(950), tree(), [running("a", "n1", 0, sixty)]))
        assert before.evicted == [] and before.due == 1010
        after = cycle(Snapshot(NOW, tainted(940), tree(), [running("a", "n1", 0, sixty)]))
        assert [e.job for e in after.evicted] == ["t/a"]
        assert "tolerated until 1000 (tolerationSeconds)" in after.evicted[0].message

    def test_seconds_run_from_the_start_of_a_task_that_came_after_the_taint(self) -> None:
        sixty = (Toleration("gone", "Exists", "", "NoExecute", 60),)
        decisions = cycle(Snapshot(NOW, tainted(0), tree(), [running("a", "n1", 990, sixty)]))
        assert decisions.evicted == [] and decisions.due == 1050

    def test_zero_seconds_is_at_once(self) -> None:
        zero = (Toleration("gone", "Exists", "", "NoExecute", 0),)
        decisions = cycle(Snapshot(NOW, tainted(NOW), tree(), [running("a", "n1", 0, zero)]))
        assert [e.job for e in decisions.evicted] == ["t/a"]

    def test_the_shortest_of_the_tolerations_used_counts(self) -> None:
        nodes = [Node("n1", 0, 64_000, 512 * 1024, taints=(
            Taint("x", "", "NoExecute", 900), Taint("y", "", "NoExecute", 900)))]  # fmt: skip
        tolerations = (Toleration("x", "Exists", "", "NoExecute", 300),
                       Toleration("y", "Exists", "", "NoExecute"))  # fmt: skip
        decisions = cycle(Snapshot(NOW, nodes, tree(), [running("a", "n1", 0, tolerations)]))
        assert decisions.evicted == [] and decisions.due == 1200
