"""The live controller on the sim backend: a NoExecute taint that appears on a node ends the
tasks there as Kubernetes' taint manager does: at once without a toleration, tolerationSeconds
after the controller first saw the taint with one, never with a toleration without seconds."""

from __future__ import annotations

from dataclasses import replace

from aipaas.backends.base import NodeInfo
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.scheduler.framework.constraints import TAINTS_ANNOTATION
from aipaas.store import TaskRepository
from tests.support.ctl_world import World

NODE = NodeInfo(
    name="a", backend="sim", cpu_milli=64_000, memory_mib=262_144, gpu_count=4, gpu_model="H100"
)
TASK = """    - name: w
      replicas: 1
      command: [x]
      resources: {gpu: 1}
"""


def tolerating(seconds: int | None) -> str:
    extra = "" if seconds is None else f", tolerationSeconds: {seconds}"
    return f"  tolerations: [{{key: maintenance, operator: Exists, effect: NoExecute{extra}}}]\n"


def running(world: World) -> set[str]:
    return {r.job_name for r in TaskRepository(world.store).active() if not r.stopping}


def test_a_taint_that_appears_ends_each_task_when_its_toleration_runs_out(world: World) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", [NODE], clock, default_duration=100_000)
    controller = Controller(
        world.store, backend, log_dir=world.tmp / "logs", clock=clock, inventory_seconds=0
    )
    world.submit("bare", TASK)
    world.submit("sixty", TASK, extra=tolerating(60))
    world.submit("forever", TASK, extra=tolerating(None))
    controller.run_cycle()
    assert running(world) == {"bare", "sixty", "forever"}
    clock.advance(100)  # the tasks have run 100 s when the taint appears
    backend.nodes = (replace(NODE, annotations={TAINTS_ANNOTATION: "maintenance=now:NoExecute"}),)
    controller.run_cycle()
    assert running(world) == {"sixty", "forever"}  # no toleration: at once
    assert world.job("bare").status.reason == "NoExecute"  # type: ignore[union-attr]
    clock.advance(59)
    controller.run_cycle()
    assert running(world) == {"sixty", "forever"}  # 59 s after the taint appeared
    clock.advance(1)
    controller.run_cycle()
    assert running(world) == {"forever"}  # 60 s: its toleration ran out
    clock.advance(3600)
    controller.run_cycle()
    # The node stays tainted: neither the task without a toleration nor the one tolerating
    # it for a while is placed there again.
    assert running(world) == {"forever"}
    assert "tolerated only 60 s" in world.job("sixty").status.message  # type: ignore[union-attr]
