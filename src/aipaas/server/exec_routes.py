"""Running a command in a running task: ``POST /api/v1/jobs/{name}/exec?tenant=T``.

Who calls it: ``aipaas exec job/NAME [--task T] -- CMD`` (cli/exec.py). The body names the
command, the task (``worker-0``; none: the job's first running task) and a timeout; the answer
is the task it ran in, the command's exit code and its output (stdout and stderr together).

Only members of the job's tenant whose role may write jobs may run commands in its tasks (a
viewer gets 403); a caller of another tenant is told the job does not exist (404), as for any
read of it. The command runs where the task runs, as the task's user, in its working directory,
with its environment, inside its container when it has one: the process's backend does it
through the function the composition root gives ``create_app`` (``task_exec``; cli/
control_runtime.py builds it from the backend's capability, backends/task_exec.py), since the
API never imports a backend. A server whose backend cannot (simulated nodes), or that runs no
backend of its own, answers 503. The interactive session (server/exec_session.py) checks
the same, in the same order (``task_to_enter``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import HTTPConnection

from aipaas.api.job import Job, TaskPhase
from aipaas.errors import Conflict, Forbidden, NotFound, Unavailable
from aipaas.server.auth import principal_cache, principal_of
from aipaas.server.service import ObjectService
from aipaas.store import Store, TaskRecord, TaskRepository
from aipaas.tenancy.principal import Principal, Verb

#: (request id, command, timeout seconds) -> (exit code, output), None when the task does not
#: run on this process's backend
TaskExecutor = Callable[[str, Sequence[str], float], tuple[int, bytes] | None]
MAX_TIMEOUT_SECONDS = 3600

router = APIRouter(tags=["exec"])  # under routes.router's /api/v1
Caller = Annotated[Principal, Depends(principal_of)]
TenantQuery = Annotated[str | None, Query(max_length=63, description="Tenant (admins)")]


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    command: list[Annotated[str, Field(max_length=65536)]] = Field(min_length=1, max_length=1024)
    task: str | None = Field(default=None, max_length=80, description="worker-0; none: the first")
    timeout_seconds: int = Field(default=60, ge=1, le=MAX_TIMEOUT_SECONDS, alias="timeoutSeconds")


@router.post("/jobs/{name}/exec", summary="Run a command in a running task of the job")
def exec_in_task(
    name: str, body: ExecRequest, request: Request, caller: Caller, tenant: TenantQuery = None
) -> dict[str, Any]:
    """The task's name, the command's exit code and its output (at most 1 MiB)."""
    executor: TaskExecutor | None = getattr(request.app.state, "task_exec", None)
    cannot = "this server's backend cannot run commands in tasks (aipaas exec)"
    record = task_to_enter(
        request, caller, name, tenant, body.task, unavailable=None if executor else cannot
    )
    assert executor is not None and record.request_id is not None
    answer = executor(record.request_id, body.command, float(body.timeout_seconds))
    if answer is None:
        raise Conflict(f"task {record.name} is not running on this server's backend any more")
    code, output = answer
    return {"task": record.name, "exitCode": code, "output": output.decode(errors="replace")}


def task_to_enter(
    connection: HTTPConnection,
    caller: Principal,
    name: str,
    tenant: str | None,
    task: str | None,
    *,
    unavailable: str | None,
) -> TaskRecord:
    """The running task a command may be run in (``task``; None: the job's first running),
    checked in this order for ``aipaas exec`` and its interactive session alike.

    Raises:
        NotFound: no such job for the caller (another tenant's job too, as for a read), or no
            such task of it.
        Forbidden: the caller's role may not write jobs (a viewer).
        Unavailable: ``unavailable`` is said (why this server cannot).
        Conflict: the task is not running.
    """
    store: Store = connection.app.state.store
    service = ObjectService(store, caller, identity_changed=principal_cache(connection).forget_all)
    job = service.get("Job", name, tenant)  # another tenant's job: 404, as for a read
    assert isinstance(job, Job)
    if not caller.may(Verb.WRITE, "Job"):
        raise Forbidden(f"role {caller.role} may not run commands in the tasks of jobs")
    records = sorted(TaskRepository(store).for_job(job.metadata.uid or ""), key=lambda r: r.rank)
    if task is not None and task not in {r.name for r in records}:
        known = ", ".join(r.name for r in records) or "none yet"
        raise NotFound(f"job {name} has no task {task} (tasks: {known})")
    if unavailable is not None:  # said first: no task would be any different
        raise Unavailable(unavailable)
    chosen = [r for r in records if task in (None, r.name)]
    running = [r for r in chosen if r.phase == TaskPhase.RUNNING.value and r.request_id]
    if not running:
        what = f"task {task}" if task else f"no task of job {name}"
        phases = ", ".join(f"{r.name} {r.phase}" for r in chosen) or "no tasks"
        raise Conflict(f"{what} is not running ({phases}): exec needs a running task")
    return running[0]
