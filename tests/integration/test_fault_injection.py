"""Fault injection: the controller runs in a real process over the local backend, whose
inventory and status calls fail at random; the process is killed with SIGKILL at random moments
and started again, over 200 rounds, while jobs are submitted and cancelled.

What is counted is what runs: the runner processes of the tasks, found in /proc (not the
controller's records). At every round no task has two live attempts, no GPU is used by two
live tasks, and no tenant has more GPUs, CPU or memory in live tasks than its quota.

Restarting the controller costs a fork of a process that has already imported the package
(the "zygote" below): a fresh interpreter costs a second, and 200 of them would take minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

from aipaas.api.job import Job
from aipaas.api.tenancy import Role
from aipaas.server.service import ObjectService
from aipaas.store import Store
from aipaas.tenancy.principal import Principal
from tests.support.server_process import end_tasks, live_runners

ROUNDS = 200
SEED = 1110
GPUS = 4
QUOTAS = {"t1": 2, "t2": 3}  # GPUs; 5 asked of 4: the tenants compete
# CPU milli-cores and memory MiB: t1's CPU and t2's memory bind before their GPUs do (tasks ask
# 100 or 200 milli-cores and 16 or 32 MiB)
CPU_MEMORY = {"t1": (300, 96), "t2": (600, 64)}

ZYGOTE = textwrap.dedent(
    """
    import os, random, sys
    from pathlib import Path

    from aipaas.backends.fencing import FENCING_FILE, Fenced, TokenFile
    from aipaas.backends.local import LocalBackend
    from aipaas.backends.local.machine import Gpu
    from aipaas.controller.cycle import Controller
    from aipaas.controller.loop import ControllerLoop
    from aipaas.store import Store
    from aipaas.store.lease import Lease, holder_id

    url, run_dir, log_dir, seed = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]


    class Flaky:
        # The local backend whose inventory and status calls fail at random.
        def __init__(self, inner, rng):
            self.inner, self.rng, self.name = inner, rng, inner.name

        def inventory(self):
            if self.rng.random() < 0.2:
                raise OSError("inventory: injected failure")
            return self.inner.inventory()

        def start(self, request):
            self.inner.start(request)

        def stop(self, request_id, grace_seconds=5.0):
            self.inner.stop(request_id, grace_seconds)

        def status(self, request_ids):
            if self.rng.random() < 0.2:
                raise OSError("status: injected failure")
            return self.inner.status(request_ids)

        def close(self):
            self.inner.close()


    def controller(generation):
        store = Store.open(url)
        local = LocalBackend(
            run_dir, node_name="box", cpu_milli=16000, memory_mib=65536,
            gpus=[Gpu(i, "H100", 81920) for i in range(int(sys.argv[5]))],
        )
        backend = Flaky(Fenced(local, TokenFile(local.run_dir / FENCING_FILE)),
                        random.Random(f"{seed}-{generation}"))
        ctl = Controller(store, backend, log_dir=log_dir, backoff_seconds=0.2,
                         stop_grace_seconds=1.0, inventory_seconds=0.1)
        loop = ControllerLoop(ctl, 0.05, Lease(store, holder_id(str(generation)), ttl=5))
        loop._run()  # this thread is the controller's


    generation = 0
    while True:
        generation += 1
        pid = os.fork()
        if pid == 0:
            os.setsid()
            try:
                controller(generation)
            finally:
                os._exit(1)
        print(pid, flush=True)
        os.waitpid(pid, 0)
        if sys.stdin.readline() == "":
            break  # the test is gone: no more controllers
    """
)


def gpus_of(run_dir: Path, request_id: str) -> list[int]:
    """The GPUs a live task was given (its launch record)."""
    try:
        launch = json.loads((run_dir / request_id / "launch.json").read_text())
    except (OSError, ValueError):
        return []
    text = launch.get("env", {}).get("CUDA_VISIBLE_DEVICES", "")
    return [int(g) for g in text.split(",") if g.strip().isdigit()]


def test_no_task_runs_twice_under_faults_and_kills(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    url = f"sqlite:///{tmp_path / 'aipaas.db'}"
    run_dir = (tmp_path / "run").resolve()
    store = Store.open(url)
    service = ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN))
    service.apply_text(
        "".join(
            f"---\napiVersion: aipaas/v1\nkind: Tenant\nmetadata: {{name: {t}}}\n"
            f"spec: {{quota: {{gpu: {q}, cpu: {CPU_MEMORY[t][0]}m, "
            f"memory: {CPU_MEMORY[t][1]}Mi}}}}\n---\napiVersion: aipaas/v1\nkind: Queue\n"
            f"metadata: {{name: q, tenant: {t}}}\n"
            for t, q in QUOTAS.items()
        )
    )
    script = tmp_path / "zygote.py"
    script.write_text(ZYGOTE)
    arguments = [url, str(run_dir), str(tmp_path / "logs"), str(SEED), str(GPUS)]
    zygote = subprocess.Popen(
        [sys.executable, str(script), *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    tenants: dict[str, str] = {}  # job uid -> tenant
    sizes: dict[str, tuple[int, int]] = {}  # job name, then uid -> (milli-cores, MiB) a task
    submitted = kills = observed = 0
    seen_attempts: set[str] = set()
    try:
        controller = int(zygote.stdout.readline())
        for round_ in range(3 * ROUNDS):
            # ROUNDS rounds, then more while too little was seen running (a loaded machine
            # starts tasks slowly): the checks below hold every round however many there are.
            if round_ >= ROUNDS and observed >= 100 and _restarted(seen_attempts):
                break
            if rng.random() < 0.4:
                tenant = rng.choice(sorted(QUOTAS))
                seconds = rng.choice(["0.3", "0.8", "1.5"])
                code = rng.choice([0, 0, 3])
                # Half the tasks ignore SIGTERM (as training that checkpoints first may): only
                # the SIGKILL after the grace period ends them, so a stop is not instant.
                trap = rng.choice(["", 'trap "" TERM; '])
                cpu, memory = rng.choice([100, 200]), rng.choice([16, 32])
                sizes[f"j{submitted}"] = (cpu, memory)
                service.apply_text(
                    f"apiVersion: aipaas/v1\nkind: Job\n"
                    f"metadata: {{name: j{submitted}, tenant: {tenant}}}\n"
                    f"spec:\n  queue: q\n  tasks:\n    - name: w\n"
                    f"      replicas: {rng.choice([1, 2])}\n"
                    f"      command: [/bin/sh, -c, '{trap}sleep {seconds}; exit {code}']\n"
                    f"      resources: {{cpu: {cpu}m, memory: {memory}Mi, gpu: 1}}\n"
                    f"      restartPolicy: OnFailure\n      backoffLimit: 2\n"
                )
                submitted += 1
            if submitted and rng.random() < 0.1:
                name = f"j{rng.randrange(submitted)}"
                job = store.find("Job", "t1", name) or store.find("Job", "t2", name)
                if isinstance(job, Job) and not (job.status and job.status.phase.finished):
                    service.cancel(job.name, job.tenant)
            time.sleep(rng.uniform(0.0, 0.25))
            if rng.random() < 0.3:
                with contextlib.suppress(ProcessLookupError):  # (unless it died by itself)
                    os.kill(controller, signal.SIGKILL)  # at whatever point of its cycle
                zygote.stdin.write("again\n")
                zygote.stdin.flush()
                controller = int(zygote.stdout.readline())
                kills += 1
            # What runs now, counted from the processes themselves.
            live = live_runners(run_dir)
            tasks: dict[str, list[str]] = defaultdict(list)
            users: dict[int, list[str]] = defaultdict(list)
            tenant_gpus: dict[str, int] = defaultdict(int)
            tenant_cpu_memory: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for request_id, pids in live.items():
                assert len(pids) == 1, f"round {round_}: {request_id} runs {len(pids)} times"
                uid, task, _attempt = request_id.rsplit(".", 2)
                tasks[f"{uid}.{task}"].append(request_id)
                seen_attempts.add(request_id)
                if uid not in tenants:
                    job = _job_of(store, uid)
                    tenants[uid], sizes[uid] = job.tenant, sizes[job.name]
                for kind, amount in enumerate(sizes[uid]):
                    tenant_cpu_memory[tenants[uid]][kind] += amount
                for gpu in gpus_of(run_dir, request_id):
                    users[gpu].append(request_id)
                    tenant_gpus[tenants[uid]] += 1
                observed += 1
            twice = {t: ids for t, ids in tasks.items() if len(ids) > 1}
            assert not twice, f"round {round_}: tasks with two live attempts: {twice}"
            shared = {g: ids for g, ids in users.items() if len(ids) > 1}
            assert not shared, f"round {round_}: GPUs used by two live tasks: {shared}"
            for tenant, count in tenant_gpus.items():
                assert count <= QUOTAS[tenant], f"round {round_}: {tenant} runs {count} GPUs"
            for tenant, (cpu, memory) in tenant_cpu_memory.items():
                quota_cpu, quota_memory = CPU_MEMORY[tenant]
                assert cpu <= quota_cpu, f"round {round_}: {tenant} runs {cpu}m CPU"
                assert memory <= quota_memory, f"round {round_}: {tenant} runs {memory}Mi"
    finally:
        zygote.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(controller, signal.SIGKILL)
        zygote.wait(30)
        end_tasks(run_dir)
        store.close()
    # The run exercised what it claims to: kills, tasks seen running, restarts of attempts.
    assert kills >= 40 and observed >= 100
    assert _restarted(seen_attempts), "no restart ever ran"


def _restarted(attempts: set[str]) -> bool:
    """An attempt other than the first was seen running."""
    return any(not rid.endswith(".0") for rid in attempts)


def _job_of(store: Store, uid: str) -> Job:
    for job in store.list_objects("Job", None):
        if job.metadata.uid == uid and isinstance(job, Job):
            return job
    raise AssertionError(f"a live task of no job: {uid}")
