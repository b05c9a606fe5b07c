"""A real `aipaas server` process on 127.0.0.1 with a free port and a temp data dir."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.port_owner import serves_port

AIPAAS = str(Path(sys.executable).parent / "aipaas")
# A tenant and its queue: what most tests apply first.
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""
ADMIN = "integration-admin-token"
# A viewer of tenant acme: the least a token holder can be.
VIEWER = """apiVersion: aipaas/v1
kind: User
metadata: {name: vera, tenant: acme}
spec: {role: viewer}
"""


def _reachable_by_all(path: Path) -> bool:
    """Every directory on the way can be entered and the file run by any user."""
    resolved = path.resolve()
    try:
        modes = [p.stat().st_mode for p in resolved.parents] + [resolved.stat().st_mode]
    except OSError:
        return False
    return all(mode & stat.S_IXOTH for mode in modes)


def task_python() -> str:
    """A Python a task can run: as root the server runs tasks as unprivileged users, who cannot
    enter an interpreter under /root (pyenv) or a private virtual environment."""
    for candidate in (sys.executable, shutil.which("python3", path="/usr/local/bin:/usr/bin")):
        if candidate and _reachable_by_all(Path(candidate)):
            return candidate
    raise RuntimeError(
        f"no Python that an unprivileged task user can run ({sys.executable} is not reachable "
        "by other users, and there is no python3 in /usr/local/bin or /usr/bin)"
    )


TASK_PYTHON = task_python()


def shared_dir() -> Path:
    """A directory tasks may write to whatever user they run as (pytest's tmp is 0700 root)."""
    path = Path(tempfile.mkdtemp(prefix="aipaas-test-"))
    path.chmod(0o1777)
    atexit.register(shutil.rmtree, path, True)  # outside pytest's tmp: nobody else removes it
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PortTakenError(RuntimeError):
    """The port chosen for a server was taken by someone else before the server bound it."""


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        backend: str = "local",
        db: str | None = None,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        verb: str = "server",
    ) -> None:
        self.data_dir = data_dir
        self.backend = backend
        self.db = db
        self.extra = extra or []
        self.env = env or {}
        self.verb = verb  # "up" for the embedded defaults that also write the CLI config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "server.log"

    def start(self, timeout: float = 120) -> ServerProcess:
        """Start the server and wait until it is ready (a loaded machine imports slowly). The
        port was free when chosen, but another process (another xdist worker's server, an
        outgoing connection) may take it before the server binds: then a fresh port, again."""
        for _ in range(3):
            try:
                return self._start_once(timeout)
            except PortTakenError:
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        return self._start_once(timeout)

    def _start_once(self, timeout: float) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            AIPAAS,
            self.verb,
            "--data-dir",
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backend",
            self.backend,
            "--local-cpus",
            "8",
            "--log-level",
            "warning",
            *self.extra,
        ]
        if self.db:
            command += ["--db", self.db]
        env = {**os.environ, "AIPAAS_BOOTSTRAP_TOKEN": ADMIN, **self.env}
        logged = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                with self.log.open("rb") as log:
                    log.seek(logged)
                    said = log.read().decode(errors="replace")
                if "address already in use" in said.lower():
                    raise PortTakenError(said[-2000:])
                raise RuntimeError(f"server exited: {said[-2000:]}")
            try:
                ready = httpx.get(self.url + "/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                ready = False
            # ready, and itself: not another worker's server that took the port first (this
            # one then fails to bind and exits: a fresh port, above)
            if ready and serves_port(self.process.pid, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def close(self) -> None:
        """The end of a fixture: stop the server and end the tasks it left running (a stopped
        server leaves its local tasks to the next server on its data dir, which a fixture's
        end never starts: they would run on through the rest of the suite)."""
        self.stop()
        end_tasks(self.data_dir.resolve() / "run")

    def kill9(self) -> None:
        """kill -9 of the server process only (its tasks run in their own sessions)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)

    def cli(
        self, *args: str, token: str = ADMIN, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "AIPAAS_URL": self.url,
            "AIPAAS_TOKEN": token,
            "AIPAAS_CONFIG": str(self.data_dir / "no-config.yaml"),
        }
        result = subprocess.run(
            [AIPAAS, *args],
            env=env,
            capture_output=True,
            text=True,
            input=input,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"aipaas {' '.join(args)} failed: {result.stderr}")
        return result

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json").stdout)

    def http(self, token: str = ADMIN) -> httpx.Client:
        return httpx.Client(
            base_url=self.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def job(self, name: str, tenant: str = "acme") -> dict[str, Any]:
        with self.http() as client:
            answer = client.get(f"/jobs/{name}", params={"tenant": tenant})
            answer.raise_for_status()
            result: dict[str, Any] = answer.json()
            return result

    def phase(self, name: str, tenant: str = "acme") -> str:
        return str((self.job(name, tenant).get("status") or {}).get("phase", "Pending"))

    def wait_phase(
        self,
        name: str,
        want: str,
        tenant: str = "acme",
        timeout: float = 90,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Poll until the job is in phase ``want`` (and, if given, its status has ``reason``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(name, tenant)
            status = job.get("status") or {}
            if status.get("phase") == want and reason in (None, status.get("reason")):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {name} never reached {want}: {self.job(name, tenant)}")


@contextmanager
def viewer_world(data_dir: Path) -> Iterator[tuple[ServerProcess, str]]:
    """A server on the simulated backend (no real command runs, whatever a test sends), tenant
    acme with its queue, and the token of its viewer ``vera``."""
    server = ServerProcess(data_dir, backend="sim").start()
    try:
        with server.http() as client:
            for manifest in (SETUP, VIEWER):
                client.post("/apply", content=manifest).raise_for_status()
            answer = client.post("/tokens", json={"user": "vera", "tenant": "acme"})
            answer.raise_for_status()
            yield server, answer.json()["token"]
    finally:
        server.stop()


def live_runners(run_dir: Path) -> dict[str, list[int]]:
    """Request id -> pids of live (not zombie) runner processes of this run directory. A
    runner's child between its fork and its exec still shows the runner's command line: a
    process whose parent is a runner of the same id is that child, not a second runner."""
    runners: dict[int, tuple[str, int]] = {}  # pid -> (request id, parent pid)
    prefix = str(run_dir) + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" or not any(a.endswith(b"runner.py") for a in args):
            continue
        for arg in args:
            text = arg.decode(errors="replace")
            if text.startswith(prefix):
                runners[int(entry.name)] = (text[len(prefix) :].split("/")[0], int(fields[1]))
    found: dict[str, list[int]] = defaultdict(list)
    for pid, (request_id, parent) in runners.items():
        if runners.get(parent, ("", 0))[0] != request_id:
            found[request_id].append(pid)
    return found


def end_tasks(run_dir: Path) -> list[int]:
    """SIGKILL the process group of each live task runner of ``run_dir`` (a runner leads its
    group, its command is in it); the runners' pids."""
    killed = [pid for pids in live_runners(run_dir).values() for pid in pids]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return killed
