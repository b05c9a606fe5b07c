"""benchmarks/engines.py's engines alone, each with its throwaway cluster on this host: Slurm
(scripts/slurm_cluster.sh, 4 nodes of this machine's cores, no GPUs; ``sbatch`` and ``squeue``),
Ray (its cluster utilities: a head with no CPUs, 2 nodes of 4 CPUs; ``ray.remote``) and plain
processes (what the local backend starts). Each does the work aipaas's jobs do: a task that
prints its start and end two seconds apart, or ``true``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIMED_SHELL = "date +%s.%N; sleep 2; date +%s.%N"
POLL_SECONDS = 0.05
SLOTS = 8  # tasks at once, as each cluster offers (8 CPUs)


def ends_of(output: str) -> list[float]:
    """The end time each task printed (the second number of each task's two lines; log lines
    may carry a ``task | `` prefix)."""
    per_task: dict[str, list[float]] = {}
    for line in output.splitlines():
        task, _, text = line.rpartition(" | ")
        try:
            per_task.setdefault(task, []).append(float(text.strip()))
        except ValueError:
            continue
    if "" in per_task and len(per_task) == 1:  # one output per task, no prefix
        values = per_task[""]
        return [values[i + 1] for i in range(0, len(values) - 1, 2)]
    return [max(values) for values in per_task.values()]


class LocalEngine:
    """Processes started by Python: the floor under the local backend."""

    def server_options(self) -> list[str]:
        return []

    def latency(self, gang: int) -> tuple[float, float]:
        submitted = time.time()
        processes = [
            subprocess.Popen(["/bin/sh", "-c", TIMED_SHELL], stdout=subprocess.PIPE, text=True)
            for _ in range(gang)
        ]
        running = time.time()
        outputs = [p.communicate()[0] for p in processes]
        done = time.time()
        return running - submitted, done - max(ends_of("".join(outputs)))

    def burst(self, jobs: int) -> float:
        started = time.time()
        with ThreadPoolExecutor(SLOTS) as pool:
            list(pool.map(lambda _: subprocess.run(["true"], check=True), range(jobs)))
        return jobs / (time.time() - started)

    def close(self) -> None:
        pass


class SlurmEngine:
    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="aipaas-bench-slurm-"))
        script = ROOT / "scripts" / "slurm_cluster.sh"
        subprocess.run(
            ["bash", str(script), "start", str(self.directory), "4", "0"],
            check=True, capture_output=True, timeout=180,
        )  # fmt: skip
        self.conf = self.directory / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.count = 0

    def server_options(self) -> list[str]:
        return ["--slurm-conf", str(self.conf)]

    def _run(self, *args: str) -> str:
        return subprocess.run(
            list(args), env=self.env, check=True, capture_output=True, text=True, timeout=60
        ).stdout

    def _submit(self, output: str, command: str) -> str:
        return self._run(
            "sbatch", "--parsable", "--cpus-per-task=1", "--mem=64M", f"--output={output}",
            "--export=NIL", "--wrap", command,
        ).strip()  # fmt: skip

    def _states(self, ids: set[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for job in json.loads(self._run("squeue", "--json", "--states=all"))["jobs"]:
            if str(job["job_id"]) in ids:
                state = job["job_state"]
                found[str(job["job_id"])] = str(state[0] if isinstance(state, list) else state)
        return found

    def _wait(self, ids: set[str], states: set[str], pause: float = POLL_SECONDS) -> float:
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            found = self._states(ids)
            if len(found) == len(ids) and all(s in states for s in found.values()):
                return time.time()
            if any(s in ("FAILED", "CANCELLED", "NODE_FAIL") for s in found.values()):
                raise RuntimeError(f"Slurm jobs failed: {found}")
            time.sleep(pause)
        raise RuntimeError(f"Slurm jobs never {states}")

    def latency(self, gang: int) -> tuple[float, float]:
        self.count += 1
        outputs = [self.directory / f"out-{self.count}-{i}" for i in range(gang)]
        submitted = time.time()
        ids = {self._submit(str(o), TIMED_SHELL) for o in outputs}
        running = self._wait(ids, {"RUNNING", "COMPLETING", "COMPLETED"})
        done = self._wait(ids, {"COMPLETED"})
        ends = [ends_of(o.read_text())[0] for o in outputs]
        return running - submitted, done - max(ends)

    def burst(self, jobs: int) -> float:
        started = time.time()
        ids = {self._submit("/dev/null", "true") for _ in range(jobs)}
        done = self._wait(ids, {"COMPLETED"}, pause=0.25)
        return jobs / (done - started)

    def close(self) -> None:
        script = ROOT / "scripts" / "slurm_cluster.sh"
        subprocess.run(["bash", str(script), "stop", str(self.directory)], timeout=60, check=False)
        shutil.rmtree(self.directory, ignore_errors=True)


def _timed() -> tuple[float, float]:
    start = time.time()
    time.sleep(2)
    return start, time.time()


def _true() -> int:
    return subprocess.run(["true"], check=True).returncode


class RayEngine:
    """Ray alone: ``ray.remote`` functions; with ``jobs_api``, also Ray's Job Submission API
    (its head's dashboard; needs ``ray[default]``), Ray's own path for a job with a record,
    logs, status and stop."""

    def __init__(self, jobs_api: bool = False) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray
        from ray.cluster_utils import Cluster

        self.ray: Any = ray
        head: dict[str, Any] = {
            "num_cpus": 0,
            "labels": {"aipaas.dev/node": "ray-head"},
            "include_dashboard": False,
        }
        self.dashboard: str | None = None
        if jobs_api:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            head |= {"include_dashboard": True, "dashboard_port": port}
            self.dashboard = f"http://127.0.0.1:{port}"
        self.cluster: Any = Cluster(initialize_head=True, connect=False, head_node_args=head)
        for name in ("ray-a", "ray-b"):
            self.cluster.add_node(num_cpus=4, labels={"aipaas.dev/node": name})
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, namespace="engines-benchmark", log_to_driver=False)
        self.timed = ray.remote(num_cpus=1)(_timed)
        self.true = ray.remote(num_cpus=1)(_true)

    def server_options(self) -> list[str]:
        return ["--ray-address", str(self.cluster.address)]

    def latency(self, gang: int) -> tuple[float, float]:
        submitted = time.time()
        times = self.ray.get([self.timed.remote() for _ in range(gang)])
        done = time.time()
        return max(t[0] for t in times) - submitted, done - max(t[1] for t in times)

    def burst(self, jobs: int) -> float:
        started = time.time()
        self.ray.get([self.true.remote() for _ in range(jobs)])
        return jobs / (time.time() - started)

    def jobs_burst(self, jobs: int) -> float:
        """Jobs per second through Ray's Job Submission API, first submit to last success."""
        from ray.job_submission import JobStatus, JobSubmissionClient

        assert self.dashboard is not None, "RayEngine(jobs_api=True) starts the dashboard"
        client = JobSubmissionClient(self.dashboard)
        started = time.time()
        ids = [client.submit_job(entrypoint="true") for _ in range(jobs)]
        ended = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            states = [client.get_job_status(job) for job in ids]
            if all(state in ended for state in states):
                if any(state != JobStatus.SUCCEEDED for state in states):
                    raise RuntimeError(f"Ray jobs did not all succeed: {set(states)}")
                return jobs / (time.time() - started)
            time.sleep(POLL_SECONDS)
        raise RuntimeError("Ray's jobs did not end in 20 minutes")

    def close(self) -> None:
        self.ray.shutdown()
        self.cluster.shutdown()
