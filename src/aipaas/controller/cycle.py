"""One controller cycle, in numbered steps (see ``Controller.run_cycle``).

0. intakes: work from outside the store (a Kubernetes cluster's own pods) stored as jobs before
   the cycle lists them, so this cycle places them (controller/extensions.py ``CycleIntake``);
1. nodes: refresh the inventory from the backend and publish Node objects (controller/nodes.py);
   an inventory that cannot be read leaves the last known nodes, not ready (unknown);
2. observe: ask the backend what became of every started task, and whether the attempts asked
   to stop have stopped; a status call that fails tells nothing (no task is given up on it);
3. advance: per job, carry out cancellation, restarts with backoff (a task's own, or the whole
   gang's: controller/gang_restart.py), failure and completion;
4. admit, place and evict: the batch session (scheduler/batch, the profile's actions: queue
   tree, fair share, quotas at every level, preemption, reclaim, backfill) decides over a
   snapshot of the cycle; records are committed before the backend is asked to start anything
   and evicted tasks go back to Pending, stopping at most once (controller/admission.py,
   batch_cycle.py, batch_snapshot.py, with DRA claims in controller/claims.py); a task the
   backend already runs when asked right after is Running in this same cycle;
5. write back job status and events (only what changed), queue status, and metrics
   (controller/write_back.py, queue_status.py); elastic jobs' membership files
   (controller/membership.py);
6. extensions: the later domains' reconcilers (datasets, services, node pools, budgets), each
   handed the cycle's facts (controller/extensions.py).

At most once: an attempt the controller gives up on (lost, failed start, cancelled, its job
ended) is asked to stop and marked ``stopping``; it keeps its resources, no replacement starts
and its job does not finish until the backend confirms it no longer runs. A confirmation is an
end the backend reports (an exit code, lost). "Unknown" (the backend has no record of the id)
confirms a stop only where the backend is authoritative that the attempt never ran: an attempt
never seen running (no ``started_at``: its start may never have reached the backend), said in
two answers in a row. For an attempt the backend once reported running, "unknown" contradicts its
own record and confirms nothing: the attempt stays ``stopping``, holding its resources.

Fencing: with a lease (store/lease.py), every write of the cycle that precedes a start or
records its outcome is a transaction that first checks the lease is still this controller's
(``fenced``); a lost lease raises ``LeaseLost`` and ends the cycle there. Every start carries
the lease's token, which backends check (backends/fencing.py); a controller with a lease whose
token is unknown starts nothing. Stops are fenced too: they are collected during the cycle and
sent in batches (``send_stops``), each right after a fenced transaction has confirmed the lease
(and renewed it for its ttl), so a controller that lost its lease stops nothing the new holder
runs.

A cycle with nothing new (no write to any job or to what placement reads, the same lease token
and node inventory, no session due) uses the last cycle's jobs, records and placement and writes
nothing (controller/quiet.py).

Steps 2 and 3, and the task actions the other steps share (``finish``, ``start_task``,
``save_records``, ``give_up``), are here; each change of a task record is a row of the
lifecycle table (controller/lifecycle.py ``apply``), whose effects (a stop, a start) these
methods carry out. What the controller keeps between cycles is ``self.memory``
(controller/memory.py). Who calls it: controller/loop.py and cli/control_runtime.py.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from aipaas.api.devices import ResourceSlice
from aipaas.api.job import Job, JobPhase, TaskPhase
from aipaas.backends.base import (
    Backend,
    FencingRefused,
    LaunchRequest,
    NodeInfo,
    TaskState,
    TaskStatus,
)
from aipaas.backends.gang import places_gangs
from aipaas.clock import Clock, SystemClock
from aipaas.controller import admission, membership
from aipaas.controller import observe as observed_step
from aipaas.controller.admission import AdmitInputs
from aipaas.controller.advance import Backoff, advance
from aipaas.controller.batch_cycle import BatchState
from aipaas.controller.claims import ClaimBook
from aipaas.controller.datasets_launch import with_datasets
from aipaas.controller.device_taint_eviction import evict_for_device_taints
from aipaas.controller.extensions import (
    CycleContext,
    CycleExtension,
    CycleIntake,
    run_extensions,
    run_intakes,
    split_extensions,
)
from aipaas.controller.launch import make_request, task_spec
from aipaas.controller.lifecycle import Effect, Event, Facts, Stop, Transition, apply
from aipaas.controller.memory import ControllerMemory
from aipaas.controller.nodes import NodeInventory
from aipaas.controller.observe import stop_confirmed
from aipaas.controller.placement import SliceIndex
from aipaas.controller.plan import Plan, prepare_starts, scheduled
from aipaas.controller.queue_status import write_queue_statuses
from aipaas.controller.quiet import (
    WATCHED_KINDS,
    Kept,
    QuietCycles,
    all_clean,
    item_for,
    special,
    unclean,
)
from aipaas.controller.stop_drain import HeldStops
from aipaas.controller.task_devices import claim_devices, with_share_enforcement
from aipaas.controller.work import ACTIVE, JobWork
from aipaas.controller.workload import DEFAULT_SIZE, Workload
from aipaas.controller.write_back import OnWritten, publish_metrics, write_back
from aipaas.devices.binding import BindingWait
from aipaas.metering.metrics import Metrics
from aipaas.store import Connection, Store, TaskRecord, TaskRepository
from aipaas.store.lease import Lease, LeaseLost

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
        lease: Lease | None = None,
        on_written: OnWritten | None = None,
        pool_profiles: Mapping[str, str] | None = None,
        workload_size: int = DEFAULT_SIZE,
        extensions: Sequence[CycleExtension | CycleIntake] = (),
    ) -> None:
        self.store = store
        self.tasks = TaskRepository(store)
        self.backend = backend
        self.log_dir = log_dir.resolve()
        self.metrics = metrics or Metrics()
        self.clock = clock or SystemClock()
        self.policy = policy
        #: node pool -> the profile it places with (``aipaas.dev/pool`` label); others: policy
        self.pool_profiles = dict(pool_profiles or {})
        #: the task shapes of recent submissions: what FGD-class placement expects
        self.workload = Workload(workload_size)
        #: restart delays (controller/advance.py)
        self.backoff = Backoff(backoff_seconds, backoff_max_seconds)
        self.stop_grace_seconds = stop_grace_seconds
        self.inventory = NodeInventory(store, backend, self.clock, inventory_seconds)
        self.claims = ClaimBook(store)
        self.cycles = 0
        self.started_now: list[tuple[JobWork, TaskRecord]] = []  # asked to start this cycle
        #: the lease this controller works under (ControllerLoop sets it); None: no fencing
        self.lease = lease
        #: told which jobs each cycle's write-back changed (the log followers' wake-up)
        self.on_written = on_written
        #: everything kept between cycles, with why each piece may be lost (memory.py)
        self.memory = ControllerMemory()
        #: step 0's intakes and step 6's reconcilers, each in order
        self.intakes, self.extensions = split_extensions(extensions)

    @property
    def batch(self) -> BatchState:
        """The batch session's kept state (``memory.batch``)."""
        return self.memory.batch

    @property
    def quiet(self) -> QuietCycles:
        """The quiet cycles' kept jobs and placement (``memory.quiet``)."""
        return self.memory.quiet

    @property
    def held_stops(self) -> HeldStops:
        """Evicted replicas draining before their stop (``memory.held_stops``)."""
        return self.memory.held_stops

    @property
    def fencing_token(self) -> int | None:
        """The token starts carry: None only for a controller without a lease (tests,
        ``simulate``); with a lease whose token is unknown, ``LeaseLost`` (nothing starts)."""
        if self.lease is None:
            return None
        if self.lease.token is None:
            raise LeaseLost(
                f"fencing: {self.lease.holder} has no token for the {self.lease.name} lease: "
                "it starts nothing"
            )
        return self.lease.token

    @contextmanager
    def fenced(self) -> Iterator[Connection]:
        """A write transaction that first checks (and renews) the lease: ``LeaseLost`` when this
        controller no longer holds it, and nothing of the transaction is written."""
        with self.store.transaction() as tx:
            if self.lease is not None:
                self.lease.fence(tx)
            yield tx

    @property
    def jobs_generation(self) -> int:
        """Changes whenever a cycle lists other jobs, or other versions of them, than the cycle
        before (the batch session's fingerprint, controller/batch_cycle.py)."""
        return self.memory.facts.generation

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
        """Steps 1 to 5 of the module docstring, then the cycle's duration as a metric.

        The garbage collector waits while a cycle runs: a cycle makes tens of thousands of
        short-lived objects with many thousand jobs, and collections in its middle traversed
        every cached job again and again (a third of a quiet cycle's time); what the cycle
        left is collected after it, in the ordinary way."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._run_cycle()
        finally:
            if collecting:
                gc.enable()

    def _run_cycle(self) -> None:
        started = self.clock.monotonic()
        self.memory.stops = []  # a cycle ended by LeaseLost sends none of its stops
        if self.intakes:  # before the listing: what they store, this cycle places
            run_intakes(self.intakes, self._intake_context())
        self.inventory.refresh()
        self.claims.observe(self.inventory.device_conditions)  # drivers' binding conditions
        # Read before the jobs are listed: a write after it changes the next cycle's marks.
        marks = self.store.kind_marks(WATCHED_KINDS)
        token = self.lease.token if self.lease is not None else None
        listed_at = self.clock.monotonic()
        due = self.clock.now().timestamp() >= self.memory.batch.due
        kept = self.memory.quiet.take(marks, token, self.inventory.version, listed_at, due)
        if kept is not None:  # nothing was written to any job since the last cycle's listing
            work = kept.work
            self.memory.facts.same_jobs = True
            listed_at = kept.listed_at
        else:
            jobs = [
                j
                for j in self.store.list_objects("Job", None, exclude_phases=FINISHED)
                if isinstance(j, Job)
            ]
            known = self.memory.quiet.records_kept()
            if known is not None:  # the records as the last cycle left them: the store's
                work = [
                    item_for(j, facts, known.get(facts.uid))
                    for j, facts in zip(jobs, self.memory.facts.refresh(jobs), strict=True)
                ]
            else:
                records = self.tasks.of_jobs_not_in(FINISHED)
                work = [
                    JobWork(j, records.get(facts.uid) or [], known=facts)
                    for j, facts in zip(jobs, self.memory.facts.refresh(jobs), strict=True)
                ]
            if not self.memory.facts.same_jobs:  # the very jobs of the last cycle: nothing new
                self.workload.observe(jobs)
        # Only jobs with task records (or cancelled) are observed and advanced: only those
        # can change before placement.
        advancing = [item for item in work if item.records or item.facts.cancelled]
        self._observe(advancing)
        for item in advancing:
            self._advance(item)
        self.started_now = []
        self.memory.batch.report = None
        placer = kept.placer if kept is not None and all_clean(advancing) else None
        if placer is None:
            sessions = self.memory.batch.sessions
            placer, plan = admission.place(self._admit_inputs(), work)
            self._carry_out(plan)
            self._observe_started()
            # the claims placement just read
            self._queue_stops(
                evict_for_device_taints(self.claims.no_execute, work, self.clock.now())
            )
            placed_nothing = (
                self.memory.batch.sessions == sessions and self.memory.batch.fingerprint is not None
            )
            quiet = placed_nothing and all_clean(work)
        else:  # the last cycle's placement, with the same inputs: the same result
            self.memory.quiet.reused_placements += 1
            quiet = True
        if not (quiet and kept is not None):  # a quiet cycle on kept jobs has nothing to write
            write_back(
                self.store,
                self.tasks,
                self.clock,
                work,
                transaction=self.fenced,
                on_written=self.on_written,
                also=self._write_queue_status,
                verified=self.memory.verified,
            )
        self.send_stops()  # their ``stopping`` marks are durable now
        membership.sync_all(self.backend, self.memory.batch.membership, work)
        self.inventory.write_status(placer)
        # Pending jobs per queue are read from the jobs as stored: the same models, the same
        # counts (the gauges keep them).
        generation = self.memory.facts.generation
        publish_metrics(
            self.metrics, self.store, work, placer, pending=generation != self.memory.published
        )
        self.memory.published = generation
        if self.extensions or self.intakes:
            context = self._context(work)
            run_extensions(self.extensions, context)
            self.memory.last_context = context
        self.memory.quiet.keep(  # membership and extensions leave the items as they are
            Kept(
                marks,
                token,
                self.inventory.version,
                listed_at,
                work,
                placer if quiet else None,
                () if quiet else unclean(work),
                kept.special if kept is not None else special(work),
            )
        )
        self.cycles += 1
        self.metrics.cycle_seconds.observe(self.clock.monotonic() - started)

    def _admit_inputs(self) -> AdmitInputs:
        return AdmitInputs(
            store=self.store,
            claims=self.claims,
            inventory=self.inventory,
            policy=self.policy,
            pool_profiles=self.pool_profiles,
            workload=self.workload,
            now=self.clock.now(),
            jobs_generation=self.jobs_generation,
            batch=self.memory.batch,
        )

    def _carry_out(self, plan: Plan) -> None:
        """Step 4's act: the plan's failures and stops, then its starts: every started task's
        record, and its claims' allocations, durable in one fenced transaction, and only then
        the backend asked."""
        for item, reason, message in plan.failures:
            self.finish(item, JobPhase.FAILED, reason, message)
        self._queue_stops(plan.stops)
        if not plan.starts:
            return
        # the claims' allocations in the transaction of their tasks' records
        with self.fenced() as tx, self.claims.writing(tx):
            prepared = prepare_starts(
                plan, self.log_dir, self.claims.record_allocated, self.clock.now()
            )
            inserted = {id(i) for i in prepared.fresh}
            self.tasks.insert_many([r for item in prepared.fresh for r in item.records], conn=tx)
            self.tasks.save_many(
                [
                    r
                    for item, _ in plan.starts
                    if id(item) not in inserted
                    for r in item.records
                    if r.name in item.changed
                ],
                conn=tx,
            )
        for item, _ in plan.starts:
            item.changed.clear()
        for item, seconds in scheduled(prepared, self.clock.now()):
            self.metrics.observe_scheduling(item.job.tenant, item.job.spec.queue, seconds)
        for item, record in prepared.placed:
            self.start_task(item, record)

    def _queue_stops(self, stops: Sequence[Stop]) -> None:
        for stop in stops:
            self.ask_stop(stop.request_id, stop.drain_seconds)

    def _context(self, work: Sequence[JobWork]) -> CycleContext:
        jobs = {(item.job.tenant, item.job.name): item.job for item in work}
        placed = frozenset(
            (item.job.tenant, item.job.name) for item in work if any(r.node for r in item.records)
        )
        return CycleContext(
            store=self.store,
            backend=self.backend,
            clock=self.clock,
            metrics=self.metrics,
            nodes=tuple(self.nodes),
            transaction=self.fenced,
            cycle=self.cycles,
            jobs=jobs,
            placed=placed,
            running=tuple(r for item in work for r in item.records if r.phase == "Running"),
        )

    def _intake_context(self) -> CycleContext:
        """The last cycle's context with this cycle's count (none yet: no jobs known)."""
        last = self.memory.last_context
        if last is None:
            return self._context([])
        return replace(last, cycle=self.cycles)

    def _write_queue_status(self, tx: Connection) -> None:
        """Each Queue's and Tenant's status from this cycle's session (none ran: unchanged)."""
        if self.memory.batch.report is None:
            return
        snapshot, decisions, objects = self.memory.batch.report
        write_queue_statuses(self.store, objects, snapshot, decisions, conn=tx)

    def _observe(self, work: list[JobWork]) -> None:
        """Step 2: record what the backend says became of each started task, and which of the
        attempts asked to stop have stopped (controller/observe.py decides; here it is
        carried out)."""
        asking = observed_step.asked(work)
        if not asking:
            return
        answers = self.status([r.request_id or "" for _, r in asking])
        memory = self.memory
        changes = observed_step.observe(
            asking,
            answers,
            self.clock.now(),
            unknown_once=memory.unknown_once,
            asked_to_stop=lambda rid: rid in memory.stop_asked or memory.held_stops.holds(rid),
        )
        for change in changes:
            self._carry(change.item, change.moved)
            if change.stop_confirmed:
                memory.stop_asked.discard(change.moved.record.request_id or "")
            if change.event is not None:
                change.item.event(*change.event)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        """The backend's answers; a call that fails is "unreachable" for every id (unknown
        state: no task is declared lost or confirmed stopped on it)."""
        try:
            return self.backend.status(request_ids)
        except Exception as err:  # a backend that cannot answer now: try again next cycle
            log.warning("status of %d tasks failed: %s", len(request_ids), err)
            return {rid: TaskStatus(rid, TaskState.UNREACHABLE) for rid in request_ids}

    def give_up(
        self, item: JobWork, record: TaskRecord, phase: TaskPhase, message: str
    ) -> TaskRecord:
        """Stop an attempt the controller no longer counts on; it stays ``stopping`` (holding
        its resources, blocking any replacement) until the backend confirms it has stopped."""
        given = apply(record, Event.GIVEN_UP, Facts(self.clock.now(), message, phase=phase))
        return self._carry(item, given)

    def _carry(self, item: JobWork, moved: Transition, *, start: bool = True) -> TaskRecord:
        """Store a lifecycle transition's record in the item and carry out its effects (a
        stop is queued; a start asked now, unless ``start`` is False: the caller starts it
        once its record is durable)."""
        if moved.changed:
            item.set(moved.record)
        if (stop := moved.stop()) is not None:
            self._ask_stop(stop.request_id)
        if start and Effect.START in moved.effects:
            self.start_task(item, moved.record)
        return moved.record

    def ask_stop(self, request_id: str, drain_seconds: float = 0.0) -> None:
        """Queue a stop; ``send_stops`` sends it once the lease is confirmed and, with a drain,
        no sooner than ``drain_seconds`` from now (an evicted service replica)."""
        if drain_seconds > 0 and request_id not in self.memory.stops:
            self.memory.held_stops.hold(request_id, self.clock.now().timestamp() + drain_seconds)
            return
        self._ask_stop(request_id)

    def _ask_stop(self, request_id: str) -> None:
        """Queue a stop; ``send_stops`` sends it once the lease is confirmed."""
        self.memory.held_stops.release(request_id)  # a stop at once (a cancel) ends any drain
        if request_id not in self.memory.stops:
            self.memory.stops.append(request_id)

    def send_stops(self) -> None:
        """Send the stops queued so far and those whose drain is over, right after a fenced
        transaction has confirmed (and renewed) the lease: ``LeaseLost``, and none is sent,
        when this controller lost it."""
        if self.memory.held_stops:
            for rid in self.memory.held_stops.take_due(self.clock.now().timestamp()):
                self._ask_stop(rid)
        if not self.memory.stops:
            return
        if self.lease is not None:
            with self.fenced():
                pass  # only the check: the lease is this controller's for its ttl from now
        stops, self.memory.stops = self.memory.stops, []
        for rid in stops:
            try:
                self.backend.stop(rid, self.stop_grace_seconds)
                self.memory.stop_asked.add(rid)
            except Exception as err:  # asked again next cycle while it still runs
                log.warning("stopping %s failed: %s", rid, err)

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
        if not asked or getattr(self.backend, "starts_later", False):
            return  # a backend whose tasks never run at once (Ray): no round trip for nothing
        answers = self.status([r.request_id or "" for _, r in asked])
        now = self.clock.now()
        for item, record in asked:
            answer = answers.get(record.request_id or "")
            if answer is not None and answer.state is TaskState.RUNNING:
                facts = Facts(now, started_at=answer.started_at)
                item.set(apply(record, Event.RUNNING, facts).record)

    def _advance(self, item: JobWork) -> None:
        """Step 3: cancel, restart with backoff, fail or complete one job (controller/advance.py
        decides; here the restarted tasks' records are made durable before their starts)."""
        now = self.clock.now()  # restart times are wall-clock: stored, read by any host
        step = advance(item, now, self.backoff, self.inventory.is_ready)
        starts = []
        for moved in step.moves:
            self._carry(item, moved, start=False)
            if Effect.START in moved.effects:
                starts.append(moved.record)
        if step.restarts is not None:
            item.restarts = step.restarts
        for reason, message, warning in step.events:
            item.event(reason, message, warning)
        if starts:
            # durable (and fenced) before the backend is asked; a gang's members each see the
            # others Starting (a backend that reserves a gang)
            self.save_records(item)
            for record in starts:
                self.start_task(item, record)
        if step.end is not None:
            self.finish(item, *step.end)

    def finish(self, item: JobWork, phase: JobPhase, reason: str, message: str) -> None:
        """End the job: stop what still runs, close every open task record. The job ends only
        once the backend confirms every stopped attempt has stopped; until then it waits
        (reason ``Stopping``) and this runs again next cycle."""
        now = self.clock.now()
        stopped = []
        for record in list(item.records):
            if record.phase in ACTIVE and record.request_id:
                record = self.give_up(item, record, TaskPhase.CANCELLED, message)
                stopped.append(record)
            if not TaskPhase(record.phase).finished:
                item.set(apply(record, Event.CLOSED, Facts(now, message)).record)
        self._confirm_now(item, [r for r in item.records if r.stopping])
        waiting = sum(r.stopping for r in item.records)
        if waiting:
            item.ending = True
            item.reason = "Stopping"
            item.message = f"{message}; waiting for {waiting} tasks to stop"
            return
        item.phase, item.reason, item.message = phase, reason, message
        item.event(phase.value, message, phase is not JobPhase.SUCCEEDED)

    def _confirm_now(self, item: JobWork, stopping: list[TaskRecord]) -> None:
        """Ask right away whether the attempts asked to stop have stopped (a backend whose stop
        is immediate lets the job end in this cycle)."""
        if not stopping:
            return
        self.send_stops()
        answers = self.status([r.request_id or "" for r in stopping])
        for record in stopping:
            answer = answers.get(record.request_id or "")
            if answer is not None and stop_confirmed(answer, record, self.memory.unknown_once):
                item.set(apply(record, Event.STOP_CONFIRMED, Facts(self.clock.now())).record)
                self.memory.stop_asked.discard(record.request_id or "")

    def start_task(self, item: JobWork, record: TaskRecord) -> None:
        """Ask the backend to start a placed task (idempotent by its request id), under the
        lease's fencing token; a start that fails at once marks the task lost (and asks the
        backend to stop whatever it may have begun), so the restart policy decides what
        follows. A start refused for a stale fencing token ends the cycle (``LeaseLost``)."""
        waits = self.claims.binding_wait(item.job, record)
        if waits is not None:
            self.wait_for_binding(item, record, waits)
            return
        backends = self.inventory.backends
        allocations = self.claims.allocations(item.job, record)
        devices = claim_devices(allocations)
        membership.sync(
            self.backend, self.memory.batch.membership, item
        )  # an elastic job's file names the new member first
        request = make_request(
            item.job,
            record,
            item.records,
            backends,
            devices,
            fencing_token=self.fencing_token,
            membership_file=membership.file_for(self.backend, item.job, record.node),
            # an adminAccess claim holds no device, and its allocation is still the backend's
            # to write (Kubernetes: a pod bound with its claim unallocated never starts)
            claims=self.claims.allocated_claims(item.job, record) if allocations else (),
            gang=places_gangs(self.backend),  # Ray reserves a gang as one placement group
        )
        request = self.enforce_share(item, record, request)
        try:
            request = with_datasets(self.store, item.job, request)  # controller/datasets_launch
            self.backend.start(request)
            self.started_now.append((item, record))
        except FencingRefused as err:
            if self.lease is not None:
                self.lease.token = None  # whoever holds it now, it is not this controller
            raise LeaseLost(str(err)) from err
        except Exception as err:  # the backend could not start it: lost, and stopped
            log.warning("starting %s of job %s failed: %s", record.name, item.job.name, err)
            self.give_up(item, record, TaskPhase.LOST, f"start failed: {err}")

    def wait_for_binding(self, item: JobWork, record: TaskRecord, waits: BindingWait) -> None:
        """A task whose devices' binding conditions are not all True does not start: it
        waits (asked again each cycle, as any start the backend does not know), or, when the
        binding failed (a failure condition, the timeout), goes back to Pending without its
        node, so that its claims' devices are freed and it is placed again (devices/binding.py).
        """
        if waits.failed:
            failed = Facts(self.clock.now(), waits.message)
            item.set(apply(record, Event.BINDING_FAILED, failed).record)
            item.event("BindingFailed", f"{record.name}: {waits.message}", True)
            return
        if record.message != waits.message:
            item.set(record.with_(message=waits.message))
            item.event("WaitingForBinding", f"{record.name}: {waits.message}")

    def enforce_share(
        self, item: JobWork, record: TaskRecord, request: LaunchRequest
    ) -> LaunchRequest:
        """A GPU share's limits in the task's environment where its node enforces them (MPS,
        HAMi-core); the task's status says which, or that nothing does (task_devices.py)."""
        node = self.inventory.by_name.get(record.node or "")
        gpu = task_spec(item.job, record.group_name).resources.gpu
        request, found = with_share_enforcement(request, gpu, node)
        if found is not None:
            item.share_notes[record.name] = found.note
            reason = "GpuShareEnforced" if found.enforced else "GpuShareNotEnforced"
            item.event(reason, f"{record.name}: {found.note}", not found.enforced)
        return request

    def save_records(self, item: JobWork) -> None:
        """Make the job's changed records durable now, before the backend is asked."""
        if not item.changed:
            return
        with self.fenced() as tx:
            self.tasks.save_many([r for r in item.records if r.name in item.changed], conn=tx)
        item.changed.clear()
