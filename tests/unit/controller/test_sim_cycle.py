"""The controller on simulated nodes and a virtual clock: gangs, quotas, scheduling reasons."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import generate_latest

from aipaas.backends.base import Backend, Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.advance import Backoff
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRepository
from tests.support.ctl_world import World

GPU_TASKS = """    - name: worker
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 8, memory: 64Gi, gpu: {gpu}}}
"""


def sim(world: World) -> tuple[Controller, VirtualClock]:
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=10)
    return world.controller(backend, clock), clock


class TestGang:
    def test_job_runs_to_success(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        world.submit("train", GPU_TASKS.format(replicas=2, gpu=4))
        controller.run_cycle()
        # The sim runs a task as soon as it is started: Running in the cycle that placed it.
        tasks = world.job("train").status.tasks  # type: ignore[union-attr]
        assert [t.phase.value for t in tasks] == ["Running", "Running"]
        assert all(len(t.gpus) == 4 for t in tasks)
        assert world.phase("train") == "Running"
        controller.run_cycle()
        assert world.phase("train") == "Running"
        clock.advance(11)
        controller.run_cycle()
        assert world.phase("train") == "Succeeded"
        assert world.reasons("train") == [
            "Created",
            "Scheduled",
            "Running",
            "TaskSucceeded",
            "TaskSucceeded",
            "Succeeded",
        ]
        assert controller.metrics.gpus_total._value.get() == 16

    def test_a_task_not_yet_reported_running_stays_starting(self, world: World) -> None:
        """A backend that has not reported a started task yet (a cluster's pod still being
        created): the task stays Starting, is not started twice, and runs once reported."""
        world.setup()
        controller, _ = sim(world)
        quiet = _QuietAtFirst(controller.backend)
        controller.backend = quiet
        world.submit("train", GPU_TASKS.format(replicas=2, gpu=4))
        controller.run_cycle()
        status = world.job("train").status
        assert status is not None and status.phase.value == "Pending"
        assert status.reason == "Scheduled"
        assert [t.phase.value for t in status.tasks] == ["Starting", "Starting"]
        quiet.reporting = True
        controller.run_cycle()
        assert world.phase("train") == "Running"
        assert quiet.starts == 2
        assert world.reasons("train") == ["Created", "Scheduled", "Running"]

    def test_a_start_that_fails_at_once_is_lost_not_running(self, world: World) -> None:
        world.setup()
        controller, _ = sim(world)
        controller.backend = _RefusesToStart(controller.backend)
        world.submit("train", GPU_TASKS.format(replicas=2, gpu=4))
        controller.run_cycle()
        status = world.job("train").status
        assert status is not None and status.phase.value == "Pending"
        assert [t.phase.value for t in status.tasks] == ["Lost", "Lost"]
        assert all("start failed: no such command" in t.message for t in status.tasks)
        controller.run_cycle()
        assert world.phase("train") == "Failed"  # restartPolicy Never

    def test_gang_is_all_or_nothing(self, world: World) -> None:
        world.setup("{gpu: 100}")
        controller, _ = sim(world)
        world.submit("big", GPU_TASKS.format(replicas=3, gpu=8))  # 24 GPUs on 16
        controller.run_cycle()
        status = world.job("big").status
        assert status is not None and status.phase.value == "Pending"
        assert status.reason == "Unschedulable"
        assert status.message == "its gang needs 24 GPUs (gpu); the whole cluster has 16"
        assert TaskRepository(world.store).active() == []

    def test_no_gpu_is_given_twice(self, world: World) -> None:
        world.setup("{gpu: 100}")
        controller, _ = sim(world)
        for index in range(5):
            world.submit(f"j{index}", GPU_TASKS.format(replicas=1, gpu=4))
        controller.run_cycle()
        held = [(r.node, g) for r in TaskRepository(world.store).active() for g in r.gpus]
        assert len(held) == 16 and len(set(held)) == 16
        assert world.job("j4").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]

    def test_priority_goes_first(self, world: World) -> None:
        world.setup("{gpu: 100}")
        controller, _ = sim(world)
        world.submit("low", GPU_TASKS.format(replicas=2, gpu=8), extra="  priority: low\n")
        world.submit("high", GPU_TASKS.format(replicas=2, gpu=8), extra="  priority: high\n")
        controller.run_cycle()
        assert world.job("high").status.reason == "Scheduled"  # type: ignore[union-attr]
        assert world.job("low").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]

    def test_declared_duration(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        world.submit(
            "short",
            GPU_TASKS.format(replicas=1, gpu=1),
            annotations="{sim.aipaas.dev/duration: '2'}",
        )
        controller.run_cycle()
        clock.advance(2.5)
        controller.run_cycle()
        assert world.phase("short") == "Succeeded"


class TestQuota:
    def test_waits_with_reason_then_starts(self, world: World) -> None:
        world.setup("{gpu: 8}")
        controller, clock = sim(world)
        world.submit("first", GPU_TASKS.format(replicas=2, gpu=4))
        world.submit("second", GPU_TASKS.format(replicas=1, gpu=4))
        controller.run_cycle()
        status = world.job("second").status
        assert status is not None and status.phase.value == "Pending"
        assert status.reason == "QuotaExceeded"
        assert status.message == (
            "tenant acme is at its quota of 8 GPUs (gpu: holds 8, needs 4 more)"
        )
        assert "QuotaExceeded" in world.reasons("second")
        clock.advance(11)
        controller.run_cycle()
        assert world.phase("first") == "Succeeded"
        assert world.job("second").status.reason == "Scheduled"  # type: ignore[union-attr]
        controller.run_cycle()
        assert world.phase("second") == "Running"

    def test_queue_quota(self, world: World) -> None:
        world.setup()
        world.service.apply_text(
            "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n"
            "spec: {quota: {gpu: 2}}\n"
        )
        controller, _ = sim(world)
        world.submit("wide", GPU_TASKS.format(replicas=1, gpu=4))
        controller.run_cycle()
        status = world.job("wide").status
        assert status is not None and "queue acme/research (2 GPUs)" in status.message

    def test_fractions_share_a_gpu(self, world: World) -> None:
        world.setup("{gpu: 1}")
        controller, _ = sim(world)
        world.submit("a", GPU_TASKS.format(replicas=2, gpu=0.5))
        world.submit("b", GPU_TASKS.format(replicas=1, gpu=0.5))
        controller.run_cycle()
        assert world.job("a").status.reason == "Scheduled"  # type: ignore[union-attr]
        assert world.job("b").status.reason == "QuotaExceeded"  # type: ignore[union-attr]


class TestCancelAndDelete:
    def test_cancel_releases(self, world: World) -> None:
        world.setup()
        controller, _ = sim(world)
        world.submit("c", GPU_TASKS.format(replicas=2, gpu=4))
        controller.run_cycle()
        world.service.cancel("c", "acme")
        controller.run_cycle()
        assert world.phase("c") == "Cancelled"
        assert TaskRepository(world.store).active() == []

    def test_delete_removes_after_stop(self, world: World) -> None:
        world.setup()
        controller, _ = sim(world)
        world.submit("d", GPU_TASKS.format(replicas=1, gpu=1))
        controller.run_cycle()
        world.service.delete("Job", "d", "acme")
        controller.run_cycle()
        assert world.store.find("Job", "acme", "d") is None


class TestRestart:
    def test_new_controller_keeps_allocations(self, world: World) -> None:
        """After a restart the allocations are rebuilt from the records: nothing is doubled."""
        world.setup("{gpu: 100}")
        controller, clock = sim(world)
        world.submit("a", GPU_TASKS.format(replicas=2, gpu=8))
        controller.run_cycle()
        again = world.controller(controller.backend, clock)
        world.submit("b", GPU_TASKS.format(replicas=1, gpu=8))
        again.run_cycle()
        assert world.job("b").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]
        assert world.phase("a") == "Running"


class TestMetrics:
    def test_gauges_follow_the_jobs(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        world.submit("m", GPU_TASKS.format(replicas=1, gpu=2))
        controller.run_cycle()
        text = generate_latest(controller.metrics.registry).decode()
        assert 'aipaas_jobs{phase="Running"} 1.0' in text or 'phase="Pending"} 1.0' in text
        assert "aipaas_gpus_allocated 2.0" in text
        assert "aipaas_gpus_total 16.0" in text
        assert "aipaas_scheduling_latency_seconds_count 1.0" in text
        clock.advance(11)
        controller.run_cycle()
        controller.run_cycle()
        text = generate_latest(controller.metrics.registry).decode()
        assert 'aipaas_jobs{phase="Succeeded"} 1.0' in text
        assert 'aipaas_jobs{phase="Running"} 0.0' in text
        assert "aipaas_gpus_allocated 0.0" in text


class TestFairShare:
    def test_queues_share_by_weight(self, world: World) -> None:
        world.setup("{gpu: 100}")
        world.service.apply_text(
            "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: small, tenant: acme}\n"
            "spec: {weight: 1}\n---\n"
            "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: big, tenant: acme}\n"
            "spec: {weight: 3}\n"
        )
        controller, _ = sim(world)
        for queue in ("small", "big"):  # the small queue's jobs are all older
            for index in range(8):
                world.submit(f"{queue}-{index}", GPU_TASKS.format(replicas=1, gpu=2), queue=queue)
        controller.run_cycle()
        placed = {
            queue: sum(
                world.job(f"{queue}-{i}").status.reason == "Scheduled"  # type: ignore[union-attr]
                for i in range(8)
            )
            for queue in ("small", "big")
        }
        assert placed == {"small": 2, "big": 6}

    def test_priority_before_share(self, world: World) -> None:
        world.setup("{gpu: 100}")
        controller, _ = sim(world)
        world.submit("normal", GPU_TASKS.format(replicas=2, gpu=8))
        world.submit("urgent", GPU_TASKS.format(replicas=2, gpu=8), extra="  priority: 5000\n")
        controller.run_cycle()
        assert world.job("urgent").status.reason == "Scheduled"  # type: ignore[union-attr]


class TestSimulatedFailures:
    def test_declared_exit_code_and_restarts(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        controller.backoff = Backoff(0.0, controller.backoff.max_seconds)
        tasks = GPU_TASKS.format(replicas=1, gpu=1) + (
            "      restartPolicy: OnFailure\n      backoffLimit: 2\n"
        )
        world.submit("flaky", tasks, annotations="{sim.aipaas.dev/exit-code: '3'}")
        for _ in range(4):
            controller.run_cycle()
            clock.advance(11)
            controller.run_cycle()
        status = world.job("flaky").status
        assert status is not None and status.phase.value == "Failed"
        assert status.tasks[0].restarts == 2 and status.tasks[0].exit_code == 3


class TestDependencies:
    def test_waits_for_success(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        world.submit("tokenize", GPU_TASKS.format(replicas=1, gpu=1))
        world.submit(
            "train", GPU_TASKS.format(replicas=1, gpu=1), extra="  dependsOn: [tokenize]\n"
        )
        controller.run_cycle()
        status = world.job("train").status
        assert status is not None and status.reason == "WaitingForDependencies"
        assert status.message == "waiting for job tokenize (Pending)"
        clock.advance(11)
        controller.run_cycle()
        controller.run_cycle()
        assert world.phase("tokenize") == "Succeeded"
        assert world.job("train").status.reason == "Scheduled"  # type: ignore[union-attr]

    def test_a_failed_dependency_fails_the_job(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        world.submit(
            "first",
            GPU_TASKS.format(replicas=1, gpu=1),
            annotations="{sim.aipaas.dev/exit-code: '1'}",
        )
        world.submit("then", GPU_TASKS.format(replicas=1, gpu=1), extra="  dependsOn: [first]\n")
        controller.run_cycle()
        clock.advance(11)
        controller.run_cycle()
        controller.run_cycle()
        status = world.job("then").status
        assert status is not None and status.phase.value == "Failed"
        assert status.message == "job first failed"

    def test_a_missing_dependency_waits(self, world: World) -> None:
        """Submission refuses a dependency on no job; one deleted since (or stored before that
        check existed) leaves the job waiting with the reason."""
        world.setup()
        controller, _ = sim(world)
        world.submit("nope", GPU_TASKS.format(replicas=1, gpu=1))
        world.submit("orphan", GPU_TASKS.format(replicas=1, gpu=1), extra="  dependsOn: [nope]\n")
        world.store.delete("Job", "acme", "nope")
        controller.run_cycle()
        assert world.job("orphan").status.message == "job nope does not exist"  # type: ignore[union-attr]


class TestNodeStatus:
    def test_allocations_are_published(self, world: World) -> None:
        world.setup()
        controller, clock = sim(world)
        world.submit("n", GPU_TASKS.format(replicas=1, gpu=4))
        controller.run_cycle()
        nodes = {n.name: n for n in world.store.list_objects("Node", "")}
        used = sorted(n.status.allocated_gpus for n in nodes.values())  # type: ignore[attr-defined]
        assert used == [0, 4]
        assert all(n.status.ready for n in nodes.values())  # type: ignore[attr-defined]
        clock.advance(11)
        controller.run_cycle()
        controller.run_cycle()
        nodes = {n.name: n for n in world.store.list_objects("Node", "")}
        assert [n.status.allocated_gpus for n in nodes.values()] == [0, 0]  # type: ignore[attr-defined]


class _QuietAtFirst:
    """A backend that answers Unknown for every task until ``reporting`` is set."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.reporting = False
        self.starts = 0

    def inventory(self) -> Inventory:
        return self.inner.inventory()

    def start(self, request: LaunchRequest) -> None:
        self.starts += 1
        self.inner.start(request)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self.inner.stop(request_id, grace_seconds)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        if not self.reporting:
            return {rid: TaskStatus(rid, TaskState.UNKNOWN) for rid in request_ids}
        return self.inner.status(request_ids)

    def close(self) -> None:
        self.inner.close()


class _RefusesToStart(_QuietAtFirst):
    """A backend on which no task can start."""

    def start(self, request: LaunchRequest) -> None:
        raise OSError("no such command")
