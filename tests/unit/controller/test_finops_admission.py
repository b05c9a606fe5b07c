"""What the live controller makes of the tenant admin's and the budgets' limits: a user's quota
inside the tenant, a queue whose admission a budget stopped, a queue whose priority a budget
lowered."""

from __future__ import annotations

from aipaas.api.finops import ADMISSION_STOPPED, LOWERED_QUEUE_PRIORITY, PRIORITY_LOWERED
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Role, Tenant
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.scheduler.batch.from_api import queue_tree
from aipaas.server.service import ObjectService
from aipaas.tenancy.principal import Principal
from tests.support.ctl_world import World

USERS = """
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: member, quota: {gpu: 2}}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: bob, tenant: acme}
spec: {role: member}
"""


def sim(world: World) -> Controller:
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=1000)
    return world.controller(backend, clock)


def submit(world: World, user: str, name: str, gpus: int) -> None:
    text = (
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: acme}}\n"
        f"spec: {{queue: research, tasks: [{{name: w, command: [x], "
        f"resources: {{gpu: {gpus}}}}}]}}\n"
    )
    ObjectService(world.store, Principal(user, "acme", Role.MEMBER)).apply_text(text)


def status(world: World, name: str) -> tuple[str, str, str]:
    job = world.job(name)
    assert job.status is not None
    return job.status.phase.value, job.status.reason or "", job.status.message or ""


def test_a_users_quota_holds_its_jobs_and_no_one_elses(world: World) -> None:
    world.setup("{gpu: 16}")
    world.service.apply_text(USERS)
    controller = sim(world)
    submit(world, "alice", "first", 2)
    submit(world, "alice", "second", 1)
    submit(world, "bob", "other", 4)
    controller.run_cycle()
    assert status(world, "first")[0] == "Running"
    assert status(world, "other")[0] == "Running"
    phase, reason, message = status(world, "second")
    assert (phase, reason) == ("Pending", "QuotaExceeded")
    assert "user alice quota" in message


def test_a_stopped_queue_starts_nothing_new_until_the_hold_is_lifted(world: World) -> None:
    world.setup("{gpu: 16}")
    controller = sim(world)
    queue = world.store.get("Queue", "acme", "research")
    annotations = {**queue.metadata.annotations, ADMISSION_STOPPED: "monthly"}
    meta = queue.metadata.model_copy(update={"annotations": annotations})
    held = world.store.update(queue.model_copy(update={"metadata": meta}))
    world.submit("waits", "    - {name: w, command: [x], resources: {gpu: 1}}\n")
    controller.run_cycle()
    phase, reason, message = status(world, "waits")
    assert (phase, reason) == ("Pending", "AdmissionStopped")
    assert "budget monthly" in message
    meta = held.metadata.model_copy(update={"annotations": {}})
    world.store.update(held.model_copy(update={"metadata": meta}))
    controller.run_cycle()
    assert status(world, "waits")[0] == "Running"


def test_a_lowered_queue_comes_after_its_siblings() -> None:
    tenant = Tenant.model_validate({"metadata": {"name": "acme"}})
    queues = [
        Queue.model_validate(
            {
                "metadata": {"name": name, "tenant": "acme", "annotations": annotations},
                "spec": {"priority": 5},
            }
        )
        for name, annotations in (("lowered", {PRIORITY_LOWERED: "b"}), ("kept", {}))
    ]
    tree = queue_tree([tenant], queues)
    assert tree["acme/lowered"].priority == LOWERED_QUEUE_PRIORITY
    assert tree["acme/kept"].priority == 5
