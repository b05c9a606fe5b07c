"""One controller cycle, in numbered steps (see ``Controller.run_cycle``).

1. nodes: refresh the inventory from the backend and publish Node objects (controller/nodes.py);
2. observe: ask the backend what became of every started task;
3. advance: per job, carry out cancellation, restarts with backoff, failure and completion;
4. admit and place: pending jobs in priority order (fair between queues) pass quotas, then the
   scheduler places their gang; records are committed before the backend is asked to start
   anything (controller/admission.py, with DRA claims in controller/claims.py); a task the
   backend already runs when asked right after is Running in this same cycle;
5. write back job status and events (only what changed), and metrics
   (controller/write_back.py).

Steps 2 and 3, and the task actions the other steps share (``finish``, ``start_task``,
``save_records``), are here. Who calls it: controller/loop.py and cli/control_runtime.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from aipaas.api.devices import ResourceSlice
from aipaas.api.job import CANCEL_ANNOTATION, Job, JobPhase, TaskPhase
from aipaas.backends.base import Backend, NodeInfo, TaskState
from aipaas.clock import Clock, SystemClock
from aipaas.controller import admission
from aipaas.controller.claims import ClaimBook
from aipaas.controller.launch import make_request, request_id, task_spec
from aipaas.controller.nodes import NodeInventory
from aipaas.controller.placement import SliceIndex
from aipaas.controller.task_devices import claim_devices
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.controller.write_back import publish_metrics, write_back
from aipaas.metering.metrics import Metrics
from aipaas.store import Store, TaskRecord, TaskRepository

log = logging.getLogger("aipaas.controller")

FINISHED = [p.value for p in JobPhase if p.finished]


class Controller:
    """What the controller keeps between cycles; ``run_cycle`` runs one cycle."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        *,
        log_dir: Path,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        policy: str = "default",
        backoff_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
        stop_grace_seconds: float = 5.0,
        inventory_seconds: float = 10.0,
    ) -> None:
        self.store = store
        self.tasks = TaskRepository(store)
        self.backend = backend
        self.log_dir = log_dir.resolve()
        self.metrics = metrics or Metrics()
        self.clock = clock or SystemClock()
        self.policy = policy
        self.backoff_seconds = backoff_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self.inventory = NodeInventory(store, backend, self.clock, inventory_seconds)
        self.claims = ClaimBook(store)
        self.cycles = 0
        self.started_now: list[tuple[JobWork, TaskRecord]] = []  # asked to start this cycle

    @property
    def nodes(self) -> list[NodeInfo]:
        """The backend's nodes as last reported."""
        return self.inventory.nodes

    @property
    def slices(self) -> list[ResourceSlice]:
        """The backend's ResourceSlices as last reported."""
        return self.inventory.slices

    @property
    def _slice_index(self) -> SliceIndex:
        # Kept for tests that check which slices were left out.
        return self.claims.slice_index

    def run_cycle(self) -> None:
        """Steps 1 to 5 of the module docstring, then the cycle's duration as a metric."""
        started = self.clock.monotonic()
        self.inventory.refresh()
        jobs = [
            j
            for j in self.store.list_objects("Job", None, exclude_phases=FINISHED)
            if isinstance(j, Job)
        ]
        records = self.tasks.of_jobs_not_in(FINISHED)
        work = [JobWork(j, records.get(j.metadata.uid or "", [])) for j in jobs]
        self._observe(work)
        for item in work:
            self._advance(item)
        self.started_now = []
        placer = admission.place(self, work)
        self._observe_started()
        write_back(self.store, self.tasks, self.clock, work)
        self.inventory.write_status(placer)
        publish_metrics(self.metrics, self.store, work, placer)
        self.cycles += 1
        self.metrics.cycle_seconds.observe(self.clock.monotonic() - started)

    def _observe(self, work: list[JobWork]) -> None:
        """Step 2: record what the backend says became of each started task."""
        started = [
            (item, r) for item in work for r in item.records if r.phase in ACTIVE and r.request_id
        ]
        if not started:
            return
        answers = self.backend.status([r.request_id or "" for _, r in started])
        now = self.clock.now()
        for item, record in started:
            answer = answers[record.request_id or ""]
            if answer.state is TaskState.UNKNOWN:
                if record.phase == TaskPhase.STARTING:
                    self.start_task(item, record)  # the start was lost in a crash: ask again
                else:
                    item.set(
                        record.with_(
                            phase=TaskPhase.LOST.value,
                            finished_at=now,
                            message="the backend does not know the task",
                        )
                    )
                    item.event("TaskLost", f"{record.name}: the backend does not know it", True)
                continue
            if answer.state is TaskState.RUNNING:
                if record.phase == TaskPhase.STARTING:
                    item.set(record.with_(phase=TaskPhase.RUNNING.value, started_at=now))
                continue
            phase = {
                TaskState.SUCCEEDED: TaskPhase.SUCCEEDED,
                TaskState.FAILED: TaskPhase.FAILED,
                TaskState.LOST: TaskPhase.LOST,
            }[answer.state]
            item.set(
                record.with_(
                    phase=phase.value,
                    exit_code=answer.exit_code,
                    finished_at=now,
                    message=answer.message,
                )
            )
            if phase is TaskPhase.SUCCEEDED:
                item.event("TaskSucceeded", f"{record.name} exited with code 0")
            else:
                item.event(
                    "TaskFailed", f"{record.name} {phase.value.lower()}: {answer.message}", True
                )

    def _observe_started(self) -> None:
        """Step 4's end: a task the backend already runs counts as Running in the cycle that
        started it, so its job goes from Pending to Running with one status write, not two."""
        current: dict[int, dict[str, TaskRecord]] = {}
        for item, _ in self.started_now:
            current.setdefault(id(item), {r.name: r for r in item.records})
        asked = [  # unless something else became of it since (a start that failed: Lost)
            (item, record)
            for item, record in self.started_now
            if record.request_id and current[id(item)].get(record.name) is record
        ]
        self.started_now = []
        if not asked:
            return
        answers = self.backend.status([r.request_id or "" for _, r in asked])
        now = self.clock.now()
        for item, record in asked:
            if answers[record.request_id or ""].state is TaskState.RUNNING:
                item.set(record.with_(phase=TaskPhase.RUNNING.value, started_at=now))

    def _advance(self, item: JobWork) -> None:
        """Step 3: cancel, restart with backoff, fail or complete one job."""
        job = item.job
        if CANCEL_ANNOTATION in job.metadata.annotations:
            self.finish(item, JobPhase.CANCELLED, "Cancelled", "the job was cancelled")
            return
        now = self.clock.monotonic()
        for record in list(item.records):
            if record.phase in (TaskPhase.FAILED.value, TaskPhase.LOST.value):
                spec = task_spec(job, record.group_name)
                if spec.restart_policy == "OnFailure" and record.attempt < spec.backoff_limit:
                    delay = min(self.backoff_seconds * 2**record.attempt, self.backoff_max_seconds)
                    item.set(record.with_(phase=TaskPhase.PENDING.value, restart_at=now + delay))
                    item.event(
                        "TaskRestarting",
                        f"{record.name} restarts in {delay:g}s "
                        f"(restart {record.attempt + 1} of {spec.backoff_limit})",
                    )
                else:
                    why = (
                        f"{record.name} {record.phase.lower()}"
                        + (
                            f" with exit code {record.exit_code}"
                            if record.exit_code is not None
                            else ""
                        )
                        + (f" after {record.attempt} restarts" if record.attempt else "")
                    )
                    self.finish(item, JobPhase.FAILED, "TaskFailed", why)
                    return
            elif (
                record.phase == TaskPhase.PENDING.value
                and record.restart_at is not None
                and record.restart_at <= now
                and record.node is not None
            ):
                restarted = record.with_(
                    attempt=record.attempt + 1,
                    restart_at=None,
                    exit_code=None,
                    message="",
                    phase=TaskPhase.STARTING.value,
                )
                restarted = restarted.with_(request_id=request_id(restarted))
                item.set(restarted)
                self.save_records(item)  # durable before the backend is asked
                self.start_task(item, restarted)
        if item.records and all(r.phase == TaskPhase.SUCCEEDED.value for r in item.records):
            self.finish(
                item, JobPhase.SUCCEEDED, "Succeeded", f"all {len(item.records)} tasks succeeded"
            )

    def finish(self, item: JobWork, phase: JobPhase, reason: str, message: str) -> None:
        """End the job: stop what still runs, close every open task record."""
        now = self.clock.now()
        for record in item.records:
            if record.phase in ACTIVE and record.request_id:
                self.backend.stop(record.request_id, self.stop_grace_seconds)
            if not TaskPhase(record.phase).finished:
                item.set(
                    record.with_(
                        phase=TaskPhase.CANCELLED.value,
                        finished_at=now,
                        restart_at=None,
                        message=message,
                    )
                )
        item.phase, item.reason, item.message = phase, reason, message
        item.event(phase.value, message, phase is not JobPhase.SUCCEEDED)

    def start_task(self, item: JobWork, record: TaskRecord) -> None:
        """Ask the backend to start a placed task (idempotent by its request id); a start that
        fails at once marks the task lost, so the restart policy decides what follows."""
        backends = {n.name: n.backend for n in self.nodes}
        devices = claim_devices(self.claims.allocations(item.job, record))
        request = make_request(item.job, record, item.records, backends, devices)
        try:
            self.backend.start(request)
            self.started_now.append((item, record))
        except (OSError, ValueError) as err:
            log.warning("starting %s of job %s failed: %s", record.name, item.job.name, err)
            item.set(record.with_(phase=TaskPhase.LOST.value, message=f"start failed: {err}"))

    def save_records(self, item: JobWork) -> None:
        """Make the job's changed records durable now, before the backend is asked."""
        if not item.changed:
            return
        with self.store.transaction() as tx:
            self.tasks.save_many([r for r in item.records if r.name in item.changed], conn=tx)
        item.changed.clear()
