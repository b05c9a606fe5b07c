"""A real server, the CLI and real processes: the issue's example manifests, logs, events,
quotas, isolation, and errors on standard error."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.server_process import ADMIN, AIPAAS, TASK_PYTHON, ServerProcess, shared_dir

EXAMPLES = Path(__file__).parents[2] / "examples"

WRITER = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: writer}}
spec:
  queue: research
  minAvailable: 2
  tasks:
    - name: worker
      replicas: 2
      command:
        - {python}
        - -c
        - |
          import os
          rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
          print("rank", rank, "of", world)
          with open(os.path.join({out!r}, "rank-" + rank), "w") as handle:
              handle.write(world)
      resources: {{cpu: 1, memory: 256Mi}}
"""


def test_hello_and_a_writer_through_the_cli(server: ServerProcess, tmp_path: Path) -> None:
    applied = server.cli("apply", "-f", str(EXAMPLES / "hello.yaml")).stdout
    assert applied.splitlines() == [
        "tenant/acme created",
        "user/alice created",
        "queue/research created",
        "job/hello created",
    ]
    token = server.cli("tokens", "create", "alice").stdout
    assert token.count("\n") == 1 and token.startswith("aip_")
    alice = token.strip()

    out = shared_dir()  # the tasks run as the tenant's user: pytest's tmp is not theirs
    manifest = tmp_path / "writer.yaml"
    manifest.write_text(WRITER.format(python=TASK_PYTHON, out=str(out)))
    assert server.cli("apply", "-f", str(manifest), token=alice).stdout == "job/writer created\n"

    hello = server.wait_phase("hello", "Succeeded")
    assert [t["exitCode"] for t in hello["status"]["tasks"]] == [0, 0]
    server.wait_phase("writer", "Succeeded")
    assert sorted(p.name for p in out.iterdir()) == ["rank-0", "rank-1"]
    assert (out / "rank-1").read_text() == "2"

    as_json = json.loads(server.cli("get", "job", "hello", "-o", "json", token=alice).stdout)
    assert as_json["status"]["phase"] == "Succeeded"
    listed = json.loads(server.cli("get", "jobs", "-o", "json", token=alice).stdout)
    assert sorted(j["metadata"]["name"] for j in listed) == ["hello", "writer"]

    logs = server.cli("logs", "job/hello", token=alice).stdout.splitlines()
    assert logs == ["worker-0 | rank 0 of 2", "worker-1 | rank 1 of 2"]
    one = server.cli("logs", "job/writer", "--task", "worker-1", token=alice).stdout
    assert one == "worker-1 | rank 1 of 2\n"
    followed = server.cli("logs", "job/hello", "-f", token=alice).stdout.splitlines()
    assert sorted(followed) == logs

    events = json.loads(server.cli("events", "job", "hello", "-o", "json", token=alice).stdout)
    reasons = [e["reason"] for e in events]
    assert reasons[:3] == ["Created", "Scheduled", "Running"]
    assert reasons[-1] == "Succeeded" and reasons.count("TaskSucceeded") == 2
    usage = json.loads(server.cli("usage", "--by", "user", "-o", "json", token=alice).stdout)
    by_user = {row["user"]: row["tasks"] for row in usage["items"]}
    assert by_user == {"admin": 2, "alice": 2}
    with server.http(alice) as client:
        nodes = client.get("/nodes").json()["items"]
    assert [n["spec"]["backend"] for n in nodes] == ["local"]


def test_failures_exit_non_zero_with_the_message(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    sqlite_server.cli("apply", "-f", str(EXAMPLES / "hello.yaml"))
    missing = sqlite_server.cli("get", "job", "nope", "-t", "acme", check=False)
    assert missing.returncode != 0 and "job nope not found" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: x, tenant: acme}\n"
        "spec: {queue: research, tasks: [{name: w, command: [x], replicas: -1}]}\n"
    )
    invalid = sqlite_server.cli("apply", "-f", str(bad), check=False)
    assert invalid.returncode != 0 and "spec.tasks[0].replicas" in invalid.stderr
    unauth = sqlite_server.cli("get", "jobs", token="wrong", check=False)
    assert unauth.returncode != 0 and "invalid token" in unauth.stderr
    unknown_file = sqlite_server.cli("apply", "-f", str(tmp_path / "absent.yaml"), check=False)
    assert unknown_file.returncode != 0 and "cannot read" in unknown_file.stderr
    sqlite_server.wait_phase("hello", "Succeeded")
    # The platform admin need not name the tenant of a uniquely named job.
    as_admin = json.loads(sqlite_server.cli("get", "job", "hello", "-o", "json").stdout)
    assert as_admin["status"]["phase"] == "Succeeded"
    assert "worker-1 | rank 1 of 2" in sqlite_server.cli("logs", "job/hello").stdout
    described = sqlite_server.cli("describe", "job", "hello").stdout
    assert "phase: Succeeded" in described and "Scheduled" in described
    cancel_done = sqlite_server.cli("cancel", "job/hello", "-t", "acme", check=False)
    assert cancel_done.returncode != 0 and "already finished" in cancel_done.stderr


def test_quota_wait_then_start(sqlite_server: ServerProcess) -> None:
    setup = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
spec: {quota: {cpu: 2}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""
    job = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, tenant: acme}}
spec:
  queue: research
  tasks:
    - {{name: w, replicas: 2, command: [/bin/sh, -c, {script!r}], resources: {{cpu: 1}}}}
"""
    # The first job holds the quota until the test has seen the second wait for it.
    release = shared_dir() / "release"
    hold = f"i=0; while [ ! -e {release} ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done"
    sqlite_server.cli("apply", "-f", "-", input=setup + job.format(name="first", script=hold))
    sqlite_server.wait_phase("first", "Running")
    sqlite_server.cli("apply", "-f", "-", input=job.format(name="second", script="true"))
    # Pending at once ("Submitted"), then the controller's admission says why it waits.
    waiting = sqlite_server.wait_phase("second", "Pending", reason="QuotaExceeded")
    assert waiting["status"]["message"] == (
        "tenant acme is at its quota of 2 CPUs (cpu: holds 2, needs 2 more)"
    )
    release.touch()
    sqlite_server.wait_phase("first", "Succeeded")
    sqlite_server.wait_phase("second", "Succeeded")


def test_cancel_stops_the_processes(sqlite_server: ServerProcess) -> None:
    sqlite_server.cli("apply", "-f", str(EXAMPLES / "hello.yaml"))
    marker = shared_dir() / "finished"
    job = (
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: long, tenant: acme}}\n"
        f"spec:\n  queue: research\n  tasks:\n    - name: w\n"
        f'      command: [{TASK_PYTHON}, -c, "import time; time.sleep(600); '
        f"open({str(marker)!r}, 'w')\"]\n"
    )
    sqlite_server.cli("apply", "-f", "-", input=job)
    sqlite_server.wait_phase("long", "Running")
    assert sqlite_server.cli("cancel", "job/long", "-t", "acme").stdout == "job long cancelling\n"
    cancelled = sqlite_server.wait_phase("long", "Cancelled")
    assert cancelled["status"]["tasks"][0]["phase"] == "Cancelled"
    run = sqlite_server.data_dir / "run"
    (pid_file,) = list(run.glob("*.w-0.0/pid"))
    pid = int(pid_file.read_text())
    sqlite_server.wait_phase("long", "Cancelled")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            break
        time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert not marker.exists()
    deleted = sqlite_server.cli("delete", "job", "long", "-t", "acme").stdout
    assert deleted == "job long deleted\n"
    assert sqlite_server.cli("get", "job", "long", "-t", "acme", check=False).returncode != 0


def test_isolation_between_tenants(server: ServerProcess) -> None:
    server.cli("apply", "-f", str(EXAMPLES / "hello.yaml"))
    other = (EXAMPLES / "hello.yaml").read_text().replace("acme", "globex")
    other = other.replace("alice", "bob")
    server.cli("apply", "-f", "-", input=other)
    viewer = (
        "apiVersion: aipaas/v1\nkind: User\nmetadata: {name: vic, tenant: acme}\n"
        "spec: {role: viewer}\n"
    )
    server.cli("apply", "-f", "-", input=viewer)
    alice = server.cli("tokens", "create", "alice", "-t", "acme").stdout.strip()
    vic = server.cli("tokens", "create", "vic", "-t", "acme").stdout.strip()
    with server.http(alice) as client:
        assert client.get("/jobs/hello", params={"tenant": "globex"}).status_code == 404
        assert client.delete("/jobs/hello", params={"tenant": "globex"}).status_code == 404
        assert client.post("/jobs/hello/cancel", params={"tenant": "globex"}).status_code == 404
        names = [
            (j["metadata"]["tenant"], j["metadata"]["name"])
            for j in client.get("/jobs").json()["items"]
        ]
        assert names == [("acme", "hello")]
        tenant = "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: evil}\n"
        assert client.post("/apply", content=tenant).status_code == 403
    with server.http(vic) as client:
        job = (EXAMPLES / "hello.yaml").read_text().split("---")[-1].replace("hello", "v")
        assert client.post("/apply", content=job).status_code == 403
    with server.http("not-a-token") as client:
        assert client.get("/jobs").status_code == 401
    assert httpx.get(server.url + "/metrics").status_code == 401  # a token is needed
    with server.http(vic) as client:  # a viewer's is not enough
        assert httpx.get(server.url + "/metrics", headers=client.headers).status_code == 403
    with server.http() as client:  # the platform admin's is
        assert httpx.get(server.url + "/metrics", headers=client.headers).status_code == 200


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_logs_follow_a_running_job(sqlite_server: ServerProcess) -> None:
    sqlite_server.cli("apply", "-f", str(EXAMPLES / "hello.yaml"))
    # The job prints its second line only once the test has read the first through logs -f
    # (a release file, waited for at most 5 minutes): the logs are surely followed while it runs.
    release = shared_dir() / "release"
    script = (
        "import os, time; print('first', flush=True); end = time.monotonic() + 300\n"
        f"while not os.path.exists({str(release)!r}) and time.monotonic() < end: time.sleep(0.1)\n"
        "print('second')"
    )
    job = (
        "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: talk, tenant: acme}\n"
        f"spec:\n  queue: research\n  tasks:\n    - name: w\n"
        f"      command: [{TASK_PYTHON}, -c, {json.dumps(script)}]\n"
    )
    sqlite_server.cli("apply", "-f", "-", input=job)
    sqlite_server.wait_phase("talk", "Running")
    env = {
        **os.environ,
        "AIPAAS_URL": sqlite_server.url,
        "AIPAAS_TOKEN": ADMIN,
        "AIPAAS_CONFIG": str(sqlite_server.data_dir / "no-config.yaml"),
    }
    follower = subprocess.Popen(
        [AIPAAS, "logs", "job/talk", "-t", "acme", "-f"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "w-0 | first\n"
        release.touch()
        rest, _ = follower.communicate(timeout=120)
    finally:
        follower.kill()
    assert rest == "w-0 | second\n"
    assert follower.returncode == 0
    assert sqlite_server.phase("talk") == "Succeeded"
