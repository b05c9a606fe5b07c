"""A property test of the controller: 10,000 random operations (submissions of gangs and elastic
jobs with whole and fractional GPUs, completions, failures and restarts, cancellations,
deletions, tasks killed behind the controller's back, a backend that fails or lies now and then,
controller crashes in the middle of a cycle and plain restarts: a new Controller and a new
backend object over the same store and run directory).

After every cycle the backend's own state (what the simulator says runs, not the controller's
records) must hold: no task has two live attempts, no GPU gives more than all of itself, and
no tenant or queue has more GPUs, CPU or memory running than its quota. A lie answers
"unknown" for a task that still runs, once or three times in a row (for one the controller
saw running, whose stop "unknown" never confirms): it must not be replaced while it runs.
A seeded driver, not hypothesis: the sequence is reproducible from the seed in the failure
message, and 10,000 steps stay within CI time.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from aipaas.api.job import Job, JobPhase
from aipaas.backends.base import Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.sim import SimBackend
from aipaas.backends.sim.cluster import load_cluster_with_slices
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from tests.support.ctl_world import World

OPERATIONS = 10_000
SEED = 20261123

CLUSTER = """nodes:
  - {name: dgx, count: 3, cpu: 64, memory: 512Gi, gpus: {count: 8, model: H100, memory: 80Gi}}
"""
# Quotas: GPUs, CPU cores, memory GiB (None: no quota of that kind); the cluster has 24 GPUs,
# 192 cores and 1536 GiB, and tasks ask 1 to 8 cores and 4 to 64 GiB: each kind really binds.
Quota = tuple[int | None, int | None, int | None]
TENANTS: dict[str, Quota] = {
    "red": (6, 24, 160),
    "blue": (12, None, 256),
    "green": (None, 40, None),
}
QUEUES: dict[tuple[str, str], Quota] = {
    ("red", "q1"): (4, 12, None),
    ("red", "q2"): (None, None, 96),
    ("blue", "q1"): (10, 48, None),
    ("green", "q1"): (None, None, 192),
}
KINDS = ("gpu", "cpu", "memory")
UNITS = (1000, 1000, 1024)  # milli-GPUs, milli-cores and MiB per unit of the quota


def quota_spec(quota: Quota) -> str:
    values = [f"{kind}: {value}{'Gi' if kind == 'memory' else ''}" for kind, value in zip(
        KINDS, quota, strict=True) if value is not None]  # fmt: skip
    return "{quota: {" + ", ".join(values) + "}}"


class Crash(BaseException):
    """The controller's process dies here (not an Exception: nothing in it may catch it)."""


class Chaos:
    """The simulator, with faults on demand: calls that fail, a status that lies once,
    a crash at the next start (before or after the backend hears of it). Stops take effect
    later, at random (a process that handles SIGTERM before it ends)."""

    def __init__(self, inner: SimBackend, rng: random.Random) -> None:
        self.inner = inner
        self.name = inner.name
        self.rng = rng
        self.fail_next_inventory = False
        self.fail_next_status = False
        self.lie_about: str | None = None  # reported UNKNOWN once, though it runs
        self.lies_left = 0  # answers about lie_about still to be lies (1 or 3)
        self.crash_at_start: str | None = None  # "before" or "after"
        self.started: dict[str, LaunchRequest] = {}  # every start the backend accepted
        self.stopping: set[str] = set()  # asked to stop, not stopped yet

    def inventory(self) -> Inventory:
        if self.fail_next_inventory:
            self.fail_next_inventory = False
            raise OSError("inventory: connection refused")
        return self.inner.inventory()

    def start(self, request: LaunchRequest) -> None:
        if self.crash_at_start == "before":
            self.crash_at_start = None
            raise Crash()
        self.inner.start(request)
        if request.node in self.inner._names:
            self.started.setdefault(request.request_id, request)
        if self.crash_at_start == "after":
            self.crash_at_start = None
            raise Crash()

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self.stopping.add(request_id)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        for request_id in sorted(self.stopping, key=self._order):
            if self.rng.random() < 0.4:
                self.inner.stop(request_id)
                self.stopping.discard(request_id)
        if self.fail_next_status:
            self.fail_next_status = False
            raise OSError("status: timed out")
        answers = self.inner.status(request_ids)
        if self.lie_about in answers:
            answers[self.lie_about] = TaskStatus(self.lie_about, TaskState.UNKNOWN)
            self.lies_left -= 1
            if self.lies_left <= 0:
                self.lie_about = None
        return answers

    def close(self) -> None:
        self.inner.close()

    def _order(self, request_id: str) -> tuple[str, str, str]:
        """Job, task, attempt: an order that does not depend on uids (so a seed replays)."""
        started = self.started.get(request_id)
        _, task, attempt = request_id.rsplit(".", 2)
        return (started.job if started else "", task, attempt)


class Driver:
    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        cluster = world.tmp / "cluster.yaml"
        cluster.write_text(CLUSTER)
        self.nodes, self.slices = load_cluster_with_slices(cluster)
        self.ended: set[str] = set()  # started ids the backend says ended (for good)
        self.backend = self._backend()
        self.controller = self._controller()
        self.jobs: dict[str, tuple[str, str]] = {}  # name -> (tenant, queue)
        self.sizes: dict[str, tuple[int, int]] = {}  # name -> (milli-cores, MiB) of a replica
        self.count = 0
        self.crashes = 0
        self.cycles = 0
        # GPU milli, CPU milli and memory MiB running per tenant, at most
        self.peak: dict[tuple[str, str], int] = defaultdict(int)

    def _backend(self) -> Chaos:
        sim = SimBackend(self.world.tmp / "run", self.nodes, self.clock, slices=self.slices)
        return Chaos(sim, self.rng)

    def _controller(self) -> Controller:
        return self.world.controller(
            self.backend, self.clock, backoff_seconds=1.0, inventory_seconds=0.0
        )

    def restart(self) -> None:
        """A new process: a new backend object over the same run directory, a new controller;
        what the backend accepted stays known to the test (it is the backend's truth)."""
        started, stopping = self.backend.started, self.backend.stopping
        self.backend.close()
        self.backend = self._backend()
        self.backend.started, self.backend.stopping = started, stopping  # signals already sent
        self.controller = self._controller()
        self.crashes += 1

    # operations -------------------------------------------------------------------------

    def submit(self) -> None:
        tenant, queue = self.rng.choice(sorted(QUEUES))
        name = f"j{self.count}"
        self.count += 1
        replicas = self.rng.choice([1, 1, 2, 2, 3, 4])
        gpu = self.rng.choice(["1", "2", "4", "0.5", "{count: 2, model: H100}"])
        elastic = replicas > 1 and self.rng.random() < 0.4
        extra = f"  minAvailable: {self.rng.randint(1, replicas - 1)}\n" if elastic else ""
        restart = ""
        if self.rng.random() < 0.4:
            restart = (
                f"      restartPolicy: OnFailure\n      backoffLimit: {self.rng.randint(0, 3)}\n"
            )
        annotations = [f"sim.aipaas.dev/duration: '{self.rng.randint(1, 25)}'"]
        if self.rng.random() < 0.25:
            annotations.append("sim.aipaas.dev/exit-code: '3'")
        cpu = self.rng.choice([1, 2, 2, 4, 8])
        memory = self.rng.choice([4, 8, 8, 16, 64])
        tasks = (
            f"    - name: w\n      replicas: {replicas}\n      command: [train]\n"
            f"      resources: {{cpu: {cpu}, memory: {memory}Gi, gpu: {gpu}}}\n{restart}"
        )
        text = (
            f"apiVersion: aipaas/v1\nkind: Job\nmetadata: {{name: {name}, tenant: {tenant}, "
            f"annotations: {{{', '.join(annotations)}}}}}\n"
            f"spec:\n  queue: {queue}\n{extra}  tasks:\n{tasks}"
        )
        self.world.service.apply_text(text)
        self.jobs[name] = (tenant, queue)
        self.sizes[name] = (cpu * 1000, memory * 1024)

    def cycle(self) -> None:
        try:
            self.controller.run_cycle()
        except Crash:
            self.restart()
        self.cycles += 1
        self.check()

    def cancel(self) -> None:
        job = self._some_job(finished=False)
        if job is not None:
            self.world.service.cancel(job.name, job.tenant)

    def delete(self) -> None:
        job = self._some_job(finished=None)
        if job is not None:
            self.world.service.delete("Job", job.name, job.tenant)

    def kill(self) -> None:
        """A task dies behind the controller's back (an OOM kill, a node reboot)."""
        running = self._running()
        if running:
            self.backend.inner.stop(self.rng.choice(running))

    def lie(self) -> None:
        """Answer "unknown" once for a task that runs; or three times in a row for one the
        controller saw running (its record has ``started_at``: the first answer gets it given
        up, the next two are about its stop): neither may get it replaced while it runs."""
        running = self._running()
        if not running:
            return
        rid = self.rng.choice(running)
        self.backend.lie_about, self.backend.lies_left = rid, 1
        if self.rng.random() < 0.5:
            uid = rid.rsplit(".", 2)[0]
            seen = [
                r
                for r in self.controller.tasks.for_job(uid)
                if r.request_id == rid and r.started_at is not None
            ]
            if seen:
                self.backend.lies_left = 3

    def _some_job(self, finished: bool | None) -> Job | None:
        names = sorted(self.jobs)
        self.rng.shuffle(names)
        for name in names[:20]:
            tenant = self.jobs[name][0]
            job = self.world.store.find("Job", tenant, name)
            if not isinstance(job, Job):
                continue
            done = job.status is not None and job.status.phase.finished
            if finished is None or done == finished:
                return job
        return None

    def _running(self) -> list[str]:
        """The request ids the backend runs now, in an order that does not depend on uids
        (so that a seed replays the same run)."""
        ids = [rid for rid in self.backend.started if rid not in self.ended]
        if not ids:
            return []
        answers = self.backend.inner.status(ids)
        running = [rid for rid, a in answers.items() if a.state is TaskState.RUNNING]
        # A started task that ended never runs again (the simulator has no resurrection).
        self.ended.update(rid for rid, a in answers.items() if a.state is not TaskState.RUNNING)
        return sorted(running, key=self.backend._order)

    # the properties ----------------------------------------------------------------------

    def check(self) -> None:
        running = self._running()
        tasks: dict[str, list[str]] = defaultdict(list)
        gpus: dict[tuple[str, int], int] = defaultdict(int)
        tenants: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        queues: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for rid in running:
            request = self.backend.started[rid]
            uid, task, _attempt = rid.rsplit(".", 2)
            tasks[f"{uid}.{task}"].append(rid)
            for gpu in request.gpus:
                gpus[(request.node, gpu)] += request.gpu_milli
            used = (len(request.gpus) * request.gpu_milli, *self.sizes[request.job])
            tenant, queue = self.jobs[request.job]
            for sums in (tenants[tenant], queues[(tenant, queue)]):
                for kind, amount in enumerate(used):
                    sums[kind] += amount
        where = f"(seed {SEED}, after {self.cycles} cycles, {self.crashes} crashes)"
        twice = {task: ids for task, ids in tasks.items() if len(ids) > 1}
        assert not twice, f"tasks with two live attempts {where}: {twice}"
        over = {gpu: milli for gpu, milli in gpus.items() if milli > 1000}
        assert not over, f"GPUs held more than whole {where}: {over}"
        for tenant, sums in tenants.items():
            for kind, amount in enumerate(sums):
                self.peak[(tenant, KINDS[kind])] = max(self.peak[(tenant, KINDS[kind])], amount)
        for owner, sums, quotas in [
            *((f"tenant {t}", sums, TENANTS[t]) for t, sums in tenants.items()),
            *((f"queue {key}", sums, QUEUES[key]) for key, sums in queues.items()),
        ]:
            for kind, (amount, quota) in enumerate(zip(sums, quotas, strict=True)):
                assert quota is None or amount <= quota * UNITS[kind], (
                    f"{owner} runs {amount / UNITS[kind]} {KINDS[kind]}, quota {quota} {where}"
                )


def test_ten_thousand_random_operations_keep_quotas_and_at_most_once(world: World) -> None:
    world.service.apply_text(
        "".join(
            "---\napiVersion: aipaas/v1\nkind: Tenant\n"
            f"metadata: {{name: {name}}}\nspec: {quota_spec(q)}\n"
            for name, q in TENANTS.items()
        )
        + "".join(
            f"---\napiVersion: aipaas/v1\nkind: Queue\nmetadata: {{name: {q}, tenant: {t}}}\n"
            f"spec: {quota_spec(quota)}\n"
            for (t, q), quota in QUEUES.items()
        )
    )
    driver = Driver(world, SEED)
    rng = driver.rng
    operations = [  # weights: a cycle every fourth operation, so several things happen between
        (driver.submit, 14),
        (driver.cycle, 25),
        (lambda: driver.clock.advance(rng.uniform(0.5, 6)), 20),
        (driver.cancel, 6),
        (driver.delete, 3),
        (driver.kill, 5),
        (driver.lie, 5),
        (lambda: setattr(driver.backend, "fail_next_status", True), 5),
        (lambda: setattr(driver.backend, "fail_next_inventory", True), 5),
        (lambda: setattr(driver.backend, "crash_at_start", rng.choice(["before", "after"])), 6),
        (driver.restart, 6),
    ]
    actions = [action for action, _ in operations]
    weights = [weight for _, weight in operations]
    for action in rng.choices(actions, weights, k=OPERATIONS):
        action()
    driver.cycle()
    # The run did what it is meant to: quotas were reached, crashes and restarts happened,
    # and jobs got through (not a run where nothing was ever placed).
    assert driver.crashes > 500 and driver.cycles > 2000
    assert driver.peak["red", "gpu"] == 6000 and driver.peak["blue", "gpu"] >= 10000
    # CPU and memory quotas were reached too (and, by the check, never passed).
    assert driver.peak["red", "cpu"] >= 20000 and driver.peak["green", "cpu"] >= 36000
    assert driver.peak["red", "memory"] >= 128 * 1024
    assert driver.peak["blue", "memory"] >= 224 * 1024
    phases = [
        j.status.phase
        for j in world.store.list_objects("Job", None)
        if isinstance(j, Job) and j.status is not None
    ]
    assert phases.count(JobPhase.SUCCEEDED) > 200
    assert phases.count(JobPhase.FAILED) > 20 and phases.count(JobPhase.CANCELLED) > 20


def test_the_check_sees_a_double_start(world: World, tmp_path: Path) -> None:
    """The property is not vacuous: two live attempts of one task are caught."""
    world.setup()
    driver = Driver(world, SEED)
    driver.jobs["x"] = ("red", "q1")
    driver.sizes["x"] = (1000, 1024)
    for attempt in (0, 1):
        driver.backend.start(
            LaunchRequest(
                request_id=f"uid.w-0.{attempt}",
                task="w-0",
                job="x",
                tenant="red",
                node="dgx-0",
                command=("train",),
                env={},
                working_dir=None,
                gpus=(attempt,),
                gpu_milli=1000,
                log_path=str(tmp_path / "x.log"),
                duration_seconds=60,
            )
        )
    try:
        driver.check()
    except AssertionError as err:
        assert "two live attempts" in str(err)
    else:
        raise AssertionError("the check let two live attempts of one task through")


def test_the_check_sees_cpu_and_memory_over_quota(world: World, tmp_path: Path) -> None:
    """The CPU and memory sums are checked: red's 24 cores are passed by 3 tasks of 10 cores
    (within its GPU quota), and blue's 256 GiB by 2 tasks of 160 GiB."""
    world.setup()
    for job, tenant, size, replicas, needle in [
        ("c", "red", (10_000, 1024), 3, "tenant red runs 30.0 cpu, quota 24"),
        ("m", "blue", (1000, 160 * 1024), 2, "tenant blue runs 320.0 memory, quota 256"),
    ]:
        driver = Driver(world, SEED)
        driver.jobs[job] = (tenant, "q1")
        driver.sizes[job] = size
        for index in range(replicas):
            driver.backend.start(
                LaunchRequest(
                    request_id=f"{job}.w-{index}.0", task=f"w-{index}", job=job, tenant=tenant,
                    node="dgx-1", command=("train",), env={}, working_dir=None, gpus=(index,),
                    gpu_milli=1000, log_path=str(tmp_path / "x.log"), duration_seconds=60,
                )
            )  # fmt: skip
        try:
            driver.check()
        except AssertionError as err:
            assert needle in str(err), err
        else:
            raise AssertionError(f"the check let {job}'s use over its quota through")
