"""The podman command lines of a task in an image (backends/containers.py) and the setup
script (backends/setup.py): what reaches podman, and what a setup does when run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from aipaas.backends import containers
from aipaas.backends.setup import SETUP_FAILED_CODE, setup_key, setup_script


def make_task(**changes: object) -> containers.ContainerTask:
    fields: dict[str, object] = {
        "name": "aipaas-r1",
        "image": "localhost/train:1",
        "command": ["python3", "train.py"],
        "env": {"RANK": "0", "LD_PRELOAD": "/x.so"},
        "user": "998:998",
        "workdir": "/tasks/acme/r1",
        "binds": [containers.Bind("/tasks/acme/r1", "/tasks/acme/r1")],
    }
    fields.update(changes)
    return containers.ContainerTask(**fields)  # type: ignore[arg-type]


class TestRunCommand:
    def test_the_task_runs_as_its_user_in_its_directory_with_its_variables(self) -> None:
        argv = containers.run_command(make_task())
        assert argv[: len(containers.podman())] == containers.podman()
        assert argv[argv.index("--user") + 1] == "998:998"
        assert argv[argv.index("--workdir") + 1] == "/tasks/acme/r1"
        assert "--sig-proxy=false" in argv  # a stop is podman stop: one SIGTERM
        assert "RANK=0" in argv and "LD_PRELOAD=/x.so" in argv  # for the container only
        assert argv[-3:] == ["localhost/train:1", "python3", "train.py"]

    def test_limits_become_podman_limits(self) -> None:
        argv = containers.run_command(make_task(memory_mib=96, cpu_milli=500))
        assert argv[argv.index("--memory") + 1] == "96m"
        assert argv[argv.index("--memory-swap") + 1] == "96m"
        assert argv[argv.index("--cpus") + 1] == "0.5"

    def test_podman_itself_gets_none_of_the_jobs_variables(self) -> None:
        env = containers.conf_environment("/run/containers.conf", "/usr/bin:/bin")
        assert set(env) == {"PATH", containers.CONF_VARIABLE, "LANG"}

    def test_stop_gives_the_grace_in_whole_seconds(self) -> None:
        assert containers.stop_command("n", 29.6)[-3:] == ["--time", "30", "n"]

    def test_gpu_device_nodes_are_those_the_machine_has(self) -> None:
        present = {"/dev/nvidia1", "/dev/nvidiactl"}
        assert containers.gpu_devices("1,3", present.__contains__) == [
            "/dev/nvidia1",
            "/dev/nvidiactl",
        ]
        assert containers.gpu_devices("", present.__contains__) == []

    def test_a_request_id_becomes_a_container_name_podman_accepts(self) -> None:
        assert containers.container_name("uid.worker-0.a1/x") == "aipaas-uid.worker-0.a1-x"


class TestSetupScript:
    def run(self, commands: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", setup_script(commands)],
            env={**os.environ, "AIPAAS_SETUP_DIR": str(directory)},
            capture_output=True,
            text=True,
            check=False,
        )

    def test_the_commands_run_once_for_every_later_task(self, tmp_path: Path) -> None:
        commands = ['echo ran >> "$AIPAAS_SETUP_DIR/runs"']
        assert self.run(commands, tmp_path / "s").returncode == 0
        assert self.run(commands, tmp_path / "s").returncode == 0
        assert (tmp_path / "s" / "runs").read_text() == "ran\n"

    def test_a_failing_command_stops_the_setup_and_says_which(self, tmp_path: Path) -> None:
        done = self.run(["true", "exit 5", "echo never"], tmp_path / "s")
        assert done.returncode == SETUP_FAILED_CODE
        assert "setup failed: command 2/3 (exit 5) exited with code 5" in done.stdout
        assert "never" not in done.stdout.replace("echo never", "")
        assert self.run(["true"], tmp_path / "s").returncode == 0  # not marked done: run again

    def test_the_cache_key_follows_commands_workdir_and_image(self) -> None:
        base = setup_key(["pip install -r r.txt"], "sha256-a", None)
        assert base == setup_key(["pip install -r r.txt"], "sha256-a", None)
        assert base != setup_key(["pip install -r r.txt"], "sha256-b", None)
        assert base != setup_key(["pip install -r r.txt"], "sha256-a", "localhost/x")
        assert base != setup_key(["pip install -r q.txt"], "sha256-a", None)
