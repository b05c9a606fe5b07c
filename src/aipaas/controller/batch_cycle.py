"""Step 4 through the batch session: the snapshot, one session, its decisions carried out.

The session (scheduler/batch, the same code ``aipaas simulate`` runs) decides starts,
evictions and why each job waits; here they become task records and backend calls, with the
controller's guarantees kept:

- Evictions: the task is asked to stop (fenced, sent after the write-back) and goes back to
  Pending, ``stopping`` and holding its resources until the backend confirms; then it holds
  nothing and a later cycle places it again. Its restart does not count against backoffLimit
  (``evictions`` on the record). A gang evicted whole waits until every stop is confirmed and
  starts again whole (batch_snapshot.py).
- Starts never use what a victim still holds: a start the session pipelined (its room is on a
  node where a task was evicted before it in this cycle, ``Decisions.pipelined``) is not
  carried out now (reason Preempting); the job is left out of the sessions that follow until
  its victims are confirmed stopped, then placed in the room they left. The simulator, whose
  stops are instant, carries the same decision out at once.
- Nothing else follows the session: quotas of tenants, queues and users, budgets' holds and
  the GPUs of DRA claims are inputs of its snapshot (batch_snapshot.py), so what it decides to
  start is what starts (``aipaas simulate`` decides the same from the same objects).
- NoExecute taints: the first time this controller sees a node's taint is when it appeared
  (``BatchState.taints_seen``; a restarted controller starts counting again), from which a
  toleration's ``tolerationSeconds`` runs (scheduler/batch/actions/taint_eviction.py).
- What it decided comes back in the cycle's ``Plan`` (controller/plan.py): the starts, whose
  records the controller commits in one fenced transaction before the backend is asked to
  start anything, and the evicted tasks' stops, which it sends after the write-back.

A session is skipped when nothing it reads changed since the last one (jobs' resource versions,
task records, nodes with their labels and taints, tenants, queues and users, and which jobs wait
for victims), except that it runs again when something it decided from depends on time (a
backoff that ends, a job reaching its queue's minRuntime, a reservation's start, a toleration
of a NoExecute taint running out), and at least every ``RECHECK_SECONDS`` (usage over time
decays).

Who calls it: controller/admission.py ``place``, with ``SessionInputs``; nothing here writes a
task record or calls the backend (a waiting job's claims get an event: ``_reasons``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from aipaas.api.job import TaskPhase
from aipaas.api.meta import Object
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Tenant, User
from aipaas.controller.batch_engine import PlacerEngine
from aipaas.controller.batch_snapshot import Built, Templates, build, is_held, job_key
from aipaas.controller.claims import ClaimBook
from aipaas.controller.lifecycle import Event, Facts, Stop, apply
from aipaas.controller.placement import Placer, Slot
from aipaas.controller.plan import Plan
from aipaas.controller.stop_drain import eviction_drain_seconds
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.metering.usage import aware
from aipaas.scheduler.batch.from_api import session_snapshot
from aipaas.scheduler.batch.model import Decisions, Eviction, Node, Snapshot, Start
from aipaas.scheduler.batch.options import BatchOptions
from aipaas.scheduler.batch.run import run_session
from aipaas.scheduler.framework.constraints import TAINTS_ANNOTATION
from aipaas.scheduler.framework.profile import load_profile
from aipaas.scheduler.framework.types import Placement, Taint
from aipaas.store import TaskRecord

log = logging.getLogger("aipaas.controller")

#: a session runs at least this often even when nothing it reads changed (time matters)
RECHECK_SECONDS = 30.0
#: what an eviction's reason can be (model.Eviction)
EVICTION_REASONS = ("Preempted", "Reclaimed", "ElasticShrink")


@dataclass
class BatchState:
    """What the controller keeps between sessions."""

    options: BatchOptions | None = None
    fingerprint: int | None = None
    #: when the session must run again even if nothing it reads changed
    due: float = float("-inf")
    #: the last session's snapshot (pseudo jobs left out) and decisions, for queue status
    report: tuple[Snapshot, Decisions, list[Object]] | None = None
    sessions: int = 0
    #: the replicas of pending jobs, kept between sessions (batch_snapshot.py)
    templates: Templates = field(default_factory=dict)
    #: elastic jobs' membership last written, by job uid (controller/membership.py)
    membership: dict[str, str] = field(default_factory=dict)
    #: (node, taint) -> when this controller first saw the taint (epoch seconds): when a
    #: NoExecute taint appeared, for tolerationSeconds
    taints_seen: dict[tuple[str, Taint], float] = field(default_factory=dict)


@dataclass
class Admission:
    """What the batch session admits against, read once per cycle: tenants and queues (their
    quotas and budgets' holds become the queue tree) and users with their quotas."""

    tenants: dict[str, Tenant]
    queues: dict[tuple[str, str], Queue]
    users: list[User] = field(default_factory=list)


@dataclass(frozen=True)
class SessionInputs:
    """What a session reads besides the cycle's work: its kept state, the claims, the
    profile's name, the moment and the jobs' generation (the fingerprint's)."""

    state: BatchState
    claims: ClaimBook
    policy: str
    now: datetime
    jobs_generation: int


def options_of(state: BatchState, policy: str) -> BatchOptions:
    if state.options is None:
        state.options = load_profile(policy).spec.batch
    return state.options


def schedule(
    inputs: SessionInputs,
    work: list[JobWork],
    eligible: list[JobWork],
    placer: Placer,
    admission: Admission,
    held: dict[tuple[str, str], Placement],
    plan: Plan,
) -> None:
    """Run the session over the cycle; what it decided goes into ``plan`` (its starts and the
    evicted tasks' stops) and the items (records of evicted tasks, why jobs wait)."""
    state = inputs.state
    now = inputs.now
    waiting = _waiting_for_victims(work)
    if waiting:
        for item in eligible:
            count = waiting.get(job_key(item.job))
            if count:
                item.reason = "Preempting"
                item.message = f"waiting for {count} evicted tasks to stop"
        eligible = [i for i in eligible if not waiting.get(job_key(i.job))]
    fingerprint = _fingerprint(
        inputs.jobs_generation, work, eligible, placer, admission, waiting, now.timestamp()
    )
    if fingerprint == state.fingerprint and now.timestamp() < state.due:
        return
    state.fingerprint = fingerprint
    state.sessions += 1
    base = session_snapshot(
        now.timestamp(),
        [],
        admission.tenants.values(),
        admission.queues.values(),
        admission.users,
    )
    built = build(inputs.claims, work, {id(i) for i in eligible}, held, base, state.templates)
    claims = {  # pods whose explicit claims' GPUs count against quotas once placed
        pod.name: pod.claims for pod in built.pods.values() if pod.claims and not pod.gpu_claim
    }
    engine = PlacerEngine(placer, built.on_request, claims)
    built.snapshot.nodes = _taints_dated(list(engine.nodes), state.taints_seen, now.timestamp())
    try:
        decisions = run_session(built.snapshot, engine, options_of(state, inputs.policy))
    except Exception:
        # A scheduler bug must not stop the rest of the cycle (completions, cancellations,
        # stops): nothing starts or is evicted this cycle, and the next one tries again.
        log.exception("the batch session failed; nothing is started or evicted this cycle")
        state.fingerprint = None
        return
    state.due = _next_due(built, decisions, work, now.timestamp())
    victims = _evict(built, decisions.evicted, held, now, plan)
    plan.starts = _starts(built, decisions, placer, engine)
    plan.fresh = frozenset(built.fresh)
    for placement in victims:
        engine.hold(placement)  # they keep their resources until their stops are confirmed
    _reasons(inputs.claims, built, decisions, eligible)
    objects: list[Object] = [*admission.tenants.values(), *admission.queues.values()]
    shown = Snapshot(
        built.snapshot.now,
        built.snapshot.nodes,
        built.snapshot.queues,
        [j for j in built.snapshot.jobs if not is_held(j.key)],
    )
    state.report = (shown, decisions, objects)


def _next_due(built: Built, decisions: Decisions, work: Sequence[JobWork], now: float) -> float:
    """The earliest time a session could decide otherwise with nothing else changed."""
    due = [now + RECHECK_SECONDS]
    due += [r.start for r in decisions.reservations.values() if r.start > now]
    if decisions.due is not None:  # a toleration of a NoExecute taint runs out
        due.append(decisions.due)
    for job in built.snapshot.jobs:
        queue = built.snapshot.queues.get(job.queue)
        if queue is not None and queue.min_runtime > 0:
            due += [t.since + queue.min_runtime for t in job.running_tasks if t.since is not None]
    for item in work:
        for record in item.records:
            if record.restart_after is not None:
                due.append(aware(record.restart_after).timestamp())
    return min((d for d in due if d > now), default=now + RECHECK_SECONDS)


def _waiting_for_victims(work: Sequence[JobWork]) -> dict[str, int]:
    """Preemptors whose victims are still stopping, with how many. Read from the victims'
    records (their message names the preemptor, ``evict``): it survives a restart of the
    controller, which must not evict more for a preemptor whose victims are stopping."""
    out: dict[str, int] = defaultdict(int)
    for item in work:
        for record in item.records:
            if (
                record.stopping
                and record.phase == TaskPhase.PENDING.value
                and record.restart_after is None
            ):
                by = evicted_by(record.message)
                if by is not None:
                    out[by] += 1
    return out


def evicted_by(message: str) -> str | None:
    """The preemptor an evicted task's message names ("<Reason> by <tenant/job>: ...")."""
    head, sep, _ = message.partition(": ")
    reason, by_word, who = head.partition(" by ")
    if not sep or not by_word or reason not in EVICTION_REASONS or " " in who:
        return None
    return who


def _fingerprint(
    generation: int,
    work: Sequence[JobWork],
    eligible: Sequence[JobWork],
    placer: Placer,
    admission: Admission,
    waiting: dict[str, int],
    now: float,
) -> int:
    """A hash of everything the session reads (see the module docstring)."""
    # The jobs and their versions: ``generation`` changes whenever the cycle listed other job
    # models than the one before (work.py FactsCache), so equal numbers mean the very same
    # jobs at the same versions. A task record changed in this cycle is in ``changed`` until
    # the write-back; one changed in an earlier cycle changed its job's status (a new resource
    # version) when written.
    jobs = (
        generation,
        tuple((i, len(item.changed)) for i, item in enumerate(work) if item.changed),
    )
    objects = tuple(
        (o.kind, o.tenant, o.name, o.metadata.resource_version)
        for o in (*admission.tenants.values(), *admission.queues.values(), *admission.users)
    )
    # Labels and taints decide where a job may go and whether a task may stay (NoExecute): a
    # change of either is a change of what the session reads.
    nodes: tuple[object, ...] = tuple(
        (n.name, n.annotations.get(TAINTS_ANNOTATION, ""), tuple(sorted(n.labels.items())))
        for n in placer.nodes
    )
    nodes += (f"devices@{placer.ledger.inventory.generation}",)  # a slice or taint rule changed
    chosen = len(eligible)
    return hash((jobs, objects, nodes, chosen, tuple(sorted(waiting.items()))))


def _record(item: JobWork, name: str) -> TaskRecord | None:
    return next((r for r in item.records if r.name == name), None)


def _evict(
    built: Built,
    evictions: Sequence[Eviction],
    held: dict[tuple[str, str], Placement],
    now: datetime,
    plan: Plan,
) -> list[Placement]:
    """The evictions in the records (their stops in ``plan``); the placements the victims
    still hold."""
    victims: list[Placement] = []
    by_job: dict[str, list[Eviction]] = defaultdict(list)
    for eviction in evictions:
        item = built.items.get(eviction.job)
        record = _record(item, eviction.task) if item is not None else None
        if item is None or record is None:
            log.warning("eviction of unknown task %s/%s", eviction.job, eviction.task)
            continue
        uid = item.job.metadata.uid or ""
        placement = held.get((uid, record.name))
        stopped, stop = evict(item, record, eviction, now)
        plan.stops += [stop] if stop is not None else []
        if stopped.stopping and placement is not None:
            victims.append(placement)
        by_job[eviction.job].append(eviction)
    for key, group in by_job.items():
        item = built.items[key]
        first = group[0]
        names = ", ".join(e.task for e in group)
        item.event(first.reason, f"{names} evicted by {first.by}: {first.message}", True)
        if not any(r.phase in ACTIVE for r in item.records):
            item.reason = first.reason
            item.message = f"evicted by {first.by}: {first.message}"
    return victims


def evict(
    item: JobWork, record: TaskRecord, eviction: Eviction, now: datetime
) -> tuple[TaskRecord, Stop | None]:
    """Stop one task for a preemptor: it goes back to Pending, its attempt stopped and not
    counted against backoffLimit; it keeps its resources (``stopping``) until the backend
    confirms (controller/cycle.py ``_observe`` then frees its node). The stop to send, if
    it runs (an evicted service replica drains first)."""
    message = f"{eviction.reason} by {eviction.by}: {eviction.message}"
    evicted = apply(record, Event.EVICTED, Facts(now, message))
    item.set(evicted.record)
    return evicted.record, evicted.stop(eviction_drain_seconds(item.job))


def _taints_dated(
    nodes: list[Node], seen: dict[tuple[str, Taint], float], now: float
) -> list[Node]:
    """The nodes with each NoExecute taint dated by when this controller first saw it
    (``seen`` is updated: taints gone are forgotten, so one that comes back is new again)."""
    present: set[tuple[str, Taint]] = set()
    out = []
    for node in nodes:
        if not any(t.effect == "NoExecute" for t in node.taints):
            out.append(node)
            continue
        dated = []
        for taint in node.taints:
            if taint.effect == "NoExecute":
                key = (node.name, taint)
                present.add(key)
                taint = replace(taint, since=seen.setdefault(key, now))
            dated.append(taint)
        out.append(replace(node, taints=tuple(dated)))
    for key in [k for k in seen if k not in present]:
        del seen[key]
    return out


def _starts(
    built: Built, decisions: Decisions, placer: Placer, engine: PlacerEngine
) -> list[tuple[JobWork, list[tuple[Start, Slot]]]]:
    """The session's starts to carry out now, by job, with their slots. A pipelined job (its
    room is still held by victims stopping) is given back and waits (reason Preempting): the
    decision stands, and a later session places it once the stops are confirmed."""
    by_job: dict[str, list[Start]] = defaultdict(list)
    for start in decisions.started:
        by_job[start.job].append(start)
    accepted = []
    for key, group in by_job.items():
        item = built.items[key]
        if key in decisions.pipelined:
            _give_back(engine, group)
            item.reason = "Preempting"
            item.message = "waiting for the evicted tasks to stop"
            continue
        slots = [placer.slot(s.placement, built.pods[(key, s.task)].claims) for s in group]
        accepted.append((item, list(zip(group, slots, strict=True))))
    return accepted


def _give_back(engine: PlacerEngine, starts: Sequence[Start]) -> None:
    for start in starts:
        engine.release(start.placement)


def _reasons(
    claims: ClaimBook, built: Built, decisions: Decisions, eligible: Sequence[JobWork]
) -> None:
    """Why each job that could have started waits, from the session (in words and numbers)."""
    started = {s.job for s in decisions.started}
    hints: dict[str, str] | None = None  # built on the first Unschedulable job, in one pass
    for item in eligible:
        key = item.facts.path
        missing = built.missing.get(key)
        if missing is not None:
            item.reason, item.message = "Waiting", missing
            continue
        if item.reason in ("Preempting", "Preempted", "Reclaimed") or key in started:
            continue
        why = decisions.reasons.get(key)
        if why is None:
            continue
        item.reason, item.message = why
        if why[0] == "Unschedulable":
            if hints is None:
                hints = _short_form_hints(built)
            item.message += hints.get(key, "")
            claims.record_wait(item.job, item.message)


def _short_form_hints(built: Built) -> dict[str, str]:
    """Per job whose ``resources.gpu`` went to the device allocator, the claim it compiled to
    (the allocator's reasons name that claim, which the user never wrote). One pass over the
    pods: asked per waiting job it cost jobs x pods (seconds with 10,000 waiting)."""
    hints: dict[str, str] = {}
    for (job, task), pod in built.pods.items():
        if job not in hints and pod.gpu_claim and pod.claims:
            name = pod.claims[-1].metadata.name
            group = task.rsplit("-", 1)[0]
            hints[job] = f"; claim {name} is what resources.gpu of task {group} compiles to"
    return hints
