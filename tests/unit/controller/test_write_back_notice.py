"""The controller tells its process which jobs each cycle's write-back changed (the log
followers wake on it rather than on a periodic database read)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from tests.support.ctl_world import World

TASKS = """    - name: worker
      replicas: 1
      command: [train]
      resources: {cpu: 1, memory: 1Gi}
"""


def test_write_back_names_the_jobs_it_changed(world: World) -> None:
    world.setup()
    clock = VirtualClock()
    backend = SimBackend(world.tmp / "run", load_cluster(), clock, default_duration=10)
    calls: list[tuple[list[str], str]] = []

    def written(uids: Sequence[str]) -> None:
        calls.append((list(uids), threading.current_thread().name))

    controller = world.controller(backend, clock, on_written=written)
    world.submit("one", TASKS)
    world.submit("two", TASKS)
    uid_one = world.job("one").metadata.uid or ""
    uid_two = world.job("two").metadata.uid or ""
    controller.run_cycle()  # both start: records and status written
    assert [sorted(uids) for uids, _ in calls] == [sorted([uid_one, uid_two])]
    calls.clear()
    controller.run_cycle()  # nothing changed: no one is told
    assert calls == []
    clock.advance(11)
    controller.run_cycle()  # both finish
    assert [sorted(uids) for uids, _ in calls] == [sorted([uid_one, uid_two])]
    assert world.phase("one") == world.phase("two") == "Succeeded"
