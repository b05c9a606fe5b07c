"""A task in a container image through podman: the command lines that run, stop, enter and
remove it, and the podman configuration they need.

Who calls it: the local backend's ``start`` (backends/local/backend.py, whose runner runs the
lines) and ``exec``, and the Slurm backend's batch script (backends/slurm/jobs.py). Pure: it
builds argument lists and text; it runs nothing and reads nothing but device nodes' existence.

What works on these machines (shared/design/ECOSYSTEM.md): Debian's podman 4.3 as root with
runc and cgroupfs (crun refuses the hybrid cgroup layout), and a containers.conf with
``default_ulimits = []`` (else the runtime fails to set RLIMIT_NOFILE). The task keeps its user
(``--user``), its working directory (bound at the same path, so ``AIPAAS_WORKDIR`` means the
same inside), its datasets (bound read-only at their ``mountPath``), its GPUs (the visible
devices variable and the device nodes where the machine has them) and its environment (each
variable given on the command line: podman's own environment is never the task's, so that a
job's LD_PRELOAD never reaches a process that runs as root). The host's network is the task's:
MASTER_ADDR and MASTER_PORT mean what they mean on the host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

PODMAN = "podman"
#: given on every podman call, and in CONTAINERS_CONF for calls made by hand
GLOBAL_OPTIONS = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
CONTAINERS_CONF = """# written by aipaas (backends/containers.py): what podman needs here
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""
#: the variable that points podman at CONTAINERS_CONF
CONF_VARIABLE = "CONTAINERS_CONF"
NAME_PREFIX = "aipaas-"
#: NVIDIA's device nodes every GPU process needs, bound where the machine has them
GPU_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Bind:
    """A host path bound into the container."""

    source: str
    target: str
    read_only: bool = False

    def option(self) -> str:
        return f"{self.source}:{self.target}:{'ro' if self.read_only else 'rw'}"


@dataclass(frozen=True)
class ContainerTask:
    """What ``run_command`` starts. ``memory_mib``/``cpu_milli`` 0: not limited."""

    name: str
    image: str
    command: Sequence[str]
    env: Mapping[str, str]
    user: str | None  # uid:gid; None: not given (a wrapper script adds its own)
    workdir: str
    binds: Sequence[Bind] = ()
    devices: Sequence[str] = ()
    memory_mib: int = 0
    cpu_milli: int = 0
    #: the cgroup (cgroupfs path) the container's group is made under: the local backend's
    #: memory group of the task (limits.py), whose counters say whether the limit was hit
    cgroup_parent: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def container_name(request_id: str) -> str:
    """The container of a task attempt: one name per request id (a second start replaces it)."""
    return NAME_PREFIX + _NAME_UNSAFE.sub("-", request_id)


def podman() -> list[str]:
    return [PODMAN, *GLOBAL_OPTIONS]


def run_command(task: ContainerTask) -> list[str]:
    """``podman run`` in the foreground: its output is the task's output, its exit code the
    task's (125 when podman itself fails, 126/127 when the command cannot be run). No signal is
    passed through (``--sig-proxy=false``): a stop is ``stop_command``, one SIGTERM."""
    argv = [
        *podman(),
        "run",
        "--replace",  # a container left by a runner that died holds the name
        "--name",
        task.name,
        "--sig-proxy=false",
        "--network",
        "host",
        "--workdir",
        task.workdir,
        "--pull",
        "missing",  # pulled from its registry once, when the node does not have it
    ]
    if task.user is not None:
        argv += ["--user", task.user]
    for key, value in task.labels.items():
        argv += ["--label", f"{key}={value}"]
    if task.memory_mib:
        limit = f"{task.memory_mib}m"
        argv += ["--memory", limit, "--memory-swap", limit]  # no swapping past the limit
    if task.cpu_milli:
        argv += ["--cpus", f"{task.cpu_milli / 1000:g}"]
    if task.cgroup_parent:
        argv += ["--cgroup-parent", task.cgroup_parent]
    for bind in task.binds:
        argv += ["--volume", bind.option()]
    for device in task.devices:
        argv += ["--device", device]
    for key, value in task.env.items():
        argv += ["--env", f"{key}={value}"]
    return [*argv, task.image, *task.command]


def stop_command(name: str, grace_seconds: float) -> list[str]:
    """One SIGTERM to the container's process, SIGKILL ``grace_seconds`` later."""
    return [*podman(), "stop", "--ignore", "--time", str(max(0, round(grace_seconds))), name]


def remove_command(name: str) -> list[str]:
    return [*podman(), "rm", "--force", "--ignore", name]


def exec_command(
    name: str,
    command: Sequence[str],
    *,
    user: str,
    workdir: str,
    env: Mapping[str, str],
    interactive: bool = False,
    tty: bool = False,
) -> list[str]:
    """``podman exec`` into a running task's container, as its user, in its directory; with
    its input kept open (``interactive``) and a terminal of its own (``tty``)."""
    argv = [*podman(), "exec", "--user", user, "--workdir", workdir]
    if interactive:
        argv.append("--interactive")
    if tty:
        argv.append("--tty")
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    return [*argv, name, *command]


def gpu_devices(visible: str, exists: Callable[[str], bool] = os.path.exists) -> list[str]:
    """The device nodes of the GPUs ``visible`` names (CUDA_VISIBLE_DEVICES: indexes) and the
    control nodes, those the machine has (none on a machine without NVIDIA's driver). The index
    is taken for the node's minor number, which is what the driver gives on a machine whose
    GPUs were never hidden from it."""
    indexes = [part for part in visible.split(",") if part.strip().isdigit()]
    if not indexes:
        return []
    wanted = [f"/dev/nvidia{int(index)}" for index in indexes] + list(GPU_CONTROL_NODES)
    return [node for node in wanted if exists(node)]


def conf_environment(conf_path: str, path: str) -> dict[str, str]:
    """The environment podman is run with: a PATH and the configuration, nothing of the job."""
    return {"PATH": path, CONF_VARIABLE: conf_path, "LANG": "C.UTF-8"}
