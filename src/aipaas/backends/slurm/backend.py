"""Runs each task as a Slurm batch job on a real Slurm cluster (its own slurmctld and slurmds).

Two modes:
- ``pinned`` (default): the nodes are Slurm's nodes; aipaas's scheduler chooses, and each task's
  job names its node (``--nodelist``) and asks for the task's CPUs, memory and GPUs (``--gres``).
  Slurm binds the GPUs (CUDA_VISIBLE_DEVICES is its choice on that node).
- ``third-party``: each Slurm partition is one node for aipaas (its healthy nodes added up);
  a task's job names only the partition, and Slurm places and queues it. A task Slurm holds
  stays Starting, its status saying Slurm's pending reason.

The backend's memory is Slurm itself (jobs are found by name: jobs.py) plus a small directory per
attempt under ``run_dir/slurm/<request id>``: the script, the job id, a stop mark and the exit code
the script writes (on a real cluster the run directory and the logs must be on a filesystem the
nodes share, as Slurm's --output is).

A task's working directory (its HOME, ``AIPAAS_WORKDIR``, where it starts) is not the
attempt's: it is ``run_dir/slurm/workdirs/<work key>``, the same for every attempt of one task of
one job (``LaunchRequest.work_key``), so a restart finds what the last attempt wrote there (a
checkpoint at a relative path), on whichever node Slurm runs it, since the run directory is the
one the nodes share.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from aipaas.backends import rendezvous, task_session
from aipaas.backends.base import Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.datasets import env_name
from aipaas.backends.expansion import expand_command
from aipaas.backends.setup import SETUP_DIR_VARIABLE, failure_message, setup_key
from aipaas.backends.slurm import accounting, jobs
from aipaas.backends.slurm import containers as slurm_containers
from aipaas.backends.slurm.commands import SlurmCommands, SlurmError
from aipaas.backends.slurm.datasets import SlurmDatasetCaches
from aipaas.backends.slurm.inventory import (
    BACKEND,
    LABEL_PREFIX,
    SlurmInventory,
    SlurmNode,
    read_nodes,
)
from aipaas.backends.slurm.partitions import partition_nodes
from aipaas.backends.slurm.power import SlurmPowerPool
from aipaas.backends.slurm.submitter import SUBMIT_ERROR, Submitter
from aipaas.backends.task_exec import ExecResult
from aipaas.backends.task_session import ProcessSession

log = logging.getLogger("aipaas.backends")

Mode = Literal["pinned", "third-party"]
MODES: tuple[Mode, ...] = ("pinned", "third-party")
#: one squeue answer serves the starts of one controller cycle (they only look for jobs a
#: server before this one submitted, in any squeue this process read)
JOBS_CACHE_SECONDS = 0.3
#: ... and the status calls of one cycle (cycles are at least 0.2 s apart): each cycle's first
#: status reads squeue again; a 0.3 s answer served the next cycle too, which then saw no
#: change, and a task's start or end reached the API a cycle later
STATUS_CACHE_SECONDS = 0.1
#: a cluster without slurmdbd: sacct is not asked again for this long
NO_ACCOUNTING_SECONDS = 300.0
#: under the run directory: the tasks' working directories, one per ``work_key``
WORKDIRS = "workdirs"
#: in the attempt's directory: the path of the task's working directory (``aipaas exec`` runs
#: there)
WORKDIR_FILE = "workdir"


class SlurmBackend(SlurmPowerPool, SlurmDatasetCaches):  # datasets: slurm/datasets.py
    name = BACKEND

    def __init__(
        self,
        run_dir: Path,
        *,
        conf: Path | None = None,
        mode: Mode = "pinned",
        gpu_memory: str = "80Gi",
        commands: SlurmCommands | None = None,
        submit_workers: int = 0,
    ) -> None:
        """``submit_workers``: concurrent ``sbatch`` calls off the caller's thread
        (submitter.py); 0: each start submits before it returns."""
        if mode not in MODES:
            raise ValueError(f"slurm mode {mode!r}: one of {', '.join(MODES)}")
        if conf is not None and not conf.is_file():
            raise ValueError(f"slurm.conf {conf} does not exist")
        self.run_dir = (run_dir / "slurm").resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.mode: Mode = mode
        self.gpu_memory = gpu_memory
        self.commands = commands or SlurmCommands(conf)
        self._slurm: SlurmInventory | None = None
        self._jobs: tuple[float, dict[str, dict[str, Any]]] | None = None
        #: jobs were submitted since ``_jobs`` was read: status reads squeue again
        self._stale = False
        self._read_at = 0.0  # when the squeue in ``_jobs`` was asked (wall clock)
        self._submitter = Submitter(
            lambda args, script: self.commands.submit(args, script), _write, submit_workers
        )
        self._submitter.on_submitted = self._submitted
        self._partitions: dict[str, str] = {}  # third-party: node name -> partition
        self._no_accounting_until = 0.0

    # inventory ----------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        self._slurm = read_nodes(self.commands.nodes(), self.gpu_memory)
        if self.mode == "third-party":
            nodes, partition_slices = partition_nodes(self._slurm, self.gpu_memory)
            self._partitions = {n.name: n.labels[LABEL_PREFIX + "partition"] for n in nodes}
            features = frozenset({"slurm", "processes"})
            return Inventory(tuple(nodes), features, tuple(partition_slices))
        healthy = [n for n in self._slurm.nodes if n.healthy]
        for node in self._slurm.nodes:
            if not node.healthy:
                log.info("slurm node %s is out of service: %s", node.info.name, node.why)
        slices = tuple(
            s for s in self._slurm.slices if s.spec.node_name in {n.info.name for n in healthy}
        )
        inventory = Inventory(
            tuple(n.info for n in healthy),
            frozenset({"slurm", "processes"}),
            slices,
            # not responding, or drained by a node pool (backends/slurm/power.py): no new work
            unknown=frozenset(n.info.name for n in healthy if not n.responding)
            | (self.drained_pool_nodes() & {n.info.name for n in healthy}),
        )
        return self.with_cache_states(inventory)  # each node's dataset cache (node_datasets.py)

    def _node(self, name: str) -> SlurmNode | None:
        if self._slurm is None or name not in self._slurm.by_name:
            self._slurm = read_nodes(self.commands.nodes(), self.gpu_memory)
        return self._slurm.by_name.get(name)

    # start --------------------------------------------------------------------------------

    def start(self, request: LaunchRequest) -> None:
        directory = self._dir(request.request_id)
        if (directory / "job").exists() or self._submitter.in_flight(request.request_id):
            return  # submitted before (by this process or one before it)
        if (directory / SUBMIT_ERROR).exists():
            return  # sbatch refused it: the status says so (lost), a new attempt follows
        directory.mkdir(parents=True, exist_ok=True)
        # A job a server before this one submitted is in any squeue this process read (the
        # cached one of this cycle, at most JOBS_CACHE_SECONDS old): one squeue serves all
        # the starts of a cycle; this process's own submissions are in its run directory.
        found = self._jobs_by_name(fresh=False).get(jobs.job_name(request.request_id))
        if found is not None:
            # Submitted by a server that died before it wrote the id down: adopted.
            _write(directory / "job", str(found.get("job_id")))
            log.info("adopted Slurm job %s of %s", found.get("job_id"), request.request_id)
            return
        node, partition = self._where(request)
        # The task's working directory outlives the attempt (shared by the nodes, as the run
        # directory is): its HOME and, unless the job says, where it starts.
        home = self._workdir(request)
        home.mkdir(parents=True, exist_ok=True)
        _write(directory / WORKDIR_FILE, str(home))
        request = replace(request, env={**request.env, "AIPAAS_WORKDIR": str(home)})
        setup = setup_dir = None
        if request.setup:  # once per node before the task (backends/setup.py)
            key = setup_key(request.setup, request.workdir_archive, request.image)
            setup_dir = str(self.run_dir / "setup" / key)
            setup = slurm_containers.setup_lines(
                request, directory, setup_dir, _passed_names(request, str(home)), home=home
            )
        if request.image is not None:  # in its image, started by the staged command
            (directory / slurm_containers.CONTAINER_MARK).touch()  # aipaas exec enters it
            request = slurm_containers.container_request(
                request,
                directory,
                _passed_names(request, str(home)),
                slurm_containers.conf_path(self.run_dir),
                setup_dir,
                home=home,
            )
        request = self.stage_job(request, directory)  # its datasets first (slurm/datasets.py)
        env = dict(request.env)
        master = env.get("MASTER_ADDR", "")
        master_node = self._node(master) if master and self.mode == "pinned" else None
        if master_node is not None:
            env["MASTER_ADDR"] = master_node.address  # Slurm's NodeAddr: what resolves
            rendezvous.follow_master(env)  # an elastic job's endpoint: the same address
        # $(VAR) in the command, with the values the task gets (backends/expansion.py)
        variables = {name: env[name] for name in request.env}
        request = replace(request, command=expand_command(request.command, variables))
        script = directory / "job.sh"
        exit_file = str(directory / jobs.EXIT_FILE)
        text = jobs.batch_script(request, env, exit_file, str(home), setup=setup)
        _write(script, text, 0o700)
        log_path = Path(request.log_path) if request.log_path else directory / "output.log"
        _private_dir(log_path.parent)
        options = jobs.sbatch_options(
            request,
            log_path=str(log_path),
            workdir=request.working_dir or str(home),
            node=node,
            partition=partition,
        )
        self._submitter.submit(request.request_id, directory, options, script)

    def _submitted(self) -> None:
        self._stale = True  # the next status reads squeue again

    def _where(self, request: LaunchRequest) -> tuple[str | None, str | None]:
        """The node (pinned) or the partition (third-party) the task's job asks for."""
        if self.mode == "third-party":
            if request.node not in self._partitions:
                self.inventory()
            if request.node not in self._partitions:
                raise ValueError(f"node {request.node} is not a Slurm partition of this backend")
            return None, self._partitions[request.node]
        node = self._node(request.node)
        if node is None:
            raise ValueError(f"Slurm has no node {request.node}")
        return node.info.name, node.partitions[0] if node.partitions else None

    # stop, status -------------------------------------------------------------------------

    def exec_task(
        self, request_id: str, command: Sequence[str], timeout: float
    ) -> ExecResult | None:
        """``aipaas exec``: a step of the task's job beside its batch step (``srun --overlap``),
        in the task's directory; in its container (``podman exec``) when it has an image."""
        directory = self._dir(request_id)
        try:
            job_id = int((directory / "job").read_text().strip())
        except (OSError, ValueError):
            return None
        if (directory / jobs.EXIT_FILE).exists():
            return None
        home = self._home_of(directory)
        launch = slurm_containers.exec_launch(directory, request_id, command, home=home)
        return self.commands.step(job_id, launch, cwd=str(home), timeout=timeout)

    def open_session(
        self, request_id: str, command: Sequence[str], *, tty: bool, rows: int, cols: int
    ) -> ProcessSession | None:
        """``aipaas exec -i``: the step ``exec_task`` runs, with its input open; with ``tty``,
        ``srun --pty`` (in a terminal the server gives srun, whose size srun passes on)."""
        directory = self._dir(request_id)
        try:
            job_id = int((directory / "job").read_text().strip())
        except (OSError, ValueError):
            return None
        if (directory / jobs.EXIT_FILE).exists():
            return None
        home = self._home_of(directory)
        launch = slurm_containers.exec_launch(
            directory, request_id, command, interactive=True, tty=tty, home=home
        )
        argv = self.commands.step_command(job_id, launch, cwd=str(home), pty=tty)
        return task_session.spawn(argv, self.commands.environment, tty=tty, rows=rows, cols=cols)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        """scancel: Slurm sends SIGTERM, then SIGKILL after its KillWait (not ``grace_seconds``:
        the cluster's setting)."""
        directory = self._dir(request_id)
        if not directory.exists():
            return
        (directory / "stop").touch()
        self._submitter.wait(request_id)  # its job id first, to cancel the job
        job = self._jobs_by_name(fresh=True).get(jobs.job_name(request_id))
        if job is None or jobs.job_state(job) not in jobs.WAITING | jobs.ACTIVE:
            return
        try:
            self.commands.cancel([int(job["job_id"])])
        except SlurmError as err:
            if "already" not in str(err).lower():  # it ended meanwhile: nothing to stop
                raise
        self._jobs = None

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        known = self._jobs_by_name(fresh=self._stale, within=STATUS_CACHE_SECONDS)
        answers = {rid: self._status(rid, known.get(jobs.job_name(rid))) for rid in request_ids}
        return self._with_times(answers, known)

    def _with_times(
        self, answers: dict[str, TaskStatus], known: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, TaskStatus]:
        """The answers with the times Slurm really ran each job (accounting.py): a running
        job's start from slurmctld, an ended job's start and end from sacct (one call), else
        from slurmctld."""
        ended: dict[str, int] = {}  # request id -> Slurm job id
        for rid, answer in answers.items():
            job = known.get(jobs.job_name(rid))
            if answer.state is TaskState.RUNNING and job is not None:
                start, _ = accounting.squeue_times(job)
                answers[rid] = replace(answer, started_at=start)
            elif answer.state in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST):
                job_id = self._job_id(rid, job)
                if job_id is not None:
                    ended[rid] = job_id
        if not ended:
            return answers
        accounted = self._accounted_times(sorted(set(ended.values())))
        for rid, job_id in ended.items():
            job = known.get(jobs.job_name(rid))
            start, end = accounted.get(job_id) or (
                accounting.squeue_times(job) if job is not None else (None, None)
            )
            if end is not None:
                answers[rid] = replace(answers[rid], started_at=start, finished_at=end)
        return answers

    def _job_id(self, request_id: str, job: Mapping[str, Any] | None) -> int | None:
        if job is not None:
            return int(job["job_id"])
        job_file = self._dir(request_id) / "job"
        text = job_file.read_text().strip() if job_file.exists() else ""
        return int(text) if text.isdigit() else None

    def _accounted_times(self, job_ids: list[int]) -> dict[int, accounting.Times]:
        """Start and end per job from sacct; none where the cluster keeps no accounting (not
        asked again for ``NO_ACCOUNTING_SECONDS``)."""
        now = time.monotonic()
        if now < self._no_accounting_until:
            return {}
        try:
            return accounting.sacct_times(self.commands.accounting_records(job_ids))
        except SlurmError as err:
            log.info("no accounting for Slurm jobs %s: %s", job_ids, err)
            self._no_accounting_until = now + NO_ACCOUNTING_SECONDS
            return {}

    def _status(self, request_id: str, job: Mapping[str, Any] | None) -> TaskStatus:
        directory = self._dir(request_id)
        stopped = (directory / "stop").exists()
        if job is not None:
            return _with_marks(directory, jobs.status_of(request_id, job, stopped=stopped))
        if not directory.exists():
            return TaskStatus(request_id, TaskState.UNKNOWN)
        if self._submitter.in_flight(request_id):
            return TaskStatus(request_id, TaskState.UNKNOWN, None, "being submitted to Slurm")
        with contextlib.suppress(FileNotFoundError):
            why = (directory / SUBMIT_ERROR).read_text()
            return TaskStatus(request_id, TaskState.LOST, None, why)
        exit_file = directory / jobs.EXIT_FILE
        if exit_file.exists():  # Slurm forgot the job (MinJobAge); its script told us
            try:
                code = int(exit_file.read_text().strip())
            except ValueError:
                return TaskStatus(request_id, TaskState.LOST, None, "unreadable exit code")
            state = TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
            return _with_marks(directory, TaskStatus(request_id, state, code, f"exit code {code}"))
        job_file = directory / "job"
        if job_file.exists():
            job_id = job_file.read_text().strip()
            if job_file.stat().st_mtime >= self._read_at:  # submitted after that squeue
                return TaskStatus(
                    request_id, TaskState.UNKNOWN, None, f"submitted to Slurm as job {job_id}"
                )
            accounted = self._accounted(job_id)
            if accounted is not None:
                return jobs.status_of(request_id, accounted, stopped=stopped)
            if stopped:
                return TaskStatus(request_id, TaskState.FAILED, 143, "stopped")
            return TaskStatus(
                request_id, TaskState.LOST, None, f"Slurm no longer knows job {job_id}"
            )
        return TaskStatus(request_id, TaskState.UNKNOWN, None, "not submitted")

    def _accounted(self, job_id: str) -> dict[str, Any] | None:
        """The job from sacct, where the cluster keeps accounting (asked again at most every
        ``NO_ACCOUNTING_SECONDS`` once it said it keeps none)."""
        now = time.monotonic()
        if not job_id.isdigit() or now < self._no_accounting_until:
            return None
        try:
            return self.commands.accounted(int(job_id))
        except SlurmError as err:
            log.info("no accounting for Slurm job %s: %s", job_id, err)
            self._no_accounting_until = now + NO_ACCOUNTING_SECONDS
            return None

    def _jobs_by_name(
        self, *, fresh: bool, within: float = JOBS_CACHE_SECONDS
    ) -> dict[str, dict[str, Any]]:
        """aipaas's jobs by name (squeue read again unless ``fresh`` is false and the last
        answer is younger than ``within`` seconds); a name submitted twice (never by us)
        counts its newest."""
        now = time.monotonic()
        if not fresh and self._jobs is not None and now - self._jobs[0] < within:
            return self._jobs[1]
        found: dict[str, dict[str, Any]] = {}
        # Before the call: a submission that ends while squeue runs marks the answer stale.
        asked_at, self._stale = time.time(), False
        try:
            listed = self.commands.jobs()
        except Exception:
            self._stale = True
            raise
        self._read_at = asked_at
        for job in listed:
            name = str(job.get("name") or "")
            if jobs.request_of(name) is None:
                continue
            if name not in found or int(job.get("job_id") or 0) > int(found[name]["job_id"]):
                found[name] = job
        self._jobs = (now, found)
        return found

    def close(self) -> None:
        self._submitter.close()  # the calls in flight write their job ids down
        self._jobs = None

    def _dir(self, request_id: str) -> Path:
        if "/" in request_id or request_id.startswith(".") or not request_id:
            raise ValueError(f"invalid request id {request_id!r}")
        return self.run_dir / request_id

    def _workdir(self, request: LaunchRequest) -> Path:
        """The task's working directory: one per ``work_key`` (every attempt of one task of
        one job), under the run directory the nodes share; the attempt's own without one."""
        key = request.work_key or request.request_id
        if "/" in key or key.startswith(".") or not key:
            raise ValueError(f"invalid work key {key!r}")
        return self.run_dir / WORKDIRS / key

    @staticmethod
    def _home_of(directory: Path) -> Path:
        """The working directory the attempt's start chose (the attempt's directory for an
        attempt started before working directories were kept apart)."""
        try:
            return Path((directory / WORKDIR_FILE).read_text().strip())
        except OSError:
            return directory


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _private_dir(path: Path) -> None:
    """The log directory: the server's alone (0700), as the local backend makes it."""
    for directory in [*reversed(path.parents), path]:
        if not directory.exists():
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=0o700)


def _passed_names(request: LaunchRequest, home: str) -> list[str]:
    """The variables a task in an image is given (by name: the batch script exports them):
    the task's, Slurm's rank variables, its datasets' and outputs' and its setup's."""
    names = set(jobs.task_environment(request.env, home))
    names |= {env_name(mount.name) for mount in request.datasets}
    names |= {"AIPAAS_DATASETS", "AIPAAS_OUTPUT_PATH", SETUP_DIR_VARIABLE}
    names |= {f"AIPAAS_OUTPUT_{index}_PATH" for index in range(len(request.outputs))}
    return sorted(name for name in names if name.isidentifier())


def _with_marks(directory: Path, status: TaskStatus) -> TaskStatus:
    """The status with what the batch script marked: its setup failed, or the container was
    killed over its memory limit (slurm/containers.py)."""
    if status.state != TaskState.FAILED or status.exit_code is None:
        return status
    code = status.exit_code
    if (directory / slurm_containers.SETUP_FAILED_MARK).exists():
        return replace(status, message=failure_message(code))
    if (directory / slurm_containers.OOM_MARK).exists():
        return replace(status, message=f"OOMKilled: over its memory limit (exit code {code})")
    return status
