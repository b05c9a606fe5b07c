"""The Ray backend against a real Ray cluster (ray_cluster.py: a head and three nodes with four
fake GPUs each), driven by the controller as a server drives it.

One cluster for the module (Ray is slow to start on two cores); the node-removal test goes last
because it takes a node away.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aipaas.backends.base import Backend, LaunchRequest, TaskState
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRecord, TaskRepository
from tests.integration.ray_cluster import (
    GPUS_PER_NODE,
    RayCluster,
    World,
    cycle_until,
    ray_cluster,
    world,
)

pytest.importorskip("ray", reason="ray is not installed (the ray extra; scripts/setup.sh)")


from aipaas.backends.ray.backend import RayBackend
from aipaas.backends.ray.supervisor import SUPERVISOR_NAME

__all__ = ["ray_cluster", "world"]  # fixtures, used by name

pytestmark = pytest.mark.slow


@pytest.fixture
def backend(ray_cluster: RayCluster, tmp_path: Path) -> Iterator[Backend]:
    from aipaas.backends.ray.registry import ray_backend

    made = ray_backend(tmp_path / "run", ray_cluster.address)
    yield made
    made.close()


def python_task(
    script: str, *, replicas: int = 1, gpu: str = "", policy: str = "Never", limit: int = 0
) -> str:
    resources = "{cpu: 1, memory: 64Mi" + (f", gpu: {gpu}" if gpu else "") + "}"
    return (
        f"    - name: worker\n      replicas: {replicas}\n"
        f"      command: [{sys.executable}, -c, {script!r}]\n"
        f"      resources: {resources}\n"
        f"      restartPolicy: {policy}\n      backoffLimit: {limit}\n"
    )


def records(world: World, job: str) -> list[TaskRecord]:
    return TaskRepository(world.store).for_job(world.job(job).metadata.uid or "")


def held_tasks(marker: str) -> list[str]:
    """The request ids the backend's supervisor actor holds (submitted, their end not yet
    written down by the backend) that contain ``marker``: one per start, never two."""
    import ray

    held: list[str] = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] != "aipaas" or not actor["name"].startswith(SUPERVISOR_NAME):
            continue
        try:  # one per driver (supervisors.py); an earlier one may be retired meanwhile
            supervisor = ray.get_actor(actor["name"], namespace="aipaas")
            held += ray.get(supervisor.tasks.remote(), timeout=60)
        except (ValueError, ray.exceptions.RayActorError):
            continue
    return [rid for rid in held if marker in rid]


def actors_of(world: World, job: str) -> list[str]:
    """The tasks of a job the supervisor holds."""
    return held_tasks(world.job(job).metadata.uid or "")


def groups_of(uid: str) -> list[dict[str, Any]]:
    """The job's placement groups Ray holds (created or waiting; removed ones left out)."""
    from ray.util.placement_group import placement_group_table

    return [
        g
        for g in placement_group_table().values()
        if uid in str(g.get("name")) and g.get("state") != "REMOVED"
    ]


def described(pids: list[int]) -> list[str]:
    """Each process's command line and parent (what was left, when a test fails)."""
    found = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[-160:]
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        found.append(f"{pid} (parent {parent}): {cmdline.decode(errors='replace')}")
    return found


def processes_with(marker: str) -> list[int]:
    """Processes of this host whose command line carries ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


ENV_SCRIPT = (
    "import os; print(' '.join(f'{k}={os.environ.get(k)}' for k in"
    " ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES')))"
)


def test_gang_with_gpus_runs_with_env_devices_and_logs_by_task(
    world: World, backend: Backend, ray_cluster: RayCluster
) -> None:
    import ray

    controller = world.controller(backend)
    world.submit("gang", python_task(ENV_SCRIPT, replicas=2, gpu="2"))
    world.submit("half", python_task(ENV_SCRIPT, replicas=2, gpu="{fraction: 0.5}"))
    uid = world.job("gang").metadata.uid or ""

    def explain() -> object:
        return [(r.name, r.phase, r.node, r.message) for r in records(world, "gang")], [
            (r.name, r.phase, r.node, r.message) for r in records(world, "half")
        ]

    cycle_until(controller, lambda: bool(groups_of(uid)), timeout=60, explain=explain)
    # The gang is one placement group: a bundle per task, each on the node aipaas chose.
    (group,) = groups_of(uid)
    gang_nodes = [r.node for r in records(world, "gang")]
    assert group["name"] == f"aipaas-pg-{uid}.0"
    assert [b.get("GPU") for b in group["bundles"].values()] == [2.0, 2.0]
    assert [b.get("CPU") for b in group["bundles"].values()] == [1.0, 1.0]
    distinct = len(set(gang_nodes)) == 2
    assert group["strategy"] == ("STRICT_SPREAD" if distinct else "PACK")
    cycle_until(
        controller,
        lambda: world.phase("gang") == "Succeeded" and world.phase("half") == "Succeeded",
        timeout=60,
        explain=explain,
    )
    half_name = f"aipaas-pg-{world.job('half').metadata.uid}.0"
    table = ray.util.placement_group_table().values()
    (half_group,) = [g for g in table if g["name"] == half_name]
    assert [b.get("GPU") for b in half_group["bundles"].values()] == [0.5, 0.5]  # fractions
    addresses = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}  # type: ignore[no-untyped-call]
    by_rank: dict[str, dict[str, str]] = {}
    for record in records(world, "gang"):
        assert record.log_path is not None and record.log_path.endswith(f"{record.name}.log")
        text = Path(record.log_path).read_text().split()
        env = dict(item.split("=", 1) for item in text)
        by_rank[env["RANK"]] = env
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] in addresses  # the master's node address, not its name
        assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2  # Ray's GPU ids for 2 GPUs
        assert all(0 <= int(g) < GPUS_PER_NODE for g in env["CUDA_VISIBLE_DEVICES"].split(","))
    assert sorted(by_rank) == ["0", "1"]
    assert by_rank["0"]["MASTER_PORT"] == by_rank["1"]["MASTER_PORT"]
    gang = records(world, "gang")
    if gang[0].node == gang[1].node:  # on one node Ray never hands a GPU out twice
        assert not set(by_rank["0"]["CUDA_VISIBLE_DEVICES"].split(",")) & set(
            by_rank["1"]["CUDA_VISIBLE_DEVICES"].split(",")
        )
    for half in records(world, "half"):
        assert half.log_path is not None
        cuda = Path(half.log_path).read_text().split("CUDA_VISIBLE_DEVICES=")[1]
        assert len(cuda.split(",")) == 1
    # Ended tasks and their groups are gone once their exit codes are recorded.
    cycle_until(controller, lambda: not actors_of(world, "gang") and not actors_of(world, "half"))
    assert groups_of(uid) == [] and groups_of(world.job("half").metadata.uid or "") == []


def test_a_failing_task_restarts_per_its_policy(
    world: World, backend: Backend, tmp_path: Path
) -> None:
    import ray

    controller = world.controller(backend, backoff_seconds=0.05)
    marker = tmp_path / "tried"
    script = (
        f"import os, sys; p = {str(marker)!r}; first = not os.path.exists(p); "
        "open(p, 'w').close(); sys.exit(7 if first else 0)"
    )
    world.submit("flaky", python_task(script, gpu="1", policy="OnFailure", limit=2))
    cycle_until(
        controller,
        lambda: world.phase("flaky") == "Succeeded",
        timeout=60,
        explain=lambda: (records(world, "flaky"), world.job("flaky").status, held_tasks("")),
    )
    status = world.job("flaky").status
    assert status is not None and status.tasks[0].restarts == 1
    assert world.reasons("flaky").count("TaskRestarting") == 1
    (record,) = records(world, "flaky")
    assert record.attempt == 1  # the second attempt: a new request id, a new Ray task
    # A task alone is pinned to its node without a placement group (groups.py), in either
    # attempt.
    names = {g["name"] for g in ray.util.placement_group_table().values()}
    assert not [name for name in names if record.job_uid in name]


def test_a_task_restarted_alone_takes_its_bundle_again(
    world: World, backend: Backend, tmp_path: Path
) -> None:
    """Ray keeps a bundle reserved until its whole group ends: a task of a gang that restarts
    while the others run must take its old bundle (a group of its own could not be placed
    on a node whose GPUs the old bundle still holds)."""
    import ray

    controller = world.controller(backend, backoff_seconds=0.05)
    marker = tmp_path / "failed-once"
    script = (
        f"import os, sys, time; p = {str(marker)!r}; rank = os.environ['RANK'];"
        " first = rank == '0' and not os.path.exists(p); first and open(p, 'w').close();"
        " sys.exit(7) if first else time.sleep(6 if rank == '1' else 0)"
    )
    # Every GPU of a node per task: the old bundle holds all of them.
    task = python_task(script, replicas=2, gpu=str(GPUS_PER_NODE), policy="OnFailure", limit=2)
    world.submit("pair", task)
    cycle_until(controller, lambda: world.phase("pair") == "Succeeded", timeout=60)
    first, second = records(world, "pair")
    assert (first.attempt, second.attempt) == (1, 0)
    uid = first.job_uid
    names = {g["name"] for g in ray.util.placement_group_table().values() if uid in g["name"]}
    assert names == {f"aipaas-pg-{uid}.0"}  # the restart used the gang's group
    cycle_until(controller, lambda: groups_of(uid) == [])


def test_cancel_stops_the_real_work(world: World, backend: Backend) -> None:
    controller = world.controller(backend, stop_grace_seconds=1)
    marker = f"aipaas-ray-cancel-{uuid.uuid4().hex[:8]}"
    # It ignores SIGTERM and starts a grandchild: only the kill of the whole group ends both.
    script = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]]);"
        " time.sleep(300)"
    )
    task = python_task(script, replicas=2, gpu="1").replace(
        f"{script!r}]", f"{script!r}, {marker}]"
    )
    world.submit("long", task)
    cycle_until(
        controller,
        lambda: world.phase("long") == "Running" and len(processes_with(marker)) >= 4,
    )
    world.service.cancel("long", "acme")
    cycle_until(controller, lambda: world.phase("long") == "Cancelled")
    assert described(processes_with(marker)) == []
    cycle_until(controller, lambda: not actors_of(world, "long"))


def test_a_restarted_controller_adopts_running_work(
    world: World, backend: Backend, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    from aipaas.backends.ray.registry import ray_backend

    first = world.controller(backend)
    counter = tmp_path / "starts"
    script = f"import time; open({str(counter)!r}, 'a').write('x'); time.sleep(4)"
    world.submit("survivor", python_task(script, replicas=2, gpu="1"))
    cycle_until(first, lambda: world.phase("survivor") == "Running")
    assert len(actors_of(world, "survivor")) == 2  # Running: both started in Ray
    backend.close()
    # A new backend and controller: nothing shared with the first but the store and run dir.
    again = ray_backend(tmp_path / "run", ray_cluster.address)
    try:
        second: Controller = world.controller(again)
        for _ in range(5):
            second.run_cycle()
            assert len(actors_of(world, "survivor")) == 2  # adopted, not started again
        cycle_until(second, lambda: world.phase("survivor") == "Succeeded")
    finally:
        again.close()
    assert counter.read_text() == "xx"
    assert "TaskLost" not in world.reasons("survivor")
    assert all(r.attempt == 0 for r in records(world, "survivor"))


def test_a_driver_killed_mid_run_is_replaced_and_nothing_is_lost(
    world: World, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """The Ray driver runs in a process of its own (a dead cluster head ends it, not the
    server): killed mid-run, the controller sees the backend unreachable, concludes nothing,
    and the next driver finds the actor by name and sees the task finish."""
    made = RayBackend(tmp_path / "run", ray_cluster.address, retry_seconds=0.5)
    try:
        controller = world.controller(made)
        world.submit("steady", python_task("import time; time.sleep(4)", gpu="1"))
        cycle_until(controller, lambda: world.phase("steady") == "Running")
        first = made.driver_pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        cycle_until(
            controller,
            lambda: world.phase("steady") == "Succeeded",
            timeout=60,
            explain=lambda: (records(world, "steady"), world.job("steady").status),
        )
        assert made.driver_pid not in (None, first)
        assert "TaskLost" not in world.reasons("steady")
        assert [r.attempt for r in records(world, "steady")] == [0]
    finally:
        made.close()


def unplaced(rid: str, gpus: int, log: Path, command: tuple[str, ...] = ("true",)) -> LaunchRequest:
    return LaunchRequest(
        request_id=rid,
        task="worker-0",
        job="never",
        tenant="acme",
        node="ray-gpu-a",
        command=command,
        env={},
        working_dir=None,
        gpus=tuple(range(gpus)),
        gpu_milli=1000,
        log_path=str(log),
    )


def test_an_actor_ray_will_not_place_is_lost_not_running_forever(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """Ray's accounting says no where aipaas's said yes: more GPUs than the node has (Ray
    refuses at once), or GPUs held by work aipaas does not count (the start deadline passes)."""
    made = RayBackend(tmp_path / "run", ray_cluster.address, start_seconds=2)
    # The holder runs under a backend of its own, with the default start deadline: a first
    # task (a new supervisor, a new worker) may take more than 2 s to start on a busy machine.
    other = RayBackend(tmp_path / "other", ray_cluster.address)
    made.inventory()
    other.inventory()
    # More than the node has: refused at once (the controller marks the task lost), no
    # placement group left waiting in Ray.
    # (The start is not awaited: the driver records the refusal, the status says it.)
    made.start(unplaced("big.worker-0.0", 2 * GPUS_PER_NODE, tmp_path / "big.log"))
    refused = made.status(["big.worker-0.0"])["big.worker-0.0"]
    assert refused.state is TaskState.LOST
    assert "start failed: Ray could not place the gang on node ray-gpu-a" in refused.message
    assert groups_of("big.worker-0.0") == []
    # A task started behind the controller's back holds every GPU of the node: the next
    # task (alone: pinned to that node) waits in Ray, and is given up at its deadline.
    sleeper = ("sleep", "60")
    other.start(unplaced("holder.worker-0.0", GPUS_PER_NODE, tmp_path / "h.log", sleeper))
    try:
        deadline = time.monotonic() + 60
        while other.status(["holder.worker-0.0"])["holder.worker-0.0"].state != TaskState.RUNNING:
            assert time.monotonic() < deadline, "the holder never started"
            time.sleep(0.1)
        made.start(unplaced("busy.worker-0.0", 1, tmp_path / "busy.log"))
        waiting = made.status(["busy.worker-0.0"])["busy.worker-0.0"]
        assert waiting.state in (TaskState.UNKNOWN, TaskState.UNREACHABLE)  # not started
        assert groups_of("busy.worker-0.0") == []  # a task alone: pinned, no group
        time.sleep(2.5)
        answer = made.status(["busy.worker-0.0"])["busy.worker-0.0"]
        assert answer.state is TaskState.LOST
        assert "Ray did not start the task within 2 s" in answer.message
    finally:
        other.stop("holder.worker-0.0", 0.1)
    deadline = time.monotonic() + 60
    while other.status(["holder.worker-0.0"])["holder.worker-0.0"].state is TaskState.RUNNING:
        assert time.monotonic() < deadline, "the holder never stopped"
        time.sleep(0.1)
    assert held_tasks("big.worker-") == [] and held_tasks("busy.worker-") == []
    made.close()
    other.close()


SERVER_JOB = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: e2e, tenant: acme}}
spec:
  queue: research
  tasks:
    - name: worker
      replicas: 2
      command:
        - {python}
        - -c
        - |
          import os, time
          path = os.path.join({out!r}, os.environ["RANK"])
          print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], flush=True)
          open(path, "a").write("start\\n")
          time.sleep(6)
          open(path, "a").write("end\\n")
      resources: {{cpu: 1, memory: 64Mi, gpu: 1}}
"""


def test_kill_9_of_the_server_and_a_restart_adopt_the_running_work(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """The real server (`--backend ray --ray-address`): killed while its gang runs, restarted
    on the same data directory, it adopts both actors (never a third) and sees them finish."""
    from tests.support.server_process import SETUP, ServerProcess

    out = tmp_path / "out"
    out.mkdir()
    data = tmp_path / "data"
    options = ["--ray-address", ray_cluster.address]

    def actors() -> list[str]:
        return held_tasks(f"{uid}.worker-")

    def groups() -> list[str]:
        return [str(g["name"]) for g in groups_of(uid)]

    first = ServerProcess(data, backend="ray", extra=options).start()
    try:
        first.cli(
            "apply", "-f", "-", input=SETUP + SERVER_JOB.format(python=sys.executable, out=str(out))
        )
        first.wait_phase("e2e", "Running")
        uid = first.job("e2e")["metadata"]["uid"]
        deadline = time.monotonic() + 30
        while len(list(out.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sorted(actors()) == [f"{uid}.worker-{i}.0" for i in range(2)]
        assert groups() == [f"aipaas-pg-{uid}.0"]  # the gang: one placement group
    finally:
        first.kill9()
    second = ServerProcess(data, backend="ray", extra=options).start()
    try:
        deadline = time.monotonic() + 60
        while second.phase("e2e") != "Succeeded" and time.monotonic() < deadline:
            assert len(actors()) <= 2  # adopted by name: never started a second time
            assert len(groups()) <= 1  # the group adopted by name, never made twice
            time.sleep(0.3)
        assert second.phase("e2e") == "Succeeded"
        deadline = time.monotonic() + 10
        while groups() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert groups() == []  # removed once the gang ended
        with second.http() as client:
            logs = client.get("/jobs/e2e/logs", params={"tenant": "acme", "task": "worker-1"})
        assert logs.status_code == 200 and "rank 1 of 2" in logs.text
        assert "rank 0" not in logs.text
    finally:
        second.stop()
    for rank in ("0", "1"):
        assert (out / rank).read_text() == "start\nend\n"  # started once, ended once


def test_a_removed_node_loses_its_task_which_is_placed_again(
    world: World, backend: Backend, ray_cluster: RayCluster
) -> None:
    # The inventory read often: the controller learns at once that the node is not ready
    # (the backend finds its raylet gone well before Ray's health checks call it dead).
    controller = world.controller(backend, backoff_seconds=0.05, inventory_seconds=0.2)
    marker = f"aipaas-ray-node-{uuid.uuid4().hex[:8]}"
    # Four GPUs: the task fills a node, so the one it runs on is known from its record.
    task = python_task(
        "import time; time.sleep(300)", gpu=str(GPUS_PER_NODE), policy="OnFailure", limit=3
    )
    world.submit("mover", task.replace("time.sleep(300)'", f"time.sleep(300)', {marker}"))
    cycle_until(controller, lambda: world.phase("mover") == "Running")
    (before,) = records(world, "mover")
    assert before.node in ray_cluster.nodes
    ray_cluster.remove(before.node)
    cycle_until(
        controller,
        # A restart the controller placed before its inventory saw the node go fails at once
        # (the backend finds the node's raylet gone) and counts as an attempt: one or two.
        lambda: (
            records(world, "mover")[0].attempt >= 1
            and records(world, "mover")[0].node != before.node
            and records(world, "mover")[0].phase == "Running"
        ),
        timeout=60,
        explain=lambda: (records(world, "mover"), world.job("mover").status),
    )
    (after,) = records(world, "mover")
    assert after.node != before.node and after.node in ray_cluster.nodes
    assert "TaskFailed" in world.reasons("mover") or "TaskLost" in world.reasons("mover")
    node_names = {n.name for n in backend.inventory().nodes}
    assert before.node not in node_names
    world.service.cancel("mover", "acme")
    cycle_until(controller, lambda: world.phase("mover") == "Cancelled")
    assert described(processes_with(marker)) == []
