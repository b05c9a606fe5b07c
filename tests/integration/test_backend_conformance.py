"""The backend contract (tests/support/backend_contract.py: exit codes, idempotent start, unknown
ids, an asynchronous stop, level-triggered status across backend objects, fencing) run against every
backend this machine can run, each built by the server's registry (``make_backend``):

- sim: simulated nodes on a virtual clock (a task's exit code is its
  ``sim.aipaas.dev/exit-code`` annotation, its run time its duration);
- local: real processes on this machine;
- demo: the composite of the local backend and the simulated cluster, a task on the local node;
- slurm: a real Slurm cluster (slurm_cluster.py: munged, slurmctld, slurmds n1 and n2);
- ray: a real Ray cluster (ray_cluster.py: a head and three nodes on this host).

Kubernetes runs the same tests in tests/kube/test_kube_contract.py (its real API
server is a fixture of that folder). Run by scripts/test.sh with the integration tests; this
module shares the Slurm worker (conftest.py ``_SLURM_MODULES``). A cluster missing from this
machine (Slurm, Ray not installed) skips its backend and says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aipaas.backends.base import Backend, LaunchRequest
from aipaas.backends.registry import make_backend
from aipaas.backends.sim.backend import EXIT_CODE_ANNOTATION
from aipaas.clock import VirtualClock
from tests.integration.ray_cluster import RayCluster, ray_cluster
from tests.integration.slurm_cluster import SlurmCluster, slurm_cluster
from tests.support.backend_contract import (
    Harness,
    Task,
    shell_task,
    test_a_new_backend_object_reports_a_task_an_earlier_one_started,
    test_a_second_start_of_one_request_id_runs_it_once,
    test_a_stale_fencing_token_is_refused,
    test_a_stopped_task_is_reported_ended,
    test_a_task_ends_with_its_exit_code,
    test_an_id_never_started_is_unknown,
)

__all__ = [  # the contract's tests and the cluster fixtures, used by name
    "ray_cluster",
    "slurm_cluster",
    "test_a_new_backend_object_reports_a_task_an_earlier_one_started",
    "test_a_second_start_of_one_request_id_runs_it_once",
    "test_a_stale_fencing_token_is_refused",
    "test_a_stopped_task_is_reported_ended",
    "test_a_task_ends_with_its_exit_code",
    "test_an_id_never_started_is_unknown",
]

#: the backends of this module, in the order they run (the clusters last: they start slowly)
BACKENDS = ("sim", "local", "demo", "slurm", "ray")


def launch(
    rid: str,
    node: str,
    command: tuple[str, ...],
    log_path: Path,
    fencing_token: int | None,
    **extra: object,
) -> LaunchRequest:
    """A request as the controller makes one for task w-0 of a job of tenant acme."""
    return LaunchRequest(
        request_id=rid,
        task="w-0",
        job=rid.split(".", 1)[0],
        tenant="acme",
        node=node,
        command=command,
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path=str(log_path),
        fencing_token=fencing_token,
        cpu_milli=1000,
        memory_mib=128,
        **extra,  # type: ignore[arg-type]
    )


class SimHarness(Harness):
    name = "sim"

    def __init__(self, tmp: Path) -> None:
        super().__init__()
        self.tmp = tmp
        self.clock = VirtualClock()

    def make(self) -> Backend:
        return make_backend("sim", self.tmp / "run", clock=self.clock)

    def request(self, rid: str, task: Task, *, fencing_token: int | None = None) -> LaunchRequest:
        node = self.made[0].inventory().nodes[0].name
        return launch(
            rid,
            node,
            ("train",),
            self.tmp / "logs" / f"{rid}.log",
            fencing_token,
            duration_seconds=task.seconds,
            annotations={EXIT_CODE_ANNOTATION: str(task.exit_code)},
            simulated=True,
        )

    def starts(self, rid: str) -> int:
        # no process runs: each start the simulator takes writes one line to the task's log
        log = self.tmp / "logs" / f"{rid}.log"
        return log.read_text().count(" started on ") if log.exists() else 0

    def play(self) -> None:
        self.clock.advance(1)  # the simulated tasks' time passes


class ProcessHarness(Harness):
    """A backend whose tasks are real processes of this host (they write into ``tmp``)."""

    def __init__(self, name: str, tmp: Path, **options: object) -> None:
        super().__init__()
        self.name = name
        self.tmp = tmp
        self.options = options
        self.node = ""

    def make(self) -> Backend:
        return make_backend(self.name, self.tmp / "run", **self.options)  # type: ignore[arg-type]

    def on_node(self) -> str:
        """The node its tasks run on: the first of the inventory's that runs processes."""
        if not self.node:
            nodes = self.made[0].inventory().nodes
            self.node = next(n.name for n in nodes if n.backend != "sim")
        return self.node

    def request(self, rid: str, task: Task, *, fencing_token: int | None = None) -> LaunchRequest:
        command = shell_task(task, self.tmp / f"{rid}.started")
        return launch(rid, self.on_node(), command, self.tmp / "logs" / f"{rid}.log", fencing_token)

    def starts(self, rid: str) -> int:
        started = self.tmp / f"{rid}.started"
        return len(started.read_text().splitlines()) if started.exists() else 0


@pytest.fixture(scope="module", params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so that pytest runs one backend's tests together."""
    return str(request.param)


@pytest.fixture
def harness(backend_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    made: Harness
    if backend_name == "sim":
        made = SimHarness(tmp_path)
    elif backend_name == "local":
        made = ProcessHarness("local", tmp_path, local_cpu_milli=2000)
    elif backend_name == "demo":
        made = ProcessHarness("demo", tmp_path, local_cpu_milli=2000, clock=VirtualClock())
    elif backend_name == "slurm":
        cluster: SlurmCluster = request.getfixturevalue("slurm_cluster")
        made = ProcessHarness("slurm", tmp_path, slurm_conf=cluster.conf)
        made.node = "n1"
    else:
        ray: RayCluster = request.getfixturevalue("ray_cluster")
        made = ProcessHarness("ray", tmp_path, ray_address=ray.address)
        made.node = "ray-gpu-a"
    made.backend()  # the first object: the one a request's node is read from
    yield made
    made.close()
