"""What the local backend's runner is given for a task in an image (local/container_launch.py):
the task's user, its directory and datasets bound, the dataset variable at its mountPath, its
limits and memory group, and podman's own environment free of the job's variables."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from aipaas.backends import containers
from aipaas.backends.base import LaunchRequest
from aipaas.backends.datasets import DatasetMount
from aipaas.backends.local.container_launch import (
    container_launch,
    container_task,
    remove_container,
)
from aipaas.backends.local.isolation import TaskIdentity

HOME = Path("/tasks/acme/uid.w")
IDENTITY = TaskIdentity("aipaas-t-acme", 998, 997, HOME)
REQUEST = LaunchRequest(
    request_id="uid.w-0.a0",
    task="w-0",
    job="train",
    tenant="acme",
    node="here",
    command=("python3", "train.py"),
    env={},
    working_dir=None,
    gpus=(),
    gpu_milli=0,
    log_path="",
    image="localhost/train:1",
    datasets=(DatasetMount("corpus", "acme/corpus-1", "/data/corpus", {}),),
    limit_cpu_milli=500,
    limit_memory_mib=96,
)
ENV = {"RANK": "0", "AIPAAS_DATASET_CORPUS_PATH": str(HOME / "data/corpus"), "LD_PRELOAD": "x"}


def make_task(request: LaunchRequest = REQUEST) -> containers.ContainerTask:
    return container_task(
        request,
        IDENTITY,
        ENV,
        str(HOME),
        "/sys/fs/cgroup/memory/server/aipaas/uid.w-0.a0",
        name="aipaas-uid.w-0.a0",
        command=request.command,
    )


def test_the_task_runs_as_its_user_with_its_directory_and_dataset_bound() -> None:
    task = make_task()
    assert task.user == "998:997" and task.workdir == str(HOME)
    assert containers.Bind(str(HOME), str(HOME)) in task.binds
    link = str(HOME / "data/corpus")  # the stage's link to the cached data
    assert containers.Bind(link, "/data/corpus", read_only=True) in task.binds
    assert task.env["AIPAAS_DATASET_CORPUS_PATH"] == "/data/corpus"


def test_limits_are_podmans_and_the_memory_group_is_the_containers_parent() -> None:
    task = make_task()
    assert (task.memory_mib, task.cpu_milli) == (96, 500)
    assert task.cgroup_parent == "/server/aipaas/uid.w-0.a0"


def test_a_server_that_is_its_tasks_user_runs_them_as_root_in_the_container() -> None:
    shared = TaskIdentity("root", None, None, HOME)
    task = container_task(REQUEST, shared, ENV, str(HOME), None, name="n", command=REQUEST.command)
    assert task.user == "0:0" and task.cgroup_parent is None


def test_podman_gets_only_its_own_environment_and_the_stop_has_the_grace(tmp_path: Path) -> None:
    launch = container_launch(make_task(), tmp_path / "containers.conf", 7)
    assert "LD_PRELOAD" not in launch["env"]
    assert launch["env"][containers.CONF_VARIABLE] == str(tmp_path / "containers.conf")
    assert "LD_PRELOAD=x" in launch["command"]  # for the container, on the command line
    assert launch["container"]["stop"][-3:] == ["--time", "7", "aipaas-uid.w-0.a0"]
    assert launch["container"]["name"] == "aipaas-uid.w-0.a0"


def test_without_datasets_only_the_directory_is_bound() -> None:
    task = make_task(replace(REQUEST, datasets=()))
    assert list(task.binds) == [containers.Bind(str(HOME), str(HOME))]


def test_a_killed_runners_container_is_removed_by_its_launch_files_command(
    tmp_path: Path,
) -> None:
    launch = container_launch(make_task(), tmp_path / "containers.conf", 7)
    removed = tmp_path / "removed"
    launch["container"]["remove"] = ["/bin/sh", "-c", f'echo "$CONTAINERS_CONF" > {removed}']
    (tmp_path / "launch.json").write_text(json.dumps(launch))
    remove_container(tmp_path / "launch.json")
    assert removed.read_text().strip() == str(tmp_path / "containers.conf")
    remove_container(tmp_path / "absent.json")  # no launch file: nothing to do, no error
