"""What the local backend's runner is given for a task with an image, and for a job's setup.

Who calls it: ``LocalBackend.start`` (backend.py), after it has the task's identity, directory,
environment and limits groups. A task with an image becomes a ``podman run`` the runner starts
as root (backends/containers.py builds it); a job's ``spec.setup`` becomes a shell script the
runner runs first, on the host as the task's user or in the task's image (backends/setup.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aipaas.backends import containers
from aipaas.backends.base import LaunchRequest
from aipaas.backends.datasets import env_name
from aipaas.backends.local.isolation import TaskIdentity
from aipaas.backends.setup import SETUP_DIR_VARIABLE, setup_script

#: podman's PATH (runc lies in /usr/sbin); nothing of the job's environment reaches podman
PODMAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONF_FILE = "containers.conf"
CGROUP_ROOT = "/sys/fs/cgroup/"


def write_conf(run_dir: Path) -> Path:
    """The backend's containers.conf (containers.CONTAINERS_CONF), written once per start."""
    path = run_dir / CONF_FILE
    if not path.exists() or path.read_text() != containers.CONTAINERS_CONF:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(containers.CONTAINERS_CONF)
        temporary.replace(path)
    return path


def remove_container(launch_file: Path) -> None:
    """Force-remove the container of the task whose launch file this is (none: nothing), for a
    runner that was SIGKILLed before it could (the container outlives it under conmon)."""
    try:
        launch = json.loads(launch_file.read_text())
    except (OSError, ValueError):
        return
    container = launch.get("container")
    if not isinstance(container, dict) or not isinstance(container.get("remove"), list):
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [str(part) for part in container["remove"]],
            env={str(k): str(v) for k, v in container["env"].items()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )


def container_task(
    request: LaunchRequest,
    identity: TaskIdentity,
    env: Mapping[str, str],
    cwd: str,
    memory_group: str | None,
    *,
    name: str,
    command: Sequence[str],
    extra_binds: Sequence[containers.Bind] = (),
) -> containers.ContainerTask:
    """The task (or its setup) in its image: as its user, its directory bound at the same
    path, its datasets read-only at their mountPath (the variables say that path), its GPUs."""
    assert request.image is not None
    inside = dict(env)
    binds = [containers.Bind(str(identity.home), str(identity.home)), *extra_binds]
    for mount in request.datasets:
        # The stage links <home><mountPath> to the cached data before the runner starts
        # podman, which binds what the link points to.
        link = str(identity.home / mount.mount_path.lstrip("/"))
        binds.append(containers.Bind(link, mount.mount_path, read_only=True))
        inside[env_name(mount.name)] = mount.mount_path
    user = f"{identity.uid}:{identity.gid}" if identity.uid is not None else "0:0"
    parent = None
    if memory_group is not None and memory_group.startswith(CGROUP_ROOT):
        # /sys/fs/cgroup/memory/<path>: podman takes the path below the controller's mount
        parent = "/" + memory_group[len(CGROUP_ROOT) :].split("/", 1)[1]
    return containers.ContainerTask(
        name=name,
        image=request.image,
        command=command,
        env=inside,
        user=user,
        workdir=cwd,
        binds=binds,
        devices=containers.gpu_devices(env.get("CUDA_VISIBLE_DEVICES", "")),
        memory_mib=request.limit_memory_mib,
        cpu_milli=request.limit_cpu_milli,
        cgroup_parent=parent,
        labels={"aipaas.dev/tenant": request.tenant, "aipaas.dev/job": request.job},
    )


def container_launch(task: containers.ContainerTask, conf: Path, grace: float) -> dict[str, Any]:
    """launch.json's ``command``, ``env`` and ``container`` for a task in an image."""
    podman_env = containers.conf_environment(str(conf), PODMAN_PATH)
    return {
        "command": containers.run_command(task),
        "env": podman_env,
        "container": {
            "name": task.name,  # ``aipaas exec`` enters it (local/task_exec.py)
            "stop": containers.stop_command(task.name, grace),
            "remove": containers.remove_command(task.name),
            "env": podman_env,
            "cgroup_parent": task.cgroup_parent or "",
        },
    }


def setup_launch(
    request: LaunchRequest,
    identity: TaskIdentity,
    env: Mapping[str, str],
    cwd: str,
    setup_dir: Path,
    conf: Path,
) -> dict[str, Any]:
    """launch.json's ``setup``: the job's commands once in ``setup_dir`` (AIPAAS_SETUP_DIR),
    on the host as the task's user or in the task's image."""
    script = setup_script(request.setup)
    setup_env = {**env, SETUP_DIR_VARIABLE: str(setup_dir)}
    if request.image is None:
        return {"command": ["/bin/sh", "-c", script], "env": setup_env}
    name = containers.container_name(request.request_id) + "-setup"
    task = container_task(
        request,
        identity,
        setup_env,
        cwd,
        None,
        name=name,
        command=["/bin/sh", "-c", script],
        extra_binds=[containers.Bind(str(setup_dir), str(setup_dir))],
    )
    task = replace(task, memory_mib=0, cpu_milli=0)  # pip may need more than the task
    podman_env = containers.conf_environment(str(conf), PODMAN_PATH)
    argv = containers.run_command(task)
    after_run = len(containers.podman()) + 1
    return {
        "command": [*argv[:after_run], "--rm", *argv[after_run:]],  # podman run --rm ...
        "env": podman_env,
        "stop": containers.stop_command(name, 5),
    }
