"""What the controller's launch request carries for every backend: ranks by node, the job's
grace period, the working-directory key shared by a task's attempts, limits, the uploaded
workdir and the command with ``$(VAR)`` expanded."""

from __future__ import annotations

from aipaas.api.job import DEFAULT_GRACE_SECONDS, Job
from aipaas.api.registry import load_objects
from aipaas.backends.base import MASTER_PORTS
from aipaas.controller.launch import make_request
from aipaas.store.tasks import TaskRecord

WORKDIR = "sha256-" + "a" * 64


def job(extra: str = "", limits: str = "") -> Job:
    (loaded,) = load_objects(
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j, tenant: acme, uid: u-1}\n"
        f"spec:\n  queue: q\n{extra}  tasks:\n    - name: w\n      replicas: 4\n"
        '      command: [train, "--rank=$(RANK)", "--nodes=$(NODE_RANK)", "$$(RANK)"]\n'
        f"{limits}"
    )
    assert isinstance(loaded, Job)
    return loaded


def records(nodes: list[str], attempt: int = 0) -> list[TaskRecord]:
    return [
        TaskRecord(
            job_uid="u-1",
            tenant="acme",
            job_name="j",
            name=f"w-{rank}",
            group_name="w",
            index=rank,
            rank=rank,
            node=node,
            attempt=attempt,
        )
        for rank, node in enumerate(nodes)
    ]


def test_ranks_count_per_node_and_nodes_in_the_order_of_their_lowest_rank() -> None:
    placed = records(["b", "a", "b", "a"])
    envs = [make_request(job(), r, placed, {"a": "slurm", "b": "slurm"}).env for r in placed]
    assert [e["NODE_RANK"] for e in envs] == ["0", "1", "0", "1"]  # b holds rank 0
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"b"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    assert int(envs[0]["MASTER_PORT"]) in MASTER_PORTS


def test_the_command_is_expanded_with_the_tasks_variables() -> None:
    placed = records(["b", "a", "b", "a"])
    request = make_request(job(), placed[3], placed, {})
    assert request.command == ("train", "--rank=3", "--nodes=1", "$(RANK)")


def test_a_pod_gets_its_command_as_written_for_kubernetes_to_expand() -> None:
    placed = records(["k", "k", "k", "k"])
    request = make_request(job(), placed[3], placed, {"k": "kubernetes"})
    assert request.command == ("train", "--rank=$(RANK)", "--nodes=$(NODE_RANK)", "$$(RANK)")


def test_the_grace_period_defaults_to_thirty_seconds_and_follows_the_job() -> None:
    placed = records(["a"] * 4)
    assert make_request(job(), placed[0], placed, {}).grace_seconds == DEFAULT_GRACE_SECONDS
    given = job("  terminationGracePeriodSeconds: 7\n")
    assert make_request(given, placed[0], placed, {}).grace_seconds == 7


def test_every_attempt_of_a_task_shares_its_working_directory_key() -> None:
    first, again = records(["a"] * 4), records(["a"] * 4, attempt=2)
    keys = {make_request(job(), r, first, {}).work_key for r in (first[1], again[1])}
    assert keys == {"u-1.w-1"}
    assert make_request(job(), first[0], first, {}).work_key != "u-1.w-1"


def test_limits_and_the_uploaded_workdir_reach_the_backend() -> None:
    placed = records(["a"] * 4)
    limited = job(f"  workdir: {WORKDIR}\n", "      limits: {cpu: 1500m, memory: 2Gi}\n")
    request = make_request(limited, placed[0], placed, {})
    assert (request.limit_cpu_milli, request.limit_memory_mib) == (1500, 2048)
    assert request.workdir_archive == WORKDIR
    unlimited = make_request(job(), placed[0], placed, {})
    assert (unlimited.limit_cpu_milli, unlimited.limit_memory_mib) == (0, 0)
    assert unlimited.workdir_archive is None
