"""A new user's first hour on `aipaas up` and the README, each through a real `up`:

a job with ``gpu: 1`` runs its command on fake GPUs that its log and status name; a second `up`
in the same folder, or a server beside `up` on its data directory, refuses in one line and
leaves the CLI config alone; ``Client()`` takes AIPAAS_URL and AIPAAS_TOKEN; an empty
AIPAAS_TOKEN is not the config file's admin token; bad settings, bad options and bad YAML are
each one line; the server logs no line per health check; `scripts/ray_cluster.sh stop` ends
only its own cluster.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.up_process import UpProcess
from tests.support.server_process import AIPAAS, free_port

ROOT = Path(__file__).resolve().parents[2]

GPU_JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {name: gpu-one, tenant: acme}
spec:
  queue: research
  tasks:
    - name: main
      command: [sh, -c, 'echo "visible=$CUDA_VISIBLE_DEVICES fake=$AIPAAS_FAKE_GPUS"']
      resources: {cpu: 1, memory: 256Mi, gpu: 1}
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    """One `aipaas up` with nothing else set up, and the README's hello.yaml applied."""
    process = UpProcess(tmp_path_factory.mktemp("first-hour")).start()
    try:
        applied = process.cli("apply", "-f", str(ROOT / "examples" / "hello.yaml"))
        assert applied.returncode == 0, applied.stderr
        yield process
    finally:
        process.close()


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{text}"
    return lines[0]


def test_a_gpu_job_runs_on_the_demo_and_its_log_and_status_say_the_gpus_are_fake(
    up: UpProcess,
) -> None:
    assert up.cli("apply", "-f", "-", input=GPU_JOB).returncode == 0
    waited = up.cli(
        "wait", "job/gpu-one", "-t", "acme", "--for=phase=Succeeded", "--timeout", "120s"
    )
    job = json.loads(up.cli("get", "job/gpu-one", "-t", "acme", "-o", "json").stdout)
    assert waited.returncode == 0, (waited.stderr, job.get("status"))
    (task,) = job["status"]["tasks"]
    assert task["gpus"] == [0]
    logs = up.cli("logs", "job/gpu-one", "-t", "acme").stdout
    nodes = json.loads(up.cli("get", "nodes", "-o", "json").stdout)
    local = next(n for n in nodes if n["spec"]["backend"] == "local")
    if local["metadata"]["labels"].get("aipaas.dev/fake-gpus") != "true":
        # A machine with an NVIDIA GPU: the job ran on it, and nothing claims it was fake.
        assert "fake" not in task["message"].lower() and "FAKE" not in logs, (task, logs)
        assert "visible=0 fake=\n" in logs + "\n", logs
        return
    assert "fake GPU" in task["message"], task
    assert "GPU(s) 0 are FAKE" in logs.splitlines()[0], logs
    assert "visible=0 fake=0" in logs  # its command ran, seeing the GPU it was given
    assert "fake GPU" in local["metadata"]["annotations"]["aipaas.dev/gpu-discovery"]


def test_the_control_plane_page_does_not_call_what_is_built_unbuilt() -> None:
    page = (ROOT / "docs" / "control-plane.md").read_text()
    assert "## Not yet built" not in page
    assert "per-tenant users yet" not in page
    for built in ("docs/scheduling.md", "docs/finops.md", "docs/dashboard.md"):
        assert built in page, built


def test_a_second_up_in_the_same_folder_refuses_in_one_line_and_keeps_the_config(
    up: UpProcess,
) -> None:
    before = up.config.read_text()
    second = subprocess.run(
        [AIPAAS, "up"], cwd=up.folder, env=up.env(), capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 7, second
    line = _one_line(second.stderr)
    assert "already serves data directory .aipaas" in line and up.url in line, line
    assert up.config.read_text() == before
    assert yaml.safe_load(before)["url"] == up.url


def test_a_server_on_the_data_dir_of_up_refuses_and_the_readme_gives_servers_their_own(
    up: UpProcess,
) -> None:
    beside = subprocess.run(
        [AIPAAS, "server", "--port", str(free_port())],
        cwd=up.folder,
        env=up.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert beside.returncode == 7, beside
    assert "give this server its own --data-dir" in _one_line(beside.stderr)
    # The README's Slurm and Ray servers run beside `up`: another data dir, another port.
    readme = (ROOT / "README.md").read_text()
    servers = re.findall(r"^\.venv/bin/aipaas server .*$", readme, re.M)
    assert servers
    for command in servers:
        assert "--data-dir .aipaas-" in command and "--port 86" in command, command
        assert "--port 8600" not in command, command


def test_client_with_no_arguments_takes_aipaas_url_and_aipaas_token(up: UpProcess) -> None:
    script = (
        "from aipaas.client import Client\n"
        "client = Client()\n"
        "client.wait('job', 'hello', 'phase=Succeeded', timeout=60, tenant='acme')\n"
        "print(client.get('job', 'hello', 'acme')['status']['phase'])\n"
    )
    env = {**up.env(), "AIPAAS_URL": up.url, "AIPAAS_TOKEN": up.token}
    env["AIPAAS_CONFIG"] = str(up.folder / "no-such-config.yaml")  # only the variables
    ran = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "Succeeded"


def test_an_empty_aipaas_token_is_no_token_not_the_configs_admin_token(up: UpProcess) -> None:
    assert yaml.safe_load(up.config.read_text())["token"] == up.token  # the admin's, by `up`
    empty = up.cli("get", "jobs", "-t", "acme", env=up.env(AIPAAS_TOKEN=""))
    assert empty.returncode == 4, empty
    assert "AIPAAS_TOKEN is set but empty" in _one_line(empty.stderr)
    unset = up.cli("get", "jobs", "-t", "acme")
    assert unset.returncode == 0 and "hello" in unset.stdout, unset.stderr


def test_bad_pool_profiles_say_one_line_naming_the_variable_or_the_option(
    tmp_path: Path,
) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIPAAS_")}
    command = [AIPAAS, "server", "--data-dir", str(tmp_path / "d"), "--port", str(free_port())]
    by_env = subprocess.run(
        command,
        env={**base, "AIPAAS_POOL_PROFILES": "gpu-a=nonesuch"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert by_env.returncode == 2, by_env
    line = _one_line(by_env.stderr)
    assert "AIPAAS_POOL_PROFILES" in line and "nonesuch" in line, line
    assert "ValidationError" not in line
    by_option = subprocess.run(
        [*command, "--pool-profiles", "gpu-a"], env=base, capture_output=True, text=True, timeout=60
    )
    assert by_option.returncode == 2, by_option
    assert "--pool-profiles" in _one_line(by_option.stderr)


SIM_POOLS = ("--backend", "sim", "--pool-profiles", "gpu-a=fgd,cpu=bestfit")


def test_a_good_pool_profiles_option_starts_the_server(tmp_path: Path) -> None:
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIPAAS_")}
    server = subprocess.Popen(
        [AIPAAS, "server", "--data-dir", str(tmp_path / "d"), "--port", str(port), *SIM_POOLS],
        env=base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, ready = time.monotonic() + 120, False
        while not ready and time.monotonic() < deadline and server.poll() is None:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).is_success
            except httpx.TransportError:
                time.sleep(0.2)
        said = server.stderr.read() if server.stderr and server.poll() is not None else ""
        assert ready, said or "not ready"
    finally:
        server.terminate()
        server.wait(60)


def test_a_usage_error_is_one_line_with_exit_2(up: UpProcess) -> None:
    wrong = up.cli("get", "jobs", "--bogus")
    assert wrong.returncode == 2
    line = _one_line(wrong.stderr)
    assert line.startswith("error: No such option: --bogus") and "aipaas get --help" in line


def test_a_yaml_error_is_one_line_with_the_file_line_and_column(up: UpProcess) -> None:
    broken = up.folder / "broken.yaml"
    broken.write_text("apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: x, tenant: acme\n")
    answer = up.cli("apply", "-f", str(broken))
    assert answer.returncode == 2
    line = _one_line(answer.stderr)
    assert line.startswith(f"error: {broken}: not valid YAML: "), line
    where = r"at line 4, column 1 \(while parsing a flow mapping that starts at line 3"
    assert re.search(where, line), line


def test_the_server_log_has_no_line_per_health_check_and_the_banner_comes_first(
    up: UpProcess,
) -> None:
    assert up.cli("apply", "-f", str(ROOT / "examples" / "service.yaml")).returncode == 0
    # A request starts a replica, health-checked every second (the example's periodSeconds).
    answer = httpx.get(
        f"{up.url}/services/acme/files/",
        headers={"Authorization": f"Bearer {up.token}"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    time.sleep(6)
    text = up.text()
    assert "HTTP Request:" not in text, [x for x in text.splitlines() if "HTTP Request" in x][:3]
    assert "/healthz" not in text and "/readyz" not in text
    assert text.splitlines()[0].startswith("aipaas is up at "), text[:500]


@pytest.mark.skipif(shutil.which("ray", path=str(ROOT / ".venv" / "bin")) is None, reason="no ray")
def test_ray_cluster_stop_ends_its_own_cluster_and_leaves_other_ray_processes() -> None:
    # A process that `ray stop` counts as Ray's (a worker's script name on its command line).
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "default_worker.py"],
        start_new_session=True,
    )
    # Short: Ray's socket paths under it must stay within AF_UNIX's 107 bytes.
    state = Path(tempfile.mkdtemp(prefix="aipaas-ray-"))
    env = {**os.environ, "AIPAAS_RAY_STATE": str(state), "AIPAAS_RAY_PORT": str(free_port())}
    script = ["bash", str(ROOT / "scripts" / "ray_cluster.sh")]
    try:
        started = subprocess.run(
            [*script, "start", "1", "1"], env=env, capture_output=True, text=True, timeout=300
        )
        assert started.returncode == 0, started.stderr
        mine = _processes_naming(str(state / "ray"))
        assert mine, "the cluster's processes name its session directory"
        stopped = subprocess.run(
            [*script, "stop"], env=env, capture_output=True, text=True, timeout=120
        )
        assert stopped.returncode == 0, stopped.stderr
        assert not _processes_naming(str(state / "ray"))
        assert other.poll() is None, "stop ended a Ray process that was not its cluster's"
    finally:
        other.kill()
        other.wait(10)
        if _processes_naming(str(state / "ray")):
            subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
