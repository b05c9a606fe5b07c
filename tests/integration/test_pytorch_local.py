"""Real PyTorch training (CPU, gloo) through the API on the local backend (`aipaas up`, tasks
run as the tenant's user): DDP by the platform's variables, torchrun across two tasks, a rank
killed mid-training restarting its gang from a checkpoint at a relative path, a preempted job
resuming after its preemptor, and elastic torchrun growing from 1 to 3 tasks and shrinking to
2. The tests' own PyTorch (tests/support/model_venv.py) is made when absent; they skip only when
pip cannot install it, and say so."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.pytorch_jobs import (
    apply,
    check_ddp_ends_with_equal_parameters,
    check_elastic_torchrun_grows_to_three_and_shrinks_to_two,
    check_killed_rank_restarts_the_gang_from_its_checkpoint,
    check_preempted_job_resumes_after_its_preemptor_ends,
    check_torchrun_across_two_tasks_ends_equal,
    job,
    torch_python,
)
from tests.support.server_process import SETUP, ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python() -> Path:
    return torch_python()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("torch") / "data", verb="up").start()
    apply(process, SETUP)
    yield process
    process.close()


def test_ddp_by_the_platforms_variables_ends_with_equal_parameters(
    python: Path, server: ServerProcess
) -> None:
    trained = check_ddp_ends_with_equal_parameters(server, python, steps=150, timeout=240)
    assert trained != finals_untrained(python)


def finals_untrained(python: Path) -> list[float]:
    """The parameters before training (the script's seed), to tell that training moved them."""
    code = (
        "import torch, json; torch.manual_seed(0); m = torch.nn.Linear(16, 1); "
        "print(json.dumps([float(v) for p in m.parameters() for v in p.detach().flatten()]))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    values: list[float] = json.loads(done.stdout)
    return values


def test_torchrun_across_two_tasks_from_the_platforms_variables(
    python: Path, server: ServerProcess
) -> None:
    check_torchrun_across_two_tasks_ends_equal(server, python, timeout=240)


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint(
    python: Path, server: ServerProcess
) -> None:
    check_killed_rank_restarts_the_gang_from_its_checkpoint(server, python)


def test_a_preempted_job_resumes_after_its_preemptor_ends(
    python: Path, server: ServerProcess
) -> None:
    # 2 tasks x 3 CPUs of the server's 8: the preemptor's 4 CPUs need this job's room
    check_preempted_job_resumes_after_its_preemptor_ends(
        server, python, task_cpu="3", preemptor_cpu="4"
    )


def test_elastic_torchrun_grows_to_three_and_shrinks_to_two(
    python: Path, server: ServerProcess
) -> None:
    # 6 of the server's 8 CPUs taken: one elastic task (2 CPUs) fits; once the job holds 6,
    # a critical job of 4 takes back one elastic task
    apply(server, job("blocker", ["/bin/sleep", "600"], replicas=1, cpu="6"))
    server.wait_phase("blocker", "Running", timeout=60)
    critical = "  priority: critical\n"
    urgent = job("urgent", ["/bin/sleep", "600"], replicas=1, cpu="4", extra=critical)
    check_elastic_torchrun_grows_to_three_and_shrinks_to_two(
        server, python, blocker="blocker", task_cpu="2", urgent=urgent
    )
