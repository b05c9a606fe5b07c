"""At most once, unknown is not lost, wall-clock restarts, quotas for every replica, fair share
across tenants, and demo mode's simulated nodes (issue 10)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from aipaas.api.job import Job
from aipaas.backends.base import (
    FencingRefused,
    Inventory,
    LaunchRequest,
    NodeInfo,
    TaskState,
    TaskStatus,
)
from aipaas.backends.composite import ON_REQUEST_LABEL, CompositeBackend
from aipaas.backends.fencing import TokenFile
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRepository
from tests.support.ctl_world import World

GPU_TASKS = """    - name: w
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 1, memory: 1Gi, gpu: {gpu}}}
{extra}"""


def tasks(replicas: int = 1, gpu: str = "1", extra: str = "") -> str:
    return GPU_TASKS.format(replicas=replicas, gpu=gpu, extra=extra)


class Faulty:
    """The simulator with switches: inventory or status that fail, a task the backend 'forgets'
    (reports UNKNOWN), and stops that take effect only when ``let_stop`` is called."""

    def __init__(self, inner: SimBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.inventory_fails = False
        self.status_fails = False
        self.forget: set[str] = set()
        self.slow_stop = False
        self.stop_asked: list[str] = []
        self.starts: list[str] = []

    def inventory(self) -> Inventory:
        if self.inventory_fails:
            raise OSError("inventory: connection refused")
        return self.inner.inventory()

    def start(self, request: LaunchRequest) -> None:
        self.starts.append(request.request_id)
        self.inner.start(request)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self.stop_asked.append(request_id)
        if not self.slow_stop:
            self.inner.stop(request_id, grace_seconds)

    def let_stop(self) -> None:
        for request_id in self.stop_asked:
            self.inner.stop(request_id)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        if self.status_fails:
            raise OSError("status: timed out")
        answers = self.inner.status(request_ids)
        for rid in self.forget & set(answers):
            answers[rid] = TaskStatus(rid, TaskState.UNKNOWN)
        return answers

    def close(self) -> None:
        self.inner.close()


def faulty(world: World, clock: VirtualClock) -> tuple[Controller, Faulty]:
    backend = Faulty(SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=100))
    return world.controller(backend, clock, inventory_seconds=0, backoff_seconds=1), backend


def scheduled(world: World, tenant: str) -> int:
    """How many of the tenant's jobs were placed (status reason Scheduled)."""
    count = 0
    for job in world.store.list_objects("Job", tenant):
        assert isinstance(job, Job)
        count += bool(job.status and job.status.reason == "Scheduled")
    return count


def task_phases(world: World, name: str) -> list[str]:
    status = world.job(name).status
    return [t.phase.value for t in status.tasks] if status else []


class TestUnknownIsNotLost:
    def test_an_inventory_error_after_a_restart_keeps_tasks_and_places_nothing(
        self, world: World
    ) -> None:
        world.setup("{gpu: 100}")
        clock = VirtualClock()
        first, backend = faulty(world, clock)
        world.submit("a", tasks(replicas=2, gpu="8"))
        first.run_cycle()
        assert task_phases(world, "a") == ["Running", "Running"]
        backend.inventory_fails = True
        second = world.controller(backend, clock, inventory_seconds=0)  # a restart
        world.submit("b", tasks(replicas=1, gpu="1"))
        for _ in range(3):
            second.run_cycle()
        assert task_phases(world, "a") == ["Running", "Running"]
        assert "TaskLost" not in world.reasons("a")
        assert backend.stop_asked == []
        assert world.job("b").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]
        assert len(backend.starts) == 2  # nothing started again, nothing new
        backend.inventory_fails = False
        second.run_cycle()
        assert task_phases(world, "a") == ["Running", "Running"]
        assert world.job("b").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]

    def test_known_nodes_stay_unknown_not_empty(self, world: World) -> None:
        world.setup("{gpu: 100}")
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit("a", tasks(replicas=1, gpu="8"))
        controller.run_cycle()
        backend.inventory_fails = True
        world.submit("b", tasks(replicas=1, gpu="1"))
        controller.run_cycle()
        assert [n.name for n in controller.nodes] == ["sim-dgx-0", "sim-dgx-1"]
        assert controller.inventory.unknown == {"sim-dgx-0", "sim-dgx-1"}
        assert world.job("b").status.reason in ("Unschedulable", "FairShare")  # type: ignore[union-attr]
        nodes = world.store.list_objects("Node", "")
        assert [n.status.ready for n in nodes] == [False, False]  # type: ignore[attr-defined]
        assert task_phases(world, "a") == ["Running"]

    def test_a_status_error_is_unknown_not_lost(self, world: World) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit("a", tasks(replicas=2))
        controller.run_cycle()
        backend.status_fails = True
        for _ in range(3):
            controller.run_cycle()
        assert task_phases(world, "a") == ["Running", "Running"]
        assert backend.stop_asked == [] and len(backend.starts) == 2


class TestAtMostOnce:
    def test_a_lost_task_is_stopped_and_not_replaced_before_its_stop_is_confirmed(
        self, world: World
    ) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit("a", tasks(extra="      restartPolicy: OnFailure\n"))
        controller.run_cycle()
        first = backend.starts[0]
        backend.forget.add(first)  # the backend says it does not know a task that still runs
        backend.slow_stop = True
        controller.run_cycle()
        assert backend.stop_asked == [first]  # a Lost task is stopped
        assert "TaskLost" in world.reasons("a")
        assert task_phases(world, "a") == ["Pending"]  # to restart, once its stop is confirmed
        backend.forget.clear()  # the task is still there, running
        for _ in range(5):
            clock.advance(10)  # far past the backoff
            controller.run_cycle()
        assert backend.starts == [first]  # no second attempt while the first runs
        assert world.job("a").status.tasks[0].restarts == 0  # type: ignore[union-attr]
        backend.let_stop()
        controller.run_cycle()  # stop confirmed: the restart's backoff starts from here
        clock.advance(10)
        controller.run_cycle()
        assert len(backend.starts) == 2 and backend.starts[1].endswith(".1")
        status = backend.inner.status(backend.starts)
        assert [s.state for s in status.values()] == [TaskState.FAILED, TaskState.RUNNING]

    def test_a_cancelled_job_ends_only_when_its_tasks_stopped(self, world: World) -> None:
        world.setup("{gpu: 8}")
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit("a", tasks(replicas=1, gpu="8"))
        controller.run_cycle()
        backend.slow_stop = True
        world.service.cancel("a", "acme")
        world.submit("b", tasks(replicas=1, gpu="8"))
        for _ in range(3):
            controller.run_cycle()
        status = world.job("a").status
        assert status is not None and status.reason == "Stopping"
        assert status.phase.value == "Running"
        assert world.job("b").status.reason == "QuotaExceeded"  # type: ignore[union-attr]
        backend.let_stop()
        controller.run_cycle()
        assert world.phase("a") == "Cancelled"
        controller.run_cycle()
        assert world.phase("b") == "Running"

    def test_restart_times_are_wall_clock(self, world: World) -> None:
        world.setup()
        clock = VirtualClock()
        controller, backend = faulty(world, clock)
        world.submit(
            "a",
            tasks(extra="      restartPolicy: OnFailure\n"),
            annotations="{sim.aipaas.dev/exit-code: '1', sim.aipaas.dev/duration: '1'}",
        )
        controller.run_cycle()
        clock.advance(2)
        controller.run_cycle()  # failed: restarts in 1 s
        [record] = TaskRepository(world.store).active()
        assert record.restart_after is not None and record.restart_after.tzinfo is not None
        assert abs((record.restart_after - clock.now()).total_seconds() - 1) < 0.01
        # A new controller on the same wall clock whose monotonic clock starts at 0 again
        # (another host, a reboot): a monotonic reading stored by the first would be wrong.
        other = VirtualClock(start=clock.now())
        again = world.controller(backend, other)
        again.run_cycle()
        assert len(backend.starts) == 1  # not yet: the restart time has not come
        other.advance(1.5)
        again.run_cycle()
        assert len(backend.starts) == 2


class TestQuotasForEveryReplica:
    def test_elastic_extras_stay_within_the_tenant_quota(self, world: World) -> None:
        world.setup("{gpu: 4}")
        clock = VirtualClock()
        controller, _ = faulty(world, clock)
        world.submit("e", tasks(replicas=7), extra="  minAvailable: 2\n")
        for _ in range(3):
            controller.run_cycle()
        running = [t for t in world.job("e").status.tasks if t.node]  # type: ignore[union-attr]
        assert len(running) == 4

    def test_elastic_extras_stay_within_the_queue_quota(self, world: World) -> None:
        world.setup("{gpu: 8}")
        world.service.apply_text(
            "apiVersion: aipaas/v1\nkind: Queue\nmetadata: {name: research, tenant: acme}\n"
            "spec: {quota: {gpu: 3}}\n"
        )
        clock = VirtualClock()
        controller, _ = faulty(world, clock)
        world.submit("e", tasks(replicas=7), extra="  minAvailable: 1\n")
        for _ in range(3):
            controller.run_cycle()
        running = [t for t in world.job("e").status.tasks if t.node]  # type: ignore[union-attr]
        assert len(running) == 3

    def test_fair_share_across_tenants_comes_before_priority(self, world: World) -> None:
        world.service.apply_text(
            "".join(
                f"---\napiVersion: aipaas/v1\nkind: Tenant\nmetadata: {{name: {t}}}\n"
                f"---\napiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: q, tenant: {t}}}\n"
                for t in ("loud", "quiet")
            )
        )
        clock = VirtualClock()
        controller, _ = faulty(world, clock)
        # Eight 2-GPU jobs each on 16 GPUs; the loud tenant's are older and of high priority.
        for tenant, priority in (("loud", 10000), ("quiet", 0)):
            for index in range(8):
                world.service.apply_text(
                    f"apiVersion: aipaas/v1\nkind: Job\n"
                    f"metadata: {{name: {tenant}-{index}, tenant: {tenant}}}\n"
                    f"spec:\n  queue: q\n  priority: {priority}\n  tasks:\n{tasks(gpu='2')}"
                )
        controller.run_cycle()
        placed = {tenant: scheduled(world, tenant) for tenant in ("loud", "quiet")}
        assert placed == {"loud": 4, "quiet": 4}

    def test_a_tenants_weight_sets_its_share_across_tenants(self, world: World) -> None:
        world.service.apply_text(
            "".join(
                f"---\napiVersion: aipaas/v1\nkind: Tenant\nmetadata: {{name: {t}}}\n"
                f"spec: {{weight: {w}}}\n"
                f"---\napiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: q, tenant: {t}}}\n"
                for t, w in (("heavy", 3), ("light", 1))
            )
        )
        clock = VirtualClock()
        controller, _ = faulty(world, clock)
        for tenant in ("light", "heavy"):  # the light tenant's jobs are older
            for index in range(8):
                world.service.apply_text(
                    f"apiVersion: aipaas/v1\nkind: Job\n"
                    f"metadata: {{name: {tenant}-{index}, tenant: {tenant}}}\n"
                    f"spec:\n  queue: q\n  tasks:\n{tasks(gpu='2')}"
                )
        controller.run_cycle()
        placed = {tenant: scheduled(world, tenant) for tenant in ("heavy", "light")}
        # 16 GPUs in 2-GPU jobs: eight places, split 3:1 by weight (ties to the older job).
        assert placed == {"heavy": 6, "light": 2}


class TestDemoMode:
    def nodes(self, backend: CompositeBackend) -> dict[str, NodeInfo]:
        return {n.name: n for n in backend.inventory().nodes}

    def demo(self, world: World, clock: VirtualClock) -> tuple[CompositeBackend, Controller]:
        real = SimBackend(world.tmp / "real", load_cluster(), clock)  # stands in for local
        real.nodes = tuple(
            NodeInfo(n.name.replace("sim", "box"), "local", n.cpu_milli, n.memory_mib, 8, "H100")
            for n in real.nodes[:1]
        )
        real._names = {n.name for n in real.nodes}
        real.slices = ()
        simulated = Faulty(SimBackend(world.tmp / "sim", load_cluster(), clock))
        backend = CompositeBackend([real, simulated], [simulated])
        return backend, world.controller(backend, clock)

    def test_simulated_nodes_take_only_jobs_that_ask(self, world: World) -> None:
        world.setup("{gpu: 100}")
        clock = VirtualClock()
        backend, controller = self.demo(world, clock)
        assert self.nodes(backend)["sim-dgx-0"].labels[ON_REQUEST_LABEL] == "true"
        world.submit("real", tasks(replicas=2, gpu="8"))  # 16 GPUs; the real node has 8
        world.submit("sim", tasks(gpu="8"), annotations="{sim.aipaas.dev/duration: '5'}")
        controller.run_cycle()
        real = world.job("real").status
        assert real is not None and real.reason == "Unschedulable"  # never on sim nodes
        sim = world.job("sim").status
        assert sim is not None and sim.tasks[0].node and sim.tasks[0].node.startswith("sim-")
        world.submit("small", tasks(gpu="8"))
        controller.run_cycle()
        assert world.job("small").status.tasks[0].node == "box-dgx-0"  # type: ignore[union-attr]

    def test_a_real_command_is_never_started_on_a_simulated_node(
        self, world: World, tmp_path: Path
    ) -> None:
        clock = VirtualClock()
        backend, _ = self.demo(world, clock)
        backend.inventory()
        request = LaunchRequest(
            "u.w-0.0", "w-0", "j", "acme", "sim-dgx-0", ("train",), {}, None, (0,), 1000,
            str(tmp_path / "w.log"),
        )  # fmt: skip
        with pytest.raises(ValueError, match="takes only jobs that ask for it"):
            backend.start(request)

    def test_a_member_that_fails_leaves_its_nodes_unknown(self, world: World) -> None:
        clock = VirtualClock()
        backend, _ = self.demo(world, clock)
        backend.inventory()
        failing = backend.backends[1]
        assert isinstance(failing, Faulty)
        failing.inventory_fails = failing.status_fails = True
        inventory = backend.inventory()
        assert inventory.unknown == {"sim-dgx-0", "sim-dgx-1"}
        assert {n.name for n in inventory.nodes} == {"box-dgx-0", "sim-dgx-0", "sim-dgx-1"}
        answer = backend.status(["nobody.w-0.0"])
        assert answer["nobody.w-0.0"].state is TaskState.UNREACHABLE


class TestFencingTokens:
    def test_a_lower_token_is_refused_and_persisted(self, tmp_path: Path) -> None:
        tokens = TokenFile(tmp_path / "fence")
        with tokens.admit(3, "a"):
            pass
        with tokens.admit(3, "b"):
            pass
        refused = pytest.raises(FencingRefused, match="carries token 2, but this backend has")
        with refused, tokens.admit(2, "c"):
            pass
        assert TokenFile(tmp_path / "fence").highest() == 3

    def test_the_sim_backend_refuses_a_stale_start(self, tmp_path: Path) -> None:
        sim = SimBackend(tmp_path, load_cluster())
        request = LaunchRequest(
            "u.w-0.0", "w-0", "j", "acme", "sim-dgx-0", ("train",), {}, None, (0,), 1000,
            str(tmp_path / "w.log"), fencing_token=5,
        )  # fmt: skip
        sim.start(request)
        again = SimBackend(tmp_path, load_cluster())  # another process, same records
        stale = LaunchRequest(
            "u.w-1.0", "w-1", "j", "acme", "sim-dgx-0", ("train",), {}, None, (1,), 1000,
            str(tmp_path / "w.log"), fencing_token=4,
        )  # fmt: skip
        with pytest.raises(FencingRefused):
            again.start(stale)
        assert again.status(["u.w-1.0"])["u.w-1.0"].state is TaskState.UNKNOWN
