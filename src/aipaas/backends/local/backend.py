"""Runs each task as a real process on this machine.

Each task has a directory under ``run_dir/<request_id>`` holding its pid and, once it ends, its
exit code (written by the runner, see runner.py). That directory is the backend's memory: a
restarted server finds its running tasks again, and starting an id whose directory exists does
nothing, so no task runs twice.

Who a task runs as and where is isolation.py's business: as root the server gives each tenant an
unprivileged user and a directory outside the data directory; otherwise tasks share the server's
user, and the backend says so (a warning and an annotation on its Node). The GPUs are read again
from NVML every ``gpu_discovery_seconds``; an NVML failure is logged and annotated, not hidden.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypedDict

from aipaas.api.devices import ResourceSlice
from aipaas.backends import containers, rendezvous
from aipaas.backends.base import Inventory, LaunchRequest, NodeInfo, TaskState, TaskStatus
from aipaas.backends.local import (
    container_launch,
    fake_gpus,
    limits,
    listeners,
    machine,
    runner,
    task_env,
)
from aipaas.backends.local.datasets import DatasetCacheConfig, LocalDatasetCaches
from aipaas.backends.local.gpu_usage import read_utilization
from aipaas.backends.local.isolation import (
    ISOLATION_ANNOTATION,
    IsolationError,
    TaskIdentity,
    TaskIsolation,
    TaskPlacer,
)
from aipaas.backends.local.machine import gpus_of
from aipaas.backends.local.nvml import DRIVER, Discovery, discover, visible_devices
from aipaas.backends.local.probe_exec import run_probe
from aipaas.backends.local.runner import LAUNCH_FILE
from aipaas.backends.local.task_exec import exec_in_task, open_session_in_task
from aipaas.backends.local.task_times import with_run_times
from aipaas.backends.setup import SETUP_DIR_VARIABLE, failure_message, setup_key
from aipaas.backends.task_exec import ExecResult
from aipaas.backends.task_session import ProcessSession
from aipaas.devices.gpu_health import gpu_annotations, slice_gpus
from aipaas.devices.share_enforcement import (
    HAMI_CORE_LIBRARY_ANNOTATION,
    share_enforcement_labels,
)

# The runner runs as a file (not ``-m``): it needs nothing of the package, so it starts fast.
RUNNER = str(Path(runner.__file__).resolve())

log = logging.getLogger(__name__)

#: The annotation on the local Node that says what NVML found (or why it found nothing).
GPU_ANNOTATION = "aipaas.dev/gpu-discovery"
ANNOTATION_MAX = 1024  # an annotation holds 4096 characters; many failing GPUs say no more
#: A claimed task directory without a runner is taken for a start that died only after this
#: long (a start takes milliseconds: younger, it may be another process's start under way).
CLAIM_GRACE_SECONDS = 10.0
#: The runner's own environment (it runs as the server's user): nothing of the job's.
RUNNER_PATH = "/usr/local/bin:/usr/bin:/bin"
#: after a task's grace period, how long its runner has to SIGKILL it and write its exit code
#: before the backend SIGKILLs the runner's group itself
KILL_MARGIN_SECONDS = 5.0
#: uploaded workdirs, in the data directory (the run directory's parent):
#: ``workdirs/<tenant>/<name>.tar.gz``, written by the API (server/workdir_routes.py)
WORKDIRS_DIR = "workdirs"
#: in a task's run directory: why the backend refused to start it (the status says it)
REFUSED_FILE = "refused"


@dataclass(frozen=True)
class TaskLogLimits:
    """How much of a task's output its log keeps (runner.py's ``LogSink`` writes it): the first
    ``head_bytes``, then a tail of at most ``tail_bytes`` rotated in two segments; nothing while
    the log directory's disk has under ``min_free_bytes`` free (the store's disk, when the logs
    share it, keeps its room)."""

    head_bytes: int = 8 << 20
    tail_bytes: int = 16 << 20
    min_free_bytes: int = 256 << 20

    def launch_spec(self, path: Path) -> dict[str, object]:
        return {
            "path": str(path),
            "head": self.head_bytes,
            "segment": max(1, self.tail_bytes // 2),
            "min_free": self.min_free_bytes,
        }


class LocalOptions(TypedDict, total=False):
    """What a server's settings decide about its local backend (make_backend passes it on)."""

    isolation: TaskIsolation
    gpu_discovery_seconds: float
    dataset_cache: DatasetCacheConfig
    #: fake GPUs to offer when NVML finds none (the demo cluster: fake_gpus.py)
    fake_gpus: int
    task_logs: TaskLogLimits
    #: the operator runs NVIDIA MPS here: GPU shares are held to their limits by it
    gpu_share_mps: bool
    #: HAMi-core's library (libvgpu.so) installed here: shares are held by it (after MPS)
    hami_core_library: str | None


class LocalBackend(LocalDatasetCaches):  # datasets: backends/local/datasets.py
    name = "local"

    def __init__(
        self,
        run_dir: Path,
        *,
        node_name: str | None = None,
        cpu_milli: int | None = None,
        memory_mib: int | None = None,
        gpus: Sequence[machine.Gpu] | None = None,
        environ: Mapping[str, str] | None = None,
        published: ResourceSlice | None = None,
        isolation: TaskIsolation | None = None,
        gpu_discovery_seconds: float = 30.0,
        nvml: object | None = None,
        dataset_cache: DatasetCacheConfig | None = None,
        fake_gpus: int = 0,
        task_logs: TaskLogLimits | None = None,
        gpu_share_mps: bool = False,
        hami_core_library: str | None = None,
    ) -> None:
        """Args (beyond the machine's description, which tests give):
        isolation: who tasks run as and where; the server passes the policy of its settings.
            None (embedding, tests): tasks run as this process's user, in directories beside
            ``run_dir`` (``<run_dir>-tasks``).
        gpu_discovery_seconds: how often NVML is read again (GPUs that appear or disappear).
        nvml: the NVML module (default pynvml); tests pass a fake.
        fake_gpus: when NVML finds no GPU, offer this many fake ones (the demo cluster of
            `aipaas up`, fake_gpus.py): tasks given them run for real and are told so.
        task_logs: how much of each task's output its log keeps (a default cap if None).
        gpu_share_mps, hami_core_library: what enforces GPU shares on this machine, as its
            operator set it up (devices/share_enforcement.py); neither: shares are not enforced.
        """
        self.run_dir = run_dir.resolve()  # tasks run elsewhere: paths must be absolute
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.isolation = isolation or TaskIsolation(
            self.run_dir.with_name(self.run_dir.name + "-tasks"), separate=False
        )
        self.placer = TaskPlacer(self.isolation)
        self.placer.check()
        self.name_of_node = node_name or machine.node_name()
        self._cpu_milli = cpu_milli or machine.cpu_milli()
        self._memory_mib = memory_mib or machine.memory_mib()
        self._nvml = nvml
        self._fake_count = max(fake_gpus, 0)
        self.task_logs = task_logs or TaskLogLimits()
        self.fake = False  # whether the GPUs offered now are fake ones
        self._dataset_config = dataset_cache or DatasetCacheConfig()
        self._discovery_seconds = gpu_discovery_seconds
        self._discovered_at: float | None = None
        self._problem: str | None = None
        self._annotations = {ISOLATION_ANNOTATION: self.isolation.describe()}
        self._share_labels = share_enforcement_labels(gpu_share_mps, hami_core_library)
        if hami_core_library and not gpu_share_mps:
            self._annotations[HAMI_CORE_LIBRARY_ANNOTATION] = hami_core_library
        if not self.isolation.separate:
            log.warning("local backend: %s", self.isolation.describe())
        # This machine's GPUs as a DRA ResourceSlice (nvml.py); no GPU or no NVML: CPU-only.
        # ``published`` stands in for NVML (tests); ``gpus`` alone means no slice at all.
        # Either one fixes the GPUs: only a backend reading NVML reads it again.
        self._rediscover = published is None and gpus is None
        if published is not None:
            self._set_gpus(published, list(gpus_of(published)))
        elif gpus is not None:
            self._set_gpus(None, list(gpus))
        else:
            self._read_nvml()
        self.base_env = dict(os.environ if environ is None else environ)
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._kills_armed: set[str] = set()  # stops whose SIGKILL timer runs (``stop``)
        self._lock = threading.Lock()

    def inventory(self) -> Inventory:
        # A GPU that appears or disappears is seen at the next reading (the cache spares NVML).
        last = self._discovered_at
        if self._rediscover and last is not None and _since(last) >= self._discovery_seconds:
            self._read_nvml()
        features = {"processes"} | ({"gpu"} if self.gpus else set())
        slices = (self.slice,) if self.slice is not None and self.slice.spec.devices else ()
        node = self.with_cache_state(self.node)  # the dataset cache: backends/local/datasets.py
        return Inventory((node,), frozenset(features), slices)

    def start(self, request: LaunchRequest) -> None:
        directory = self._dir(request.request_id)
        try:
            directory.mkdir(parents=True)  # the claim: exists -> already started
        except FileExistsError:
            return
        log_path = Path(request.log_path)
        _private_dir(log_path.parent)
        try:
            # The working directory outlives the attempt: a restart on this node finds what
            # the last one wrote there (a checkpoint at a relative path); AIPAAS_WORKDIR names it.
            identity = self.placer.prepare(request.tenant, request.work_key or request.request_id)
            # A task sees only its GPUs; one that asked for none sees none ("" hides them all).
            visible = visible_devices(request, self.slice)
        except (IsolationError, ValueError) as err:
            self._not_started(directory, log_path, str(err))
            return
        env = self.placer.environment(identity, request.env, self.base_env)
        env["CUDA_VISIBLE_DEVICES"] = visible
        env["AIPAAS_WORKDIR"] = str(identity.home)
        if request.job_uid and "MASTER_PORT" in request.env:  # one free port per job here
            proposed = (
                int(request.env["MASTER_PORT"]) if request.env["MASTER_PORT"].isdigit() else 0
            )
            env["MASTER_PORT"] = str(
                task_env.master_port(self.run_dir / "ports", request.job_uid, proposed)
            )
            rendezvous.follow_master(env)  # an elastic job's endpoint: the port chosen here
        cwd = request.working_dir or str(identity.home)
        archive = None
        if request.workdir_archive is not None:
            archive = self.run_dir.parent / WORKDIRS_DIR / request.tenant
            archive = archive / f"{request.workdir_archive}.tar.gz"
            if not archive.is_file():
                self._not_started(
                    directory,
                    log_path,
                    f"spec.workdir: {request.workdir_archive} was not uploaded to this server "
                    "(aipaas run --workdir uploads it)",
                )
                return
        program = request.command[0]
        # A relative program (./train.sh) may come with the workdir, unpacked only by the
        # runner: the system's own refusal says then what is wrong.
        from_archive = archive is not None and "/" in program and not program.startswith("/")
        problem = None
        if not from_archive and request.image is None:  # in an image: the image's program
            problem = task_env.program_problem(
                program,
                env["PATH"],
                os.geteuid() if identity.uid is None else identity.uid,
                os.getegid() if identity.gid is None else identity.gid,
                cwd,
            )
        if problem is not None:
            self._not_started(directory, log_path, problem)
            return
        try:  # the task's limits: cgroups the runner starts it in (limits.py)
            groups = limits.make_groups(
                request.request_id,
                # in an image: podman's --cpus; the memory group is the container's parent
                0 if request.image else request.limit_cpu_milli,
                request.limit_memory_mib,
            )
            setup_dir = self._setup_dir(request, identity)
        except (limits.LimitError, IsolationError) as err:
            self._not_started(directory, log_path, str(err))
            return
        if setup_dir is not None:
            env[SETUP_DIR_VARIABLE] = str(setup_dir)
        if self.fake and visible:
            # Said where the user looks: the log's first line, the status (``_status``).
            env["AIPAAS_FAKE_GPUS"] = visible
            _write_private(directory / fake_gpus.MARK_FILE, visible)
            with _open_log(log_path) as log_file:
                log_file.write(fake_gpus.log_line(visible).encode())
        env["PYTHONUNBUFFERED"] = "1"
        command = [sys.executable, "-I", RUNNER, str(directory)]  # -I: may be root
        if request.datasets or request.outputs:  # staged: data in the cache, then the runner
            command = self.stage_command(request, directory, identity, env)
        # An explicit workingDir is entered as the task's user (runner.py): it grants nothing
        # that user could not reach anyway. HOME stays the task's own directory.
        launch = {
            "command": list(request.command),
            "env": env,
            "cwd": cwd,
            **({"cgroups": groups} if groups else {}),
            # the uploaded workdir, unpacked by the runner as the task's user into its directory
            **({"unpack": str(archive), "unpack_into": str(identity.home)} if archive else {}),
            "uid": identity.uid,
            "gid": identity.gid,
            "log": self.task_logs.launch_spec(log_path),  # the runner writes it, capped
            "grace": runner.DEFAULT_GRACE_SECONDS
            if request.grace_seconds is None
            else request.grace_seconds,
        }
        if request.setup or request.image:
            launch.update(self._container_and_setup(request, identity, env, cwd, groups, setup_dir))
        _write_private(directory / LAUNCH_FILE, json.dumps(launch))
        # Opened here all the same: the log exists (0600) from the start, and the runner's own
        # few lines (it cannot start the command) go to it.
        with _open_log(log_path) as log_file:
            try:
                child = subprocess.Popen(
                    command,
                    env={"PATH": RUNNER_PATH, "LANG": "C.UTF-8"},
                    cwd="/",
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as err:
                log_file.write(f"aipaas: cannot start the task: {err}\n".encode())
                (directory / "exit").write_text("127\n")
                return
        (directory / "pid").write_text(f"{child.pid}\n")
        with self._lock:
            self._children[request.request_id] = child

    def _setup_dir(self, request: LaunchRequest, identity: TaskIdentity) -> Path | None:
        """The directory the job's setup runs once in, the tenant user's (backends/setup.py)."""
        if not request.setup:
            return None
        key = setup_key(request.setup, request.workdir_archive, request.image)
        return self.placer.prepare(request.tenant, key).home

    def _container_and_setup(
        self,
        request: LaunchRequest,
        identity: TaskIdentity,
        env: Mapping[str, str],
        cwd: str,
        groups: Sequence[str],
        setup_dir: Path | None,
    ) -> dict[str, Any]:
        """launch.json's entries for a task in an image and for the job's setup."""
        conf = container_launch.write_conf(self.run_dir)
        entries: dict[str, Any] = {}
        if setup_dir is not None:
            entries["setup"] = container_launch.setup_launch(
                request, identity, env, cwd, setup_dir, conf
            )
        if request.image is not None:
            memory = next((g for g in groups if "/memory/" in g), None)
            binds = [containers.Bind(str(setup_dir), str(setup_dir))] if setup_dir else []
            task = container_launch.container_task(
                request,
                identity,
                env,
                cwd,
                memory,
                name=containers.container_name(request.request_id),
                command=request.command,
                extra_binds=binds,
            )
            grace = request.grace_seconds
            entries.update(
                container_launch.container_launch(
                    task, conf, runner.DEFAULT_GRACE_SECONDS if grace is None else grace
                )
            )
        return entries

    def membership_file(self, node: str, tenant: str, job: str) -> str | None:
        """Elastic jobs' membership: in the tenant's task directory, where its tasks (running
        as the tenant's user) can read it."""
        if node != self.name_of_node:
            return None
        return str(self.isolation.task_root / tenant / _membership_name(job))

    def update_membership(self, tenant: str, job: str, payload: Mapping[str, object]) -> None:
        self.placer.write_tenant_file(tenant, _membership_name(job), json.dumps(payload))

    def gpu_utilization(self) -> dict[tuple[str, int], float]:
        """How busy each GPU is (NVML): the GpuUtilization capability (idle-GPU alerts)."""
        return read_utilization(self.name_of_node, self._nvml)

    def endpoint_owner(self, request_id: str, port: int) -> bool | None:
        """Whether the task's own processes listen on ``port`` (backends/service_endpoints.py):
        tasks run in their runner's session, whose id is the runner's pid."""
        pid = self._pid(request_id)
        return None if pid is None else listeners.session_listens(port, pid)

    def probe_exec(self, request_id: str, command: Sequence[str], timeout: float) -> str | None:
        """A service replica's exec probe (backends/local/probe_exec.py)."""
        return run_probe(self._dir(request_id), command, timeout)

    def exec_task(
        self, request_id: str, command: Sequence[str], timeout: float
    ) -> ExecResult | None:
        """``aipaas exec`` into a running task (backends/local/task_exec.py)."""
        return exec_in_task(self._dir(request_id), command, timeout)

    def open_session(
        self, request_id: str, command: Sequence[str], *, tty: bool, rows: int, cols: int
    ) -> ProcessSession | None:
        """``aipaas exec -i`` into a running task (backends/local/task_exec.py)."""
        return open_session_in_task(self._dir(request_id), command, tty=tty, rows=rows, cols=cols)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        """SIGTERM to the runner alone: the runner passes the first it gets on to the task's
        group, once, ignores any other (a stop asked again, by this process or by a server
        started after one that died mid-stop, never interrupts a checkpoint-on-SIGTERM
        handler), and SIGKILLs the group after the task's grace period (runner.py). The
        backend's own SIGKILL of the runner's group, armed once per process, comes only if the
        runner has not ended by the grace plus ``KILL_MARGIN_SECONDS``."""
        pid = self._pid(request_id)
        directory = self._dir(request_id)
        if pid is None or (directory / "exit").exists():
            return
        (directory / "stop").touch()
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        with self._lock:
            if request_id in self._kills_armed:
                return
            self._kills_armed.add(request_id)
        grace = _launch_grace(directory, grace_seconds) + KILL_MARGIN_SECONDS
        timer = threading.Timer(grace, self._kill, (request_id, pid))
        timer.daemon = True
        timer.start()

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        self._reap()
        # the times the run directory knows (task_times.py): what the usage ledger charges
        return {rid: with_run_times(self._status(rid), self._dir(rid)) for rid in request_ids}

    def close(self) -> None:
        self._reap()

    # helpers ------------------------------------------------------------------------------

    def _not_started(self, directory: Path, log_path: Path, reason: str) -> None:
        with _open_log(log_path) as log_file:
            log_file.write(f"aipaas: cannot start the task: {reason}\n".encode())
        # The reason in the task's status too, not only "exit code 127" (``_status``).
        _write_private(directory / REFUSED_FILE, reason[:ANNOTATION_MAX])
        (directory / "exit").write_text("127\n")

    def _read_nvml(self) -> None:
        found = discover(self.name_of_node, self._nvml)
        self._discovered_at = time.monotonic()
        self._report(found)
        gpus = list(gpus_of(found.slice))
        self.fake = not gpus and self._fake_count > 0
        if self.fake:  # read again later like real ones: a GPU that appears replaces them
            published = fake_gpus.fake_slice(self.name_of_node, self._fake_count)
            why = "no NVIDIA GPU here" if found.quiet else (found.problem or "NVML found none")
            self._annotations[GPU_ANNOTATION] = fake_gpus.annotation(self._fake_count, why)[
                :ANNOTATION_MAX
            ]
            self._set_gpus(published, list(gpus_of(published)))
            return
        self._set_gpus(found.slice, gpus)

    def _report(self, found: Discovery) -> None:
        """Say what NVML found when it changes: a warning for an error, one line otherwise."""
        gpus = len(gpus_of(found.slice))
        if found.problem is not None and not found.quiet:
            text = f"{found.problem}; this node offers {gpus} GPU(s) through NVML"
            if text != self._problem:
                log.warning("local backend: %s", text)
        elif found.problem is not None:
            text = f"no NVIDIA driver here ({found.problem}): CPU only"
            if self._fake_count:  # the demo: said as what the node offers instead
                text = fake_gpus.annotation(self._fake_count, "no NVIDIA GPU here")
            if text != self._problem:
                log.info("local backend: %s", text)
        else:
            text = f"{gpus} GPU(s) read through NVML"
            if text != self._problem:  # the first reading, a GPU come or gone, NVML back
                log.info("local backend: %s", text)
        self._problem = text
        self._annotations[GPU_ANNOTATION] = text[:ANNOTATION_MAX]

    def _set_gpus(self, published: ResourceSlice | None, gpus: list[machine.Gpu]) -> None:
        self.slice: ResourceSlice | None = published
        self.gpus = gpus
        # model and memory of the first GPU NVML could read (one it cannot read has neither)
        known = next((g for g in gpus if g.model), None)
        health = (
            gpu_annotations(slice_gpus([published], self.name_of_node, DRIVER))
            if published is not None and not self.fake
            else {}
        )
        self.node = NodeInfo(
            name=self.name_of_node,
            backend=self.name,
            cpu_milli=self._cpu_milli,
            memory_mib=self._memory_mib,
            gpu_count=len(gpus),
            gpu_model=known.model if known else ("GPU" if gpus else ""),
            gpu_memory_mib=known.memory_mib if known else 0,
            labels={"aipaas.dev/backend": "local"}
            | ({fake_gpus.FAKE_LABEL: "true"} if self.fake else {})
            | (self._share_labels if gpus and not self.fake else {}),
            annotations=dict(self._annotations) | health,
        )

    def _dir(self, request_id: str) -> Path:
        if "/" in request_id or request_id.startswith("."):
            raise ValueError(f"invalid request id {request_id!r}")
        return self.run_dir / request_id

    def _pid(self, request_id: str) -> int | None:
        try:
            return int((self._dir(request_id) / "pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _status(self, request_id: str) -> TaskStatus:
        directory = self._dir(request_id)
        if not directory.exists():
            return TaskStatus(request_id, TaskState.UNKNOWN)
        exit_file = directory / "exit"
        if exit_file.exists():
            try:
                code = int(exit_file.read_text().strip())
            except ValueError:
                return TaskStatus(request_id, TaskState.LOST, None, "unreadable exit code")
            state = TaskState.SUCCEEDED if code == 0 else TaskState.FAILED
            with contextlib.suppress(OSError):
                refused = (directory / REFUSED_FILE).read_text()
                return TaskStatus(request_id, state, code, f"not started: {refused}")
            if (directory / runner.SETUP_FAILED_FILE).exists():
                return TaskStatus(request_id, state, code, failure_message(code))
            if (directory / runner.OOM_FILE).exists():
                said = f"OOMKilled: over its memory limit (exit code {code})"
                return TaskStatus(request_id, state, code, said)
            return TaskStatus(request_id, state, code, f"exit code {code}" + _fake_note(directory))
        pid = self._pid(request_id)
        if pid is None:
            # Claimed but not yet recorded: only this process can be starting it right now.
            with self._lock:
                starting = request_id in self._children
            found = None if starting else _runner_of(request_id)
            if found is not None:
                # Started by a process killed before it recorded the pid:
                # the runner lives on; record it, so it is stopped and waited for, not lost.
                (directory / "pid").write_text(f"{found}\n")
                return TaskStatus(request_id, TaskState.RUNNING)
            if starting:
                return TaskStatus(request_id, TaskState.RUNNING)
            return self._never_started(request_id, directory)
        if _is_runner(pid, request_id) or _is_young(directory / "pid", pid):
            return TaskStatus(request_id, TaskState.RUNNING, message=_fake_note(directory)[2:])
        if exit_file.exists():  # it ended between the two checks
            return self._status(request_id)
        if (directory / "stop").exists():
            # Stopped before the runner could record an exit code (signal during start-up,
            # or SIGKILL after the grace period): the stop is the cause, not a loss.
            return TaskStatus(request_id, TaskState.FAILED, 143, "stopped")
        return TaskStatus(request_id, TaskState.LOST, None, "the task's process is gone")

    def _never_started(self, request_id: str, directory: Path) -> TaskStatus:
        """A claim with no runner and no exit code, in no process's hands: the server that
        made it died (kill -9) between the claim and the runner's start. Nothing of the task
        ever ran, so it is not lost: the claim is withdrawn and the id is unknown here, which
        the controller answers by asking for the start again (same attempt, not counted).
        A claim younger than ``CLAIM_GRACE_SECONDS`` may still be another process's start in
        progress (a lease holder about to be fenced off): left alone until then."""
        try:
            age = time.time() - directory.stat().st_mtime
        except FileNotFoundError:
            return TaskStatus(request_id, TaskState.UNKNOWN, None, "never started")
        if age >= CLAIM_GRACE_SECONDS:
            log.warning(
                "local backend: %s was claimed but never started: the claim is withdrawn",
                request_id,
            )
            shutil.rmtree(directory, ignore_errors=True)
        return TaskStatus(request_id, TaskState.UNKNOWN, None, "never started")

    def _kill(self, request_id: str, pid: int) -> None:
        with self._lock:
            self._kills_armed.discard(request_id)
        if (self._dir(request_id) / "exit").exists():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        # a task in an image lives on under conmon, outside the runner's group: removed too
        container_launch.remove_container(self._dir(request_id) / LAUNCH_FILE)

    def _reap(self) -> None:
        with self._lock:
            finished = [rid for rid, child in self._children.items() if child.poll() is not None]
            for rid in finished:
                del self._children[rid]


def _launch_grace(directory: Path, default: float) -> float:
    """The grace period the task was started with (launch.json), else ``default``."""
    try:
        grace = json.loads((directory / LAUNCH_FILE).read_text()).get("grace")
    except (OSError, ValueError):
        return default
    return float(grace) if isinstance(grace, int | float) else default


def _fake_note(directory: Path) -> str:
    """'; on fake GPU(s) ...' for a task that was given fake GPUs, else ''."""
    try:
        visible = (directory / fake_gpus.MARK_FILE).read_text().strip()
    except OSError:
        return ""
    return f"; {fake_gpus.status_note(visible)}"


def _membership_name(job: str) -> str:
    return f"{job}.membership.json"


def _since(moment: float) -> float:
    return time.monotonic() - moment


def _private_dir(path: Path) -> None:
    """A task's log directory (and any missing parent: the tenant's): the server's alone, 0700.

    Tasks write their logs through the descriptor they inherit, never by path.
    """
    for directory in [*reversed(path.parents), path]:
        if not directory.exists():
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=0o700)
    os.chmod(path, 0o700)


def _open_log(path: Path) -> BinaryIO:
    """The task's log, opened for appending by the server, mode 0600."""
    handle = open(path, "ab", opener=lambda name, flags: os.open(name, flags, 0o600))  # noqa: SIM115
    os.fchmod(handle.fileno(), 0o600)
    return handle


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def _is_young(pid_file: Path, pid: int, seconds: float = 5.0) -> bool:
    """Just started: /proc may still show the pre-exec command line for a moment."""
    try:
        age = pid_file.stat().st_mtime
        os.kill(pid, 0)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return bool(time.time() - age < seconds) and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _runner_of(request_id: str) -> int | None:
    """The live runner of ``request_id``, found in /proc (its pid file was never written)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _is_runner(int(entry.name), request_id):
            return int(entry.name)
    return None


def _is_runner(pid: int, request_id: str) -> bool:
    """The pid is alive and is our runner for this id (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if not cmdline:
        return False  # a zombie
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (FileNotFoundError, IndexError):
        return False
    return request_id.encode() in cmdline
