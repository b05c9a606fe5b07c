"""A Slurm task in its image, and a job's setup, as lines of the task's batch script.

Who calls it: ``SlurmBackend.start`` (backend.py) rewrites a request with an image before its
datasets are staged (the stage runs on the host and starts the command it is given: the
container), and ``batch_script`` (jobs.py) puts the setup before the command.

The container is started by ``CONTAINER_SCRIPT``, a bash wrapper around ``podman run --rm``.
Slurm's cancel sends SIGTERM to every process of the job, podman's client and the ``runc
kill`` it would run to pass the signal on among them (seen: the forwarding fails, and the
container's process, outside the job's tree under conmon, gets nothing). So the client passes
no signal (``--sig-proxy=false``, and it ends on its SIGTERM: the task's output after a stop
is not in the log), and the wrapper's trap runs ``podman stop -t GRACE`` once, outside the
job (double fork, own session), so that Slurm's SIGKILL of the job's processes at KillWait does
not cut the grace short: one SIGTERM, SIGKILL after the grace. The wrapper removes the
container when it ends and says
OOMKilled (DIR/oom) when it was killed in a memory group that reached its limit: the
container's group is made under ``<memory>/aipaas/slurm/<name>`` with the limit, whose counters
outlive the container's own group. The container runs as the script's user (``--user``). The
variables are passed by name (``--env NAME``: podman reads them from the script's environment,
which the batch script exported), so that CUDA_VISIBLE_DEVICES is the one Slurm gave the job.
On Slurm the grace is bounded by the cluster's KillWait: past it Slurm SIGKILLs the job's
processes, the wrapper among them.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from aipaas.backends import containers
from aipaas.backends.base import LaunchRequest
from aipaas.backends.datasets import env_name
from aipaas.backends.setup import SETUP_DIR_VARIABLE, setup_script

OOM_MARK = "oom"
#: in the attempt's directory: the task runs in a container (``aipaas exec`` enters it)
CONTAINER_MARK = "container"
SETUP_FAILED_MARK = "setup-failed"
CONF_FILE = "containers.conf"
#: the task's batch script in its attempt's directory (backend.py writes it)
BATCH_SCRIPT = "job.sh"
#: the wrapper's arguments: name, grace seconds, the attempt's directory, memory limit in MiB
#: (0: none), podman's run options, ``--``, the image and the command
CONTAINER_SCRIPT = r"""
name=$1; grace=$2; dir=$3; memory=$4; shift 4
podman_base=(podman --runtime runc --cgroup-manager cgroupfs)
options=()
while [ "$1" != "--" ]; do options+=("$1"); shift; done
shift
parent=""
group=""
if [ "$memory" -gt 0 ] && [ -d /sys/fs/cgroup/memory ]; then
  parent=/aipaas/slurm/$name
  group=/sys/fs/cgroup/memory$parent
  if mkdir -p "$group" && echo $((memory << 20)) > "$group/memory.limit_in_bytes"; then
    options+=(--cgroup-parent "$parent")
  else
    group=""
  fi
fi
stopped=""
stop() {
  [ -n "$stopped" ] && return
  stopped=1
  # one SIGTERM, SIGKILL after the grace, from a process outside the job's (double fork, own
  # session): Slurm SIGKILLs the job's own processes at its KillWait
  (setsid "${podman_base[@]}" stop --ignore --time "$grace" "$name" </dev/null >/dev/null 2>&1 &)
}
trap stop TERM INT
"${podman_base[@]}" run --user "$(id -u):$(id -g)" "${options[@]}" "$@" &
client=$!
while :; do
  wait "$client"; code=$?
  kill -0 "$client" 2>/dev/null || break
done
if [ -n "$stopped" ]; then
  waited=$("${podman_base[@]}" wait "$name" 2>/dev/null) && code=$waited
fi
"${podman_base[@]}" rm --force --ignore "$name" >/dev/null 2>&1
if [ -n "$group" ]; then
  if [ "$code" = 137 ] && [ -z "$stopped" ] && {
      [ "$(cat "$group/memory.failcnt")" -gt 0 ] ||
      [ "$(cat "$group/memory.max_usage_in_bytes")" -ge "$(cat "$group/memory.limit_in_bytes")" ]
    }; then
    echo "aipaas: OOMKilled: the task went over its memory limit" >&2
    : > "$dir/oom"
  fi
  for controller in /sys/fs/cgroup/*; do
    [ -d "$controller$parent" ] || continue
    find "$controller$parent" -depth -type d -exec rmdir {} + 2>/dev/null
  done
fi
exit "$code"
"""


def container_request(
    request: LaunchRequest,
    directory: Path,
    names: Iterable[str],
    conf: Path,
    setup_dir: str | None = None,
    *,
    home: Path | None = None,
) -> LaunchRequest:
    """The request whose command runs the task in its image: the attempt's directory
    (``directory``), the task's working directory (``home``, its HOME, kept across attempts;
    ``directory`` when None) and its setup's bound at the same path, its datasets read-only at
    their mountPath, the variables ``names`` passed through by name, the node's GPU device
    nodes where it has them."""
    home = home or directory
    setup_binds = [containers.Bind(setup_dir, setup_dir)] if setup_dir else []
    assert request.image is not None
    name = containers.container_name(request.request_id)
    options, rest = _split(
        containers.ContainerTask(
            name=name,
            image=request.image,
            command=request.command,
            env={},
            user=None,  # the wrapper's: the user the script runs as
            workdir=request.working_dir or str(home),
            binds=[*_binds(request, directory, home), *setup_binds],
            devices=containers.gpu_devices(",".join(str(n) for n in range(16))),
            memory_mib=request.limit_memory_mib,
            cpu_milli=request.limit_cpu_milli,
        ),
        [*names, "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"],
    )
    for mount in request.datasets:  # the datasets' paths as the container sees them
        options += ["--env", f"{env_name(mount.name)}={mount.mount_path}"]
    grace = request.grace_seconds if request.grace_seconds is not None else 30
    wrapper = ["/bin/bash", "-c", CONTAINER_SCRIPT, "aipaas-container", name, str(round(grace))]
    wrapper += [str(directory), str(request.limit_memory_mib)]
    command = (*wrapper, *options, "--", *rest)
    env = {**request.env, containers.CONF_VARIABLE: str(conf)}
    return replace(request, command=command, env=env)


def setup_lines(
    request: LaunchRequest,
    directory: Path,
    setup_dir: str,
    names: Iterable[str],
    *,
    home: Path | None = None,
) -> list[str]:
    """The batch script's lines that run the job's setup once per node (backends/setup.py)
    before the command, on the host or in the task's image (in the task's working directory
    ``home``; ``directory``, the attempt's, when None); its failure is the task's."""
    home = home or directory
    script = setup_script(request.setup)
    lines = [
        f"export {SETUP_DIR_VARIABLE}={shlex.quote(setup_dir)}",
        f'mkdir -p "${SETUP_DIR_VARIABLE}"',
    ]
    if request.image is None:
        command = shlex.join(["/bin/sh", "-c", script])
    else:
        options, rest = _split(
            containers.ContainerTask(
                name=containers.container_name(request.request_id) + "-setup",
                image=request.image,
                command=["/bin/sh", "-c", script],
                env={},
                user=None,
                workdir=request.working_dir or str(home),
                binds=[*_binds(request, directory, home), containers.Bind(setup_dir, setup_dir)],
            ),
            [*names, SETUP_DIR_VARIABLE],
        )
        command = (
            shlex.join([*containers.podman(), "run"])
            + ' --user "$(id -u):$(id -g)" '
            + shlex.join([*options, *rest])
        )
    mark = shlex.quote(str(directory / SETUP_FAILED_MARK))
    lines.append(
        f'{command}; setup_code=$?; [ "$setup_code" = 0 ] || {{ code=$setup_code; : > {mark}; }}'
    )
    return lines


def exec_launch(
    directory: Path,
    request_id: str,
    command: Sequence[str],
    *,
    interactive: bool = False,
    tty: bool = False,
    home: Path | None = None,
) -> list[str]:
    """What a step of the task's job runs for ``aipaas exec``: the command with the task's
    variables, or ``podman exec`` into the task's container (which has them) as the step's
    user, in the task's working directory (``home``; the attempt's ``directory`` when None),
    ``--interactive``/``--tty`` as asked."""
    if not (directory / CONTAINER_MARK).exists():
        # the task's variables, from the export lines of its batch script (jobs.py)
        script = 'eval "$(grep "^export " "$0")"; exec "$@"'
        return ["/bin/bash", "-c", script, str(directory / BATCH_SCRIPT), *command]
    name = containers.container_name(request_id)
    argv = containers.exec_command(
        name,
        command,
        user="0:0",
        workdir=str(home or directory),
        env={},
        interactive=interactive,
        tty=tty,
    )
    argv[argv.index("--user") + 1] = f"{os.getuid()}:{os.getgid()}"
    return argv


def conf_path(run_dir: Path) -> Path:
    """The backend's containers.conf (containers.CONTAINERS_CONF), written when it differs."""
    path = run_dir / CONF_FILE
    if not path.exists() or path.read_text() != containers.CONTAINERS_CONF:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(containers.CONTAINERS_CONF)
        temporary.replace(path)
    return path


def _split(task: containers.ContainerTask, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """podman run's options (with ``--env NAME`` for each name) and the image and command."""
    argv = containers.run_command(task)
    after_run = len(containers.podman()) + 1
    cut = len(argv) - len(task.command) - 1  # the image
    # removed when it ends, even when Slurm killed the wrapper first
    options = ["--rm", *argv[after_run:cut]]
    for key in sorted(set(names)):
        options += ["--env", key]
    return options, argv[cut:]


def _binds(request: LaunchRequest, directory: Path, home: Path) -> list[containers.Bind]:
    binds = [containers.Bind(str(directory), str(directory))]
    if home != directory:
        binds.append(containers.Bind(str(home), str(home)))
    for mount in request.datasets:
        link = str(directory / mount.mount_path.lstrip("/"))  # the stage links it first
        binds.append(containers.Bind(link, mount.mount_path, read_only=True))
    return binds
