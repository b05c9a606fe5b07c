"""benchmarks/engines.py's pieces: an ``aipaas server`` and the aipaas side of the measures.
The engines alone (and their throwaway clusters) are in _engines_alone.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from _engines_alone import ends_of

AIPAAS = str(Path(sys.executable).parent / "aipaas")
TOKEN = "engines-benchmark-token"
POLL_SECONDS = 0.05
#: each task prints when it started and ended, two seconds apart
TIMED = ["/bin/sh", "-c", "date +%s.%N; sleep 2; date +%s.%N"]
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""


@dataclass
class Figures:
    #: gang size -> (seconds from submit to running, seconds from the task's end to done)
    latency: dict[int, tuple[float, float]] = field(default_factory=dict)
    rate: float = 0.0  # jobs per second, first submit to last success
    #: CPU seconds the burst took in aipaas's processes (the server and its children, the
    #: Ray driver among them); the engine's own daemons are not counted
    burst_cpu: float = 0.0
    #: CPU seconds the whole machine was busy during the burst (every process: the engine's
    #: daemons and workers, the commands, the benchmark's client; /proc/stat)
    machine_cpu: float = 0.0
    #: CPU seconds of the burst per process name (cpu_by_name)
    by_name: dict[str, float] = field(default_factory=dict)


def job_yaml(name: str, replicas: int, command: list[str]) -> str:
    quoted = ", ".join(f"'{arg}'" for arg in command)
    return (
        f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: acme}}\n"
        f"spec:\n  queue: research\n  tasks:\n  - name: w\n    replicas: {replicas}\n"
        f"    command: [{quoted}]\n    resources: {{cpu: 1, memory: 64Mi}}\n"
    )


class Server:
    """``aipaas server`` with one backend, its own data directory and port."""

    def __init__(self, data: Path, backend: str, options: list[str]) -> None:
        self.data = data
        self.backend = backend
        self.options = options
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(
            base_url=self.url + "/api/v1", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        )

    def start(self) -> Server:
        command = [
            AIPAAS, "server", "--data-dir", str(self.data), "--host", "127.0.0.1",
            "--port", str(self.port), "--backend", self.backend, "--local-cpus", "8",
            "--log-level", "warning", *self.options,
        ]  # fmt: skip
        log = (self.data / "server.log").open("ab")
        env = {**os.environ, "AIPAAS_BOOTSTRAP_TOKEN": TOKEN}
        self.process = subprocess.Popen(
            command, env=env, stdout=log, stderr=log, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((self.data / "server.log").read_text()[-2000:])
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not become ready")

    def stop(self) -> None:
        self.client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def setup(self) -> None:
        self.client.post("/apply", content=SETUP).raise_for_status()

    def submit(self, name: str, replicas: int, command: list[str]) -> None:
        self.client.post("/apply", content=job_yaml(name, replicas, command)).raise_for_status()

    def phase(self, name: str) -> str:
        answer = self.client.get(f"/jobs/{name}", params={"tenant": "acme"})
        answer.raise_for_status()
        return str((answer.json().get("status") or {}).get("phase", "Pending"))

    def phases(self) -> dict[str, str]:
        found: dict[str, str] = {}
        params: dict[str, Any] = {"tenant": "acme", "limit": 5000}
        while True:
            page = self.client.get("/jobs", params=params).json()
            for job in page["items"]:
                found[job["metadata"]["name"]] = (job.get("status") or {}).get("phase", "Pending")
            token = page["metadata"].get("continue")
            if not token:
                return found
            params["continue"] = token

    def logs(self, name: str) -> str:
        answer = self.client.get(f"/jobs/{name}/logs", params={"tenant": "acme"})
        answer.raise_for_status()
        return answer.text


def wait_phase(server: Server, name: str, wanted: str, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phase = server.phase(name)
        if phase == wanted:
            return time.time()
        if phase in ("Failed", "Cancelled"):
            raise RuntimeError(f"{name} {phase}: {server.logs(name)[-500:]}")
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"{name} never {wanted} ({server.phase(name)})")


def aipaas_latency(server: Server, gang: int, name: str) -> tuple[float, float]:
    submitted = time.time()
    server.submit(name, gang, TIMED)
    running = wait_phase(server, name, "Running")
    done = wait_phase(server, name, "Succeeded")
    ends = ends_of(server.logs(name))
    if len(ends) != gang:
        raise RuntimeError(f"{name}: {len(ends)} task ends in its logs, not {gang}")
    return running - submitted, done - max(ends)


def machine_cpu() -> float:
    """CPU seconds this machine has been busy since boot, all cores together (/proc/stat: every
    state but idle and iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(value) for value in fields]
    busy = sum(ticks) - ticks[3] - ticks[4]  # idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessCpu:
    name: str  # /proc comm, which Ray sets to a worker's task or actor
    parent: int
    own: float  # CPU seconds, user + system
    reaped: float  # CPU seconds of the children it waited for


def processes() -> dict[int, ProcessCpu]:
    """Every live process's CPU, from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, ProcessCpu] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        found[int(entry.name)] = ProcessCpu(
            name=text[text.index("(") + 1 : text.rindex(")")],
            parent=int(fields[1]),
            own=(int(fields[11]) + int(fields[12])) / tick,
            reaped=(int(fields[13]) + int(fields[14])) / tick,
        )
    return found


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live descendants, from /proc."""
    every = processes()
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += every[current].own if current in every else 0.0
        todo += [child for child, process in every.items() if process.parent == current]
    return total


def aipaas_burst(server: Server, jobs: int, per_request: int = 1) -> tuple[float, float, float]:
    """Jobs per second from the first submit to the last success (``true``, one task each,
    ``per_request`` jobs to an apply), the CPU seconds the server's processes took meanwhile,
    and the machine's."""
    assert server.process is not None
    cpu_before = tree_cpu(server.process.pid)
    machine_before = machine_cpu()
    started = time.time()
    for first in range(0, jobs, per_request):
        names = range(first, min(first + per_request, jobs))
        body = "---\n".join(job_yaml(f"burst-{index}", 1, ["true"]) for index in names)
        server.client.post("/apply", content=body).raise_for_status()
    sent = time.time()
    print(f"  {server.backend}: {jobs / (sent - started):.1f} submits/s", file=sys.stderr)
    deadline = time.monotonic() + 1200
    last = f"burst-{jobs - 1}"
    while time.monotonic() < deadline:
        # the last job submitted is about the last to end: only once it has is the whole list
        # read (a list of 500 jobs every poll cost the server more CPU than the jobs' own
        # transitions, and a coarser poll blurred the end)
        if server.phase(last) not in ("Succeeded", "Failed"):
            time.sleep(POLL_SECONDS)
            continue
        phases = server.phases()
        done = sum(1 for n, p in phases.items() if n.startswith("burst-") and p == "Succeeded")
        failed = [n for n, p in phases.items() if n.startswith("burst-") and p == "Failed"]
        if failed:
            raise RuntimeError(f"{len(failed)} burst jobs failed, e.g. {failed[0]}")
        if done == jobs:
            rate = jobs / (time.time() - started)
            return rate, tree_cpu(server.process.pid) - cpu_before, machine_cpu() - machine_before
        time.sleep(POLL_SECONDS)
    raise RuntimeError("the burst did not finish in 20 minutes")


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """Each live process's name and CPU seconds: its own and its reaped children's (a command
    that ended inside a burst is counted in the process that waited for it)."""
    return {pid: (p.name, p.own + p.reaped) for pid, p in processes().items()}


def cpu_by_name(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per process name since ``before`` (processes started since count whole)."""
    spent: dict[str, float] = {}
    for pid, (name, seconds) in cpu_by_process().items():
        earlier = before.get(pid)
        start = earlier[1] if earlier is not None and earlier[0] == name else 0.0
        if seconds > start:
            spent[name] = spent.get(name, 0.0) + seconds - start
    return spent
