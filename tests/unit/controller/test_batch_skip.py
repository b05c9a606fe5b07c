"""The session is skipped when nothing it reads changed, and runs again on a change or when
something time-based comes due."""

from __future__ import annotations

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.batch_cycle import RECHECK_SECONDS
from tests.support.ctl_world import World

TASK = """    - name: w
      replicas: 1
      command: [train]
      resources: {cpu: 8, memory: 64Gi, gpu: 8}
"""


def test_quiet_cycles_skip_the_session(world: World) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=1000)
    controller = world.controller(backend, clock)
    for name in ("a", "b", "c"):  # 16 GPUs: c waits
        world.submit(name, TASK)
    for _ in range(3):
        controller.run_cycle()
    assert world.phase("c") == "Pending"
    before = controller.batch.sessions
    for _ in range(5):
        clock.advance(1)
        controller.run_cycle()
    assert controller.batch.sessions == before  # nothing changed: no session
    world.submit("d", TASK)
    controller.run_cycle()
    assert controller.batch.sessions == before + 1  # a new job: a session
    controller.run_cycle()
    controller.run_cycle()
    settled = controller.batch.sessions
    clock.advance(RECHECK_SECONDS + 1)
    controller.run_cycle()
    assert controller.batch.sessions == settled + 1  # and at least every RECHECK_SECONDS
    world.service.cancel("a", "acme")
    controller.run_cycle()
    controller.run_cycle()
    assert world.phase("c") == "Running"  # the room a cancelled job left is used
