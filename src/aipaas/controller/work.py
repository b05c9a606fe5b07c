"""One cycle's view of a job (``JobWork``) and its status.

Pure: no store, no backend. Who calls it: controller/cycle.py, admission.py, claims.py and
write_back.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field

from aipaas.api.job import (
    CANCEL_ANNOTATION,
    SIM_DURATION_ANNOTATION,
    Job,
    JobPhase,
    JobStatus,
    TaskPhase,
    TaskStatus,
)
from aipaas.store import TaskRecord

ACTIVE = (TaskPhase.STARTING.value, TaskPhase.RUNNING.value)
#: the phases of a task record that has ended (``TaskPhase(p).finished``, without the enum call)
FINISHED_TASK = frozenset(p.value for p in TaskPhase if p.finished)
#: reasons of a job that waits to start (the batch session's among them); a running job with
#: one of these (its elastic extras wait) shows Running
WAITING = (
    "QuotaExceeded",
    "Unschedulable",
    "Waiting",
    "WaitingForDependencies",
    "FairShare",
    "Topology",
    "Reserved",
    "Gang",
    "Preempting",
    "StrictOrder",
)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What every cycle reads of a job, read once per stored version of it (``FactsCache``):
    with ten thousand jobs, each pass over their models cost more than its work."""

    uid: str
    #: the stored resourceVersion ("" when none)
    version: str
    #: (uid, version): the job's version, as the write-back's ``verified`` set holds it
    key: tuple[str, str]
    tenant: str
    queue: str
    #: "tenant/name": the job's key in the batch session (batch_snapshot.py ``job_key``)
    path: str
    #: "tenant/queue": its leaf queue's key in the session's queue tree
    queue_path: str
    #: it asks for simulated nodes (launch.py ``wants_simulated``)
    simulated: bool
    cancelled: bool
    depends: bool
    #: a task names DRA claims (``resources.claims``) or asks extended resources: they are
    #: checked before placing (ClaimBook.problem)
    claims: bool
    #: a task reads datasets (``spec.datasets``): placement scores data affinity for it
    datasets: bool
    has_status: bool
    #: Pending as stored (no status yet counts): counted in the pending-jobs metric
    pending: bool

    @classmethod
    def of(cls, job: Job) -> JobFacts:
        meta = job.metadata
        spec = job.spec
        status = job.status
        uid, version = meta.uid or "", meta.resource_version or ""
        return cls(
            uid=uid,
            version=version,
            key=(uid, version),
            tenant=job.tenant,
            queue=spec.queue,
            path=f"{job.tenant}/{job.name}",
            queue_path=f"{job.tenant}/{spec.queue}",
            simulated=SIM_DURATION_ANNOTATION in meta.annotations,
            cancelled=CANCEL_ANNOTATION in meta.annotations,
            depends=bool(spec.depends_on),
            claims=any(
                task.resources.claims or task.resources.extended_asked() for task in spec.tasks
            ),
            datasets=bool(spec.datasets),
            has_status=status is not None,
            pending=status is None or status.phase is JobPhase.PENDING,
        )


class FactsCache:
    """``JobFacts`` per job model, kept between cycles. The store hands back the same parsed
    model while a job's version is unchanged (store.py ``_PARSED``); a new version is a new
    model, so identity tells whether the facts still hold."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[Job, JobFacts]] = {}
        #: the last ``refresh`` listed the very models of the one before (same jobs, versions)
        self.same_jobs = False
        #: counts the refreshes that listed other models than the one before: equal numbers,
        #: the same jobs at the same versions (in the same order: the store lists by row id)
        self.generation = 0

    def refresh(self, jobs: Sequence[Job]) -> list[JobFacts]:
        """The facts of ``jobs`` in order; jobs no longer listed are forgotten."""
        known = self._known
        kept: dict[int, tuple[Job, JobFacts]] = {}
        out = []
        hits = 0
        for job in jobs:
            entry = known.get(id(job))
            if entry is None or entry[0] is not job:
                entry = (job, JobFacts.of(job))
            else:
                hits += 1
            kept[id(job)] = entry
            out.append(entry[1])
        self.same_jobs = hits == len(known) == len(kept)
        if not self.same_jobs:
            self.generation += 1
        self._known = kept
        return out


@dataclass(slots=True)
class JobWork:
    """A job and its task records during one cycle; ``changed`` records are saved at the end."""

    job: Job
    records: list[TaskRecord]
    changed: set[str] = field(default_factory=set)
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    phase: JobPhase | None = None
    #: the job is ending but waits for stopped tasks to be confirmed: nothing new starts
    ending: bool = False
    order: int = 0
    reason: str = ""
    message: str = ""
    #: a record of the job was set in this cycle (its status may have changed)
    touched: bool = False
    #: the job's gang restarts, when this cycle changed them (controller/gang_restart.py)
    restarts: int | None = None
    #: task -> what enforces its GPU share on its node, said when it started in this cycle
    #: (controller/task_devices.py); the status keeps it while the attempt stays
    share_notes: dict[str, str] = field(default_factory=dict)
    #: the job's facts when already known (``FactsCache``); else read from ``job``
    known: InitVar[JobFacts | None] = None
    facts: JobFacts = field(init=False)

    def __post_init__(self, known: JobFacts | None) -> None:
        self.facts = known if known is not None else JobFacts.of(self.job)

    def set(self, record: TaskRecord) -> None:
        self.records = [record if r.name == record.name else r for r in self.records]
        self.changed.add(record.name)
        self.touched = True

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message, warning))


def status_events(item: JobWork, status: JobStatus) -> None:
    job = item.job
    previous = job.status.phase if job.status else None
    if previous != status.phase and status.phase is JobPhase.RUNNING:
        item.event("Running", "tasks are running")
    if (
        status.phase is JobPhase.PENDING
        and status.reason in WAITING
        and (job.status is None or job.status.message != status.message)
    ):
        item.event(status.reason, status.message, True)


def job_status(item: JobWork, now_text: str) -> JobStatus:
    job = item.job
    old = job.status or JobStatus()
    now = now_text
    kept = {t.name: t for t in old.tasks}
    tasks = [
        TaskStatus(
            name=r.name,
            phase=TaskPhase(r.phase),
            node=r.node,
            gpus=list(r.gpus),
            exit_code=r.exit_code,
            restarts=r.attempt,
            message=r.message,
            gpu_share=item.share_notes.get(r.name) or _kept_share(kept.get(r.name), r),
        )
        for r in item.records
    ]
    phase, reason, message = _phase_and_reason(item, old)
    return JobStatus(
        phase=phase,
        reason=reason,
        message=message,
        tasks=tasks,
        start_time=old.start_time or (now if phase is JobPhase.RUNNING else None),
        completion_time=old.completion_time or (now if phase.finished else None),
        restarts=item.restarts if item.restarts is not None else old.restarts,
    )


def _kept_share(old: TaskStatus | None, record: TaskRecord) -> str | None:
    """The stored note on a task's GPU share, while the attempt it was said of goes on."""
    if old is None or old.node != record.node or old.restarts != record.attempt:
        return None
    return old.gpu_share


def status_unchanged(item: JobWork) -> bool:
    """Whether ``job_status`` would give the job's stored status back, decided without building
    it: the controller asks this of every unfinished job every cycle, and most have not moved."""
    old = item.job.status
    if old is None or old.model_extra or item.share_notes:
        return False
    phase, reason, message = _phase_and_reason(item, old)
    if (phase, reason, message) != (old.phase, old.reason, old.message):
        return False
    if (phase is JobPhase.RUNNING and old.start_time is None) or (
        phase.finished and old.completion_time is None
    ):
        return False
    if len(old.tasks) != len(item.records):
        return False
    if item.restarts is not None and item.restarts != old.restarts:
        return False
    return all(
        (t.name, t.phase.value, t.node, t.gpus, t.exit_code, t.restarts, t.message)
        == (r.name, r.phase, r.node, list(r.gpus), r.exit_code, r.attempt, r.message)
        and not t.model_extra
        for t, r in zip(old.tasks, item.records, strict=True)
    )


def _phase_and_reason(item: JobWork, old: JobStatus) -> tuple[JobPhase, str, str]:
    phase = item.phase
    if phase is None:
        # Running once a task really runs; placed-and-starting tasks leave it Pending (Scheduled).
        running = any(r.phase == TaskPhase.RUNNING.value for r in item.records)
        phase = JobPhase.RUNNING if running else old.phase if item.records else JobPhase.PENDING
        if not running and item.records and all(_waits_to_start(r) for r in item.records):
            phase = JobPhase.PENDING  # evicted whole (or placed and starting): Pending again
    reason, message = item.reason, item.message
    if not reason:
        reason, message = (old.reason, old.message) if phase == old.phase else (phase.value, "")
    if phase is JobPhase.RUNNING and reason in WAITING:
        reason, message = "Running", ""
    return phase, reason, message


def _waits_to_start(record: TaskRecord) -> bool:
    """Pending without a restart of its own waiting (an evicted task), or starting."""
    return record.phase == TaskPhase.STARTING.value or (
        record.phase == TaskPhase.PENDING.value and record.restart_after is None
    )
