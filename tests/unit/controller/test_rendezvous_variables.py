"""An elastic job's tasks get the c10d rendezvous endpoint torchrun reads (PET_* variables and
AIPAAS_RDZV_ENDPOINT): rank 0's node and the job's MASTER_PORT for every member, the same for
one that starts later; a backend that moves MASTER_ADDR or MASTER_PORT moves the endpoint with
it; a job of fixed size gets none; the job's own env wins."""

from __future__ import annotations

from aipaas.api.job import Job
from aipaas.api.registry import load_objects
from aipaas.backends import rendezvous
from aipaas.controller.launch import make_request
from aipaas.store.tasks import TaskRecord


def job(min_available: str = "  minAvailable: 1\n", env: str = "") -> Job:
    (loaded,) = load_objects(
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: j, tenant: acme, uid: u-1}\n"
        f"spec:\n  queue: q\n{min_available}  tasks:\n    - name: w\n      replicas: 3\n"
        f"      command: [torchrun, train.py]\n{env}"
    )
    assert isinstance(loaded, Job)
    return loaded


def records(phases: list[str]) -> list[TaskRecord]:
    return [
        TaskRecord("u-1", "acme", "j", f"w-{rank}", "w", rank, rank).with_(
            phase=phase, node=None if phase == "Pending" else f"n{rank}"
        )
        for rank, phase in enumerate(phases)
    ]


def test_every_member_reads_rank_zeros_node_and_the_jobs_port() -> None:
    first = records(["Running", "Pending", "Pending"])
    alone = make_request(job(), first[0], first, {}).env
    grown = records(["Running", "Running", "Starting"])
    late = make_request(job(), grown[2], grown, {}).env
    assert alone["PET_RDZV_ENDPOINT"] == f"n0:{alone['MASTER_PORT']}"
    assert alone["AIPAAS_RDZV_ENDPOINT"] == alone["PET_RDZV_ENDPOINT"]
    # the member that joins later reads the same endpoint while the job's size changed
    assert late["PET_RDZV_ENDPOINT"] == alone["PET_RDZV_ENDPOINT"]
    assert (alone["WORLD_SIZE"], late["WORLD_SIZE"]) == ("1", "3")
    for env in (alone, late):
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_NNODES"] == "1:3"
        assert env["PET_RDZV_ID"] == "u-1"
        assert env["PET_MAX_RESTARTS"] == str(rendezvous.MAX_RESTARTS)
        assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # rank 0's agent hosts the store, the others' connect to it
    assert (alone["PET_RDZV_CONF"], late["PET_RDZV_CONF"]) == ("is_host=1", "is_host=0")


def test_a_job_of_fixed_size_gets_no_rendezvous() -> None:
    placed = records(["Running", "Running", "Running"])
    env = make_request(job(min_available=""), placed[1], placed, {}).env
    assert not [name for name in env if name.startswith(("PET_", "AIPAAS_RDZV", "TORCH_"))]


def test_the_jobs_own_torchrun_variables_win() -> None:
    placed = records(["Running", "Pending", "Pending"])
    given = '      env: {PET_MAX_RESTARTS: "7", PET_RDZV_CONF: "last_call_timeout=2"}\n'
    env = make_request(job(env=given), placed[0], placed, {}).env
    assert env["PET_MAX_RESTARTS"] == "7"
    assert env["PET_RDZV_CONF"] == "last_call_timeout=2,is_host=1"  # rank 0 hosts the store
    assert env["PET_NNODES"] == "1:3"


def test_the_endpoint_follows_where_a_backend_moves_the_master() -> None:
    placed = records(["Running", "Pending", "Pending"])
    env = dict(make_request(job(), placed[0], placed, {}).env)
    env["MASTER_ADDR"], env["MASTER_PORT"] = "10.0.0.5", "20123"
    rendezvous.follow_master(env)
    assert env["AIPAAS_RDZV_ENDPOINT"] == env["PET_RDZV_ENDPOINT"] == "10.0.0.5:20123"
    fixed = {"MASTER_ADDR": "a", "MASTER_PORT": "1"}
    rendezvous.follow_master(fixed)
    assert fixed == {"MASTER_ADDR": "a", "MASTER_PORT": "1"}
