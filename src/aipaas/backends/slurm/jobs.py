"""One task = one Slurm batch job: its name, its script and sbatch options, and what Slurm's
record of it (``squeue --json``) means for the controller.

The job's name is ``aipaas.<request id>`` (its comment says tenant/job/task): Slurm itself
remembers which attempt a job runs, so a restarted server finds its jobs by name and never
submits an attempt twice. The script exports the task's environment (RANK, WORLD_SIZE,
MASTER_ADDR, ..., the SLURM_* rank variables that match them, a HOME and PATH of the task's
own; CUDA_VISIBLE_DEVICES is Slurm's own, from the GRES it bound), enters the
working directory, runs the command and writes its exit code beside the backend's record (read
when Slurm has forgotten the job: it keeps finished jobs MinJobAge seconds, and sacct needs
slurmdbd).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from aipaas.backends.base import LaunchRequest, TaskState, TaskStatus

NAME_PREFIX = "aipaas."
EXIT_FILE = "exit"

#: Slurm job states in which the job has not ended yet
WAITING = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
)
ACTIVE = frozenset(
    {"RUNNING", "SUSPENDED", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "STOPPED"}
)
#: ended because of the machine or the cluster, not the program: Lost (rescheduled)
LOST_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "DEADLINE", "REVOKED"})


def job_name(request_id: str) -> str:
    return NAME_PREFIX + request_id


def request_of(name: str) -> str | None:
    return name[len(NAME_PREFIX) :] if name.startswith(NAME_PREFIX) else None


def sbatch_options(
    request: LaunchRequest,
    *,
    log_path: str,
    workdir: str,
    node: str | None,
    partition: str | None,
) -> list[str]:
    """Pinned mode names the node (``node``); third-party mode only the partition."""
    gpus = len(request.devices) or len(request.gpus)
    if request.gpu_milli and not gpus:
        gpus = 1  # a fraction of a GPU: Slurm gives whole GPUs (no sharing on this path)
    options = [
        f"--job-name={job_name(request.request_id)}",
        f"--comment=aipaas:{request.tenant}/{request.job}/{request.task}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={max(1, math.ceil(request.cpu_milli / 1000))}",
        f"--output={log_path}",
        f"--error={log_path}",
        "--open-mode=append",
        f"--chdir={workdir}",
        "--no-requeue",  # a restart is the controller's decision (a new attempt, a new job)
        "--export=NIL",  # none of the server's variables; the script sets the task's own
        "--kill-on-invalid-dep=yes",
    ]
    if request.memory_mib:
        options.append(f"--mem={request.memory_mib}M")
    if gpus:
        options.append(f"--gres=gpu:{gpus}")
    if node is not None:
        options.append(f"--nodelist={node}")
    if partition:
        options.append(f"--partition={partition}")
    return options


#: Slurm's names for what the platform's variables say (one batch job per task: Slurm's own
#: values would be SLURM_PROCID=0 and SLURM_NTASKS=1 in every task, and PyTorch Lightning or
#: submitit, which read these, would take every task for rank 0 of a job of one)
SLURM_RANK_VARIABLES = {
    "SLURM_PROCID": "RANK",
    "SLURM_NTASKS": "WORLD_SIZE",
    "SLURM_LOCALID": "LOCAL_RANK",
    "SLURM_NODEID": "NODE_RANK",
    "SLURM_NTASKS_PER_NODE": "LOCAL_WORLD_SIZE",  # Lightning refuses SLURM_NTASKS without it
    # Lightning checks its num_nodes against SLURM_NNODES (1 in a batch job of one task)
    "SLURM_NNODES": "AIPAAS_NODES",
    "SLURM_JOB_NUM_NODES": "AIPAAS_NODES",
}
#: a task's PATH when its job does not set one (sbatch --export=NIL gives it slurmd's)
TASK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def task_environment(env: Mapping[str, str], home: str | None) -> dict[str, str]:
    """The task's variables: the platform's, the SLURM_* rank variables that match them, and
    a HOME (the task's directory) and PATH of its own unless the job sets them."""
    result = {"PATH": TASK_PATH} | ({"HOME": home} if home else {}) | dict(env)
    for slurm_name, name in SLURM_RANK_VARIABLES.items():
        if name in env:
            result[slurm_name] = env[name]
    return result


def batch_script(
    request: LaunchRequest,
    env: Mapping[str, str],
    exit_file: str | None,
    home: str | None = None,
    *,
    setup: Sequence[str] | None = None,
) -> str:
    """The job's script: the task's variables, its directory, its setup's lines (if the job
    has ``spec.setup``: slurm/containers.py), its command, its exit code."""
    lines = ["#!/bin/bash", f"# aipaas task {request.tenant}/{request.job}/{request.task}"]
    for key, value in sorted(task_environment(env, home).items()):
        if key.isidentifier():
            lines.append(f"export {key}={shlex.quote(value)}")
    if not (request.devices or request.gpus or request.gpu_milli):
        lines.append("export CUDA_VISIBLE_DEVICES=")  # asked for none: sees none
    lines.append("export PYTHONUNBUFFERED=1")
    if request.working_dir:
        where = shlex.quote(request.working_dir)
        lines.append(
            f"cd {where} || {{ echo 'aipaas: cannot enter the working directory "
            f"'{where}; code=127; }}"
        )
    if setup:
        lines.append('if [ -z "${code:-}" ]; then')
        lines.extend("  " + line for line in setup)
        lines.append("fi")
    lines.append(f'[ -n "${{code:-}}" ] || {{ {shlex.join(request.command)}; code=$?; }}')
    if exit_file is not None:
        target = shlex.quote(exit_file)
        temporary = shlex.quote(exit_file + ".tmp")
        lines.append(
            f"{{ echo $code > {temporary} && mv -f {temporary} {target}; }} 2>/dev/null || true"
        )
    lines.append("exit $code")
    return "\n".join(lines) + "\n"


def job_state(job: Mapping[str, Any]) -> str:
    value = job.get("job_state")
    if isinstance(value, list):
        return str(value[0]).upper() if value else "UNKNOWN"
    return str(value or "UNKNOWN").upper()


def exit_code(job: Mapping[str, Any]) -> int | None:
    """A shell's exit code (128+N for signal N) from Slurm's record: a wait status in 22.05,
    an object with ``return_code`` and ``signal`` later."""
    value = job.get("exit_code")
    if isinstance(value, int):
        signal = value & 0x7F
        return 128 + signal if signal else (value >> 8) & 0xFF
    if isinstance(value, dict):
        raw = value.get("signal")
        number = _number(raw.get("id") if isinstance(raw, dict) else None)
        if number:
            return 128 + number
        return _number(value.get("return_code"))
    return None


def _number(value: Any) -> int | None:
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set", True) and "number" in value else None
    return int(value) if isinstance(value, int) else None


def status_of(request_id: str, job: Mapping[str, Any], *, stopped: bool) -> TaskStatus:
    """What Slurm's record of the task's job means. A job Slurm still holds (PENDING) has not
    started: while the task is being started that is ``UNKNOWN`` with Slurm's reason (the
    controller asks the idempotent start again and keeps the task Starting), or ``RUNNING``
    once a stop was asked (it is not confirmed stopped before Slurm says so)."""
    state = job_state(job)
    reason = str(job.get("state_reason") or "")
    job_id = job.get("job_id")
    if state in WAITING:
        why = "pending in Slurm" + (f" ({reason})" if reason and reason != "None" else "")
        why += f", job {job_id}"
        return TaskStatus(
            request_id, TaskState.RUNNING if stopped else TaskState.UNKNOWN, None, why
        )
    if state in ACTIVE:
        return TaskStatus(request_id, TaskState.RUNNING, None, f"Slurm job {job_id} {state}")
    code = exit_code(job)
    if state == "COMPLETED":
        return TaskStatus(request_id, TaskState.SUCCEEDED, 0, "exit code 0")
    if state == "CANCELLED":
        if stopped:
            return TaskStatus(request_id, TaskState.FAILED, code or 143, "stopped")
        return TaskStatus(request_id, TaskState.LOST, None, f"Slurm job {job_id} was cancelled")
    if state in LOST_STATES:
        return TaskStatus(request_id, TaskState.LOST, None, f"Slurm job {job_id} {state}: {reason}")
    if state == "OUT_OF_MEMORY":
        return TaskStatus(request_id, TaskState.FAILED, code or 137, "out of memory (Slurm)")
    if state == "TIMEOUT":
        return TaskStatus(request_id, TaskState.FAILED, code or 143, "Slurm's time limit")
    # FAILED and anything else ended: the program's exit code
    if code is None or code == 0:
        code = 1  # Slurm failed it without a code of its own (a launch failure)
    return TaskStatus(request_id, TaskState.FAILED, code, f"exit code {code}")
