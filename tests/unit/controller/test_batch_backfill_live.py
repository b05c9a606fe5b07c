"""Backfill with reservations in the live controller (issue 11 item 4), on both kinds of
cluster: GPUs by count, and GPUs that publish ResourceSlices (``resources.gpu`` compiles to a
DRA claim). The first gang that cannot start is reserved the nodes it will use when the
running jobs reach their time limits; a later job starts now only if it ends before that."""

from __future__ import annotations

from aipaas.clock import VirtualClock
from tests.support.ctl_world import World, sim_backend


def tasks(replicas: int, gpus: int) -> str:
    return f"""    - name: worker
      replicas: {replicas}
      command: [train]
      resources: {{cpu: 1, memory: 1Gi, gpu: {gpus}}}
"""


def test_a_reserved_gang_is_not_delayed_by_a_job_without_a_time_limit(
    world: World, cluster_kind: str
) -> None:
    world.setup("{gpu: 100}")
    clock = VirtualClock()
    controller = world.controller(sim_backend(world, clock, cluster_kind, 3600), clock)
    # 8 GPUs until t=600 on one node, 4 until t=1200 on the other: 4 GPUs free now.
    world.submit("first", tasks(1, 8), extra="  timeLimit: 10m\n")
    world.submit("second", tasks(1, 4), extra="  timeLimit: 20m\n")
    controller.run_cycle()
    assert [world.phase(n) for n in ("first", "second")] == ["Running", "Running"]
    # The 16-GPU gang fits once both have ended: reserved both nodes from t=1200.
    clock.advance(1)
    world.submit("gang", tasks(2, 8), extra="  timeLimit: 1h\n")
    world.submit("endless", tasks(1, 4))
    world.submit("short", tasks(1, 4), extra="  timeLimit: 5m\n")
    controller.run_cycle()
    gang = world.job("gang").status
    assert gang is not None and gang.phase.value == "Pending"
    assert "reserved" in gang.message
    # A job without a time limit would hold the gang's GPUs past its start: it waits; one
    # that ends before the reservation backfills the 4 free GPUs.
    endless = world.job("endless").status
    assert endless is not None and endless.phase.value == "Pending"
    assert "no node takes this job" not in endless.message  # it would, were it not held back
    assert world.phase("short") == "Running"
    # Both time limits pass: the gang starts, on the GPUs the reservation kept.
    for _ in range(4):
        clock.advance(400)
        controller.run_cycle()
    assert world.phase("gang") == "Running"
    assert world.phase("endless") == "Pending"
