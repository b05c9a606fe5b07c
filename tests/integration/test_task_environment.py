"""What a task of the local backend sees, through a real server as root (tasks run as the
tenant's user): the distributed-training variables every backend gives, its user's HOME and
PATH, ``$(VAR)`` expanded in its command as Kubernetes does, a program its user cannot run
refused before start with a sentence naming path and user, and a working directory that
survives the task's restarts (a checkpoint at a relative path is found by the next attempt).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from aipaas.backends.base import MASTER_PORTS
from aipaas.backends.local.isolation import TASK_PATH
from tests.support.server_process import TASK_PYTHON, ServerProcess, shared_dir

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="tasks run as the tenant's own user only under a root server"
)

DUMP_ENV = """
import json, os, sys
out = sys.argv[1]
with open(os.path.join(out, "env-" + os.environ["RANK"]), "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv[2:], "cwd": os.getcwd()}, f)
"""

# Resumes from the step counter at a relative path; the first attempt fails after step 2.
TRAIN = """
import os, sys
out = sys.argv[1]
os.makedirs("ckpt", exist_ok=True)
step = int(open("ckpt/step").read()) if os.path.exists("ckpt/step") else 0
with open(os.path.join(out, "resumed"), "a") as f:
    f.write(f"{os.environ['AIPAAS_ATTEMPT']} {step} {os.environ['AIPAAS_WORKDIR']}\\n")
while step < 4:
    step += 1
    with open("ckpt/step.tmp", "w") as f:
        f.write(str(step))
    os.replace("ckpt/step.tmp", "ckpt/step")
    if step == 2 and os.environ["AIPAAS_ATTEMPT"] == "0":
        sys.exit(3)
"""


def job(name: str, command: list[str], *, replicas: int = 1, extra: str = "") -> str:
    return (
        "apiVersion: aipaas/v1\nkind: Job\n"
        f"metadata: {{name: {name}, tenant: acme}}\n"
        f"spec:\n  queue: research\n  tasks:\n    - name: worker\n"
        f"      replicas: {replicas}\n      command: {json.dumps(command)}\n{extra}"
        "      resources: {cpu: 100m, memory: 64Mi}\n"
    )


def apply(server: ServerProcess, text: str) -> None:
    with server.http() as client:
        client.post("/apply", content=text).raise_for_status()


def test_every_rank_sees_the_same_distributed_variables_and_its_users_home_and_path(
    tenant_server: ServerProcess,
) -> None:
    out = shared_dir()
    command = [TASK_PYTHON, "-c", DUMP_ENV, str(out), "$(RANK)", "$$(RANK)", "$(NOPE)", "$RANK"]
    apply(tenant_server, job("envs", command, replicas=2, extra="      env: {GREETING: hi}\n"))
    tenant_server.wait_phase("envs", "Succeeded")
    seen = {rank: json.loads((out / f"env-{rank}").read_text()) for rank in (0, 1)}
    ports = {seen[rank]["env"]["MASTER_PORT"] for rank in (0, 1)}
    assert len(ports) == 1 and int(ports.pop()) in MASTER_PORTS
    for rank in (0, 1):
        env = seen[rank]["env"]
        assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
        }
        assert env["NODE_RANK"] == "0" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["USER"] == "aipaas-t-acme" and env["PATH"] == TASK_PATH
        assert env["HOME"] == env["AIPAAS_WORKDIR"] == seen[rank]["cwd"]
        # $(VAR) expanded as Kubernetes does: $$ escapes, an unknown name and $VAR stay.
        assert seen[rank]["argv"] == [str(rank), "$(RANK)", "$(NOPE)", "$RANK"]
    assert seen[0]["env"]["AIPAAS_WORKDIR"] != seen[1]["env"]["AIPAAS_WORKDIR"]


def test_a_program_the_tasks_user_cannot_run_is_refused_naming_the_path_and_the_user(
    tenant_server: ServerProcess,
) -> None:
    private = Path(tempfile.mkdtemp(prefix="aipaas-private-"))  # 0700 root, like /root
    try:
        program = private / "venv" / "bin" / "python"
        program.parent.mkdir(parents=True)
        shutil.copy(TASK_PYTHON, program)
        apply(tenant_server, job("private", [str(program), "-c", "print('ran')"]))
        status = tenant_server.wait_phase("private", "Failed")["status"]
        message = status["tasks"][0]["message"]
        assert str(program) in message and "aipaas-t-acme" in message, message
        assert f"cannot enter {private}" in message, message
        with tenant_server.http() as client:
            log = client.get("/jobs/private/logs", params={"tenant": "acme"}).text
        assert "ran" not in log.replace("cannot", "")
    finally:
        shutil.rmtree(private)


def test_a_restarted_task_resumes_from_a_checkpoint_at_a_relative_path(
    tenant_server: ServerProcess,
) -> None:
    out = shared_dir()
    extra = "      restartPolicy: OnFailure\n      backoffLimit: 2\n"
    apply(tenant_server, job("resume", [TASK_PYTHON, "-c", TRAIN, str(out)], extra=extra))
    done = tenant_server.wait_phase("resume", "Succeeded", timeout=120)
    assert done["status"]["tasks"][0]["restarts"] == 1
    attempts = [line.split() for line in (out / "resumed").read_text().splitlines()]
    # The first attempt started at step 0, the second where the first left off, in the same
    # directory (the one AIPAAS_WORKDIR names).
    assert [(a[0], a[1]) for a in attempts] == [("0", "0"), ("1", "2")]
    assert attempts[0][2] == attempts[1][2]
    assert Path(attempts[1][2], "ckpt", "step").read_text() == "4"
