"""The live cycle and ``aipaas simulate cycle`` decide the same (issue 25 item 2, issue 29 item 4).

A seeded driver builds random store states: tenants and queues with quotas, users with quotas
submitting jobs, budgets' admission holds on tenants and queues, nodes with labels, racks,
NoSchedule and NoExecute taints and GPU memory, jobs with whole GPUs, fractions and GPU shares by
memory, priorities, gangs and elastic extras, nodeSelectors, tolerations (with and without
tolerationSeconds) and required topology. Some jobs are started by the live controller on the
sim backend first (what runs); then more jobs arrive, holds and quotas change, time passes,
and one live cycle decides. The same state, written as a Scenario (nodes, the stored objects,
what runs with its GPUs, the taints' times), goes through ``simulate cycle``; every decision
is compared: each start with its node and GPUs, each eviction with its reason, and why each
job that starts nothing waits, in words. A start the session pipelined (it needs victims that
are still stopping) is carried out by the live controller once the stops are confirmed, by
the simulator at once: there the live job must wait with reason Preempting.

DRA claims are not compared: the simulator does not model devices (scenario_build refuses
claims), so the cluster here publishes no ResourceSlices and ``gpu:`` stays a count.

Who runs it: pytest (tests/unit/controller). Seeds are numbered: a failure names the seed.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aipaas.api.finops import ADMISSION_STOPPED
from aipaas.api.job import Job
from aipaas.api.meta import Object
from aipaas.api.queue import Queue
from aipaas.api.tenancy import Role, Tenant
from aipaas.backends.base import NodeInfo
from aipaas.backends.sim import SimBackend
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.metering.usage import aware
from aipaas.scheduler.batch.model import Decisions
from aipaas.scheduler.batch.run import run_session
from aipaas.scheduler.framework.constraints import TAINTS_ANNOTATION
from aipaas.server.service import ObjectService
from aipaas.sim import scenario_output
from aipaas.sim.scenario import validate_document
from aipaas.sim.scenario_build import build_scenario
from aipaas.sim.scenario_output import run_cycle
from aipaas.store import Store, TaskRecord
from aipaas.store.database import make_engine, migrate
from aipaas.tenancy.principal import Principal

#: states compared (PARITY_STATES=2000 for a longer sweep by hand)
STATES = int(os.environ.get("PARITY_STATES", "500"))
ADMIN = Principal("admin", "", Role.PLATFORM_ADMIN)
RACK = "topology.aipaas.dev/rack"
EVICTION_REASONS = ("Preempted", "Reclaimed", "ElasticShrink", "NoExecute")
ACTIVE = ("Starting", "Running")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database, copied for every state (migrating costs more than a state)."""
    path = tmp_path_factory.mktemp("template") / "aipaas.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    return path


@dataclass
class State:
    """One random store state: what to apply before the first cycles and before the last."""

    nodes: list[NodeInfo]
    first: list[str] = field(default_factory=list)  # YAML documents (tenants, queues, users)
    running: list[tuple[str, str]] = field(default_factory=list)  # (user, job YAML)
    pending: list[tuple[str, str]] = field(default_factory=list)
    holds: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, tenant, name)
    wait: float = 0.0  # seconds between what runs and the compared cycle


def random_state(seed: int) -> State:
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(2, 4)):
        taints = []
        if rng.random() < 0.2:
            taints.append("dedicated=ml:NoSchedule")
        if rng.random() < 0.1:
            taints.append("slow=yes:PreferNoSchedule")
        if rng.random() < 0.2:
            taints.append("maintenance=soon:NoExecute")
        nodes.append(
            NodeInfo(
                name=f"n{i}",
                backend="sim",
                cpu_milli=rng.choice([32, 64]) * 1000,
                memory_mib=256 * 1024,
                gpu_count=rng.choice([2, 4, 8]),
                gpu_model="H100",
                gpu_memory_mib=80 * 1024,
                labels={"pool": rng.choice("ab"), RACK: f"r{i // 2}"},
                annotations={TAINTS_ANNOTATION: ",".join(taints)} if taints else {},
            )
        )
    state = State(nodes=nodes, wait=rng.choice([0.0, 30.0, 90.0]))
    tenants = [f"t{i}" for i in range(rng.randint(1, 2))]
    for tenant in tenants:
        quota = f"{{gpu: {rng.choice([4, 6, 10])}}}" if rng.random() < 0.4 else "{}"
        state.first.append(
            f"kind: Tenant\nmetadata: {{name: {tenant}}}\n"
            f"spec: {{quota: {quota}, allowedPriorityClasses: [low, normal, high]}}"
        )
        for q in range(rng.randint(1, 2)):
            spec = []
            if rng.random() < 0.3:
                spec.append(f"quota: {{gpu: {rng.choice([2, 4, 6])}}}")
            if rng.random() < 0.3:
                spec.append(f"weight: {rng.choice([1, 2, 3])}")
            state.first.append(
                f"kind: Queue\nmetadata: {{name: q{q}, tenant: {tenant}}}\n"
                f"spec: {{{', '.join(spec)}}}"
            )
            if rng.random() < 0.1:
                state.holds.append(("Queue", tenant, f"q{q}"))
        for u in range(2):
            quota = f", quota: {{gpu: {rng.choice([1, 2, 3])}}}" if rng.random() < 0.4 else ""
            state.first.append(
                f"kind: User\nmetadata: {{name: u{u}, tenant: {tenant}}}\n"
                f"spec: {{role: member{quota}}}"
            )
        if rng.random() < 0.08:
            state.holds.append(("Tenant", "", tenant))
    queues = {
        (doc.split("tenant: ")[1].split("}")[0], doc.split("name: ")[1].split(",")[0])
        for doc in state.first
        if doc.startswith("kind: Queue")
    }
    ordered = sorted(queues)
    for phase, count in (("running", rng.randint(1, 5)), ("pending", rng.randint(1, 6))):
        for j in range(count):
            tenant, queue = rng.choice(ordered)
            user = f"u{rng.randrange(2)}"
            job = _job(rng, f"{phase[0]}{j}", tenant, queue)
            getattr(state, phase).append((user, job))
    return state


def _job(rng: random.Random, name: str, tenant: str, queue: str) -> str:
    replicas = rng.choice([1, 1, 2, 3])
    shape = rng.random()
    if shape < 0.55:
        gpu = str(rng.choice([1, 2, 4]))
    elif shape < 0.75:
        gpu = "0.5"
    elif shape < 0.9:
        gpu = "{count: 1, memory: 20Gi}"
    else:
        gpu = "0"
    spec = [f"queue: {queue}", f"priority: {rng.choice(['low', 'normal', 'high'])}"]
    if replicas > 1 and rng.random() < 0.3:
        spec.append("minAvailable: 1")
    if rng.random() < 0.2:
        spec.append("preemptible: false")
    if rng.random() < 0.2:
        spec.append(f"nodeSelector: {{pool: {rng.choice('ab')}}}")
    tolerations = []
    if rng.random() < 0.4:
        tolerations.append("{key: dedicated, operator: Exists, effect: NoSchedule}")
    if rng.random() < 0.4:
        seconds = rng.choice([None, 0, 60])
        extra = "" if seconds is None else f", tolerationSeconds: {seconds}"
        tolerations.append(f"{{key: maintenance, operator: Exists, effect: NoExecute{extra}}}")
    if tolerations:
        spec.append(f"tolerations: [{', '.join(tolerations)}]")
    if replicas > 1 and rng.random() < 0.15:
        spec.append("topology: {required: rack}")
    resources = f"{{cpu: {rng.choice([1, 4, 8])}, memory: 8Gi, gpu: {gpu}}}"
    return (
        f"kind: Job\nmetadata: {{name: {name}, tenant: {tenant}, "
        f"annotations: {{sim.aipaas.dev/duration: '100000'}}}}\n"
        f"spec:\n" + "".join(f"  {line}\n" for line in spec) + "  tasks:\n"
        f"    - {{name: w, replicas: {replicas}, command: [x], resources: {resources}}}\n"
    )


@dataclass
class Live:
    store: Store
    controller: Controller
    clock: VirtualClock
    backend: SimBackend

    def apply(self, text: str, user: str = "", tenant: str = "") -> None:
        caller = ADMIN if not user else Principal(user, tenant, Role.TENANT_ADMIN)
        ObjectService(self.store, caller).apply_text("apiVersion: aipaas/v1\n" + text)

    def jobs(self) -> dict[str, Job]:
        found = [o for o in self.store.list_objects("Job", None) if isinstance(o, Job)]
        return {f"{j.tenant}/{j.name}": j for j in found}

    def records(self) -> dict[tuple[str, str], TaskRecord]:
        keys = {j.metadata.uid or "": key for key, j in self.jobs().items()}
        return {(keys[uid], r.name): r for uid in keys for r in self.controller.tasks.for_job(uid)}


@pytest.fixture
def live_of(template: Path, tmp_path: Path) -> Iterator[Any]:
    opened: list[Store] = []
    # Memory-backed files where the machine has them: a state writes a database, a run
    # directory and a journal, and the disk's latency was most of a state's time.
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else tmp_path

    def make(seed: int, nodes: list[NodeInfo]) -> Live:
        folder = base / str(seed)
        folder.mkdir()
        shutil.copy(template, folder / "aipaas.db")
        clock = VirtualClock()
        store = Store(make_engine(f"sqlite:///{folder / 'aipaas.db'}"), clock)
        opened.append(store)
        backend = SimBackend(folder / "run", nodes, clock, default_duration=100_000)
        controller = Controller(store, backend, log_dir=folder / "logs", clock=clock)
        return Live(store, controller, clock, backend)

    yield make
    for store in opened:
        store.close()
    if base != tmp_path:
        shutil.rmtree(base, ignore_errors=True)


def scenario_of(live: Live, seen_at: float) -> dict[str, Any]:
    """The state the compared cycle starts from, as a Scenario document: the backend's nodes
    (NoExecute taints appeared when the controller first saw them, ``seen_at``), the stored
    objects, and what runs with its GPUs."""
    now = live.clock.now().timestamp()
    nodes = []
    for node in live.backend.nodes:
        taints = []
        for text in filter(None, node.annotations.get(TAINTS_ANNOTATION, "").split(",")):
            pair, effect = text.split(":")
            key, _, value = pair.partition("=")
            taint: dict[str, Any] = {"key": key, "value": value, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = seen_at
            taints.append(taint)
        nodes.append(
            {
                "name": node.name,
                "gpu": node.gpu_count,
                "cpu": str(node.cpu_milli // 1000),
                "memory": f"{node.memory_mib}Mi",
                "gpuModel": node.gpu_model,
                "gpuMemory": f"{node.gpu_memory_mib}Mi",
                "labels": {k: v for k, v in node.labels.items()},
                "taints": taints,
            }
        )
    objects: list[dict[str, Any]] = []
    for kind in ("Tenant", "Queue", "User"):
        for obj in live.store.list_objects(kind, None):
            objects.append(_manifest(obj))
    running = []
    jobs = live.jobs()
    records = live.records()
    for key, job in jobs.items():
        objects.append(_manifest(job))
        mine = [r for (k, _), r in records.items() if k == key and r.phase in ACTIVE and r.node]
        if mine:
            since = min(aware(r.started_at).timestamp() for r in mine if r.started_at)
            running.append(
                {
                    "job": key,
                    "since": since,
                    "nodes": {r.name: r.node for r in mine},
                    "gpus": {r.name: list(r.gpus) for r in mine},
                }
            )
    return {
        "apiVersion": "aipaas/v1",
        "kind": "Scenario",
        "spec": {
            "now": now,
            "nodes": nodes,
            "objects": objects,
            "running": running,
            # What FGD expects: the live controller learns it from the jobs it lists, oldest
            # first (controller/workload.py), as the compared cycle will.
            "workload": list(jobs),
        },
    }


def _manifest(obj: Object) -> dict[str, Any]:
    data = obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    data.pop("status", None)
    return data


@dataclass
class Decided:
    """One side's decisions: starts (job, task) -> (node, GPUs), evictions (job, task) ->
    reason, and (reason code, words) per job that started nothing and was not evicted."""

    starts: dict[tuple[str, str], tuple[str, tuple[int, ...]]]
    evictions: dict[tuple[str, str], str]
    waits: dict[str, tuple[str, str]]


def live_decisions(
    live: Live, before: dict[tuple[str, str], TaskRecord]
) -> tuple[Decided, set[str]]:
    """What the live cycle decided, from the records and job status it wrote; and the jobs
    it holds back for victims that are stopping (Preempting)."""
    after = live.records()
    starts = {}
    evictions = {}
    for name, record in after.items():
        old = before.get(name)
        was_active = old is not None and old.phase in ACTIVE and not old.stopping
        if record.phase in ACTIVE and not record.stopping and not was_active and record.node:
            starts[name] = (record.node, tuple(record.gpus))
        elif was_active and (record.stopping or record.phase not in ACTIVE):
            reason = record.message.split(" by ", 1)[0]
            if reason in EVICTION_REASONS:
                evictions[name] = reason
    waits = {}
    preempting = set()
    touched = {k for k, _ in (*starts, *evictions)}
    for key, job in live.jobs().items():
        status = job.status
        if status is None or key in touched:
            continue
        if status.reason == "Preempting":
            preempting.add(key)
        if any(r.phase in ACTIVE for (k, _), r in after.items() if k == key):
            continue
        waits[key] = (status.reason or "", status.message or "")
    return Decided(starts, evictions, waits), preempting


def simulated_decisions(document: dict[str, Any]) -> Decided:
    """What ``simulate cycle`` decides from the document (its JSON, and the GPUs of the
    placements it made)."""
    scenario = build_scenario(validate_document(document), honour_arrivals=False)
    # The JSON names one eviction reason per job; each task's is in the session's decisions,
    # read as ``run_cycle`` gets them.
    decided: list[Decisions] = []

    def recorded(*args: Any, **options: Any) -> Decisions:
        decisions = run_session(*args, **options)
        decided.append(decisions)
        return decisions

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scenario_output, "run_session", recorded)
        output = run_cycle(scenario)
    starts = {}
    for key, entry in output["jobs"].items():
        tasks = {t.name: t for t in scenario.jobs[key].tasks}
        for task in entry["started"]:
            placement = tasks[task].placement
            assert placement is not None
            starts[(key, task)] = (placement.node, tuple(placement.gpus))
    evictions = {(e.job, e.task): e.reason for e in decided[0].evicted}
    assert sorted(f"{k}/{t}" for k, t in evictions) == sorted(output["evicted"])
    waits = {
        key: (entry["reason_code"], entry["reason"])
        for key, entry in output["jobs"].items()
        if not entry["started"] and not entry["evicted"] and not entry["running"]
    }
    return Decided(starts, evictions, waits)


def run_state(seed: int, make: Any) -> str | None:
    """One state through both; None when they agree, else what differs. States whose warm-up
    left something between two states (a task still stopping) are skipped: ``"skip"``."""
    state = random_state(seed)
    live = make(seed, state.nodes)
    for text in state.first:
        live.apply(text)
    for user, text in state.running:
        tenant = text.split("tenant: ")[1].split(",")[0]
        live.apply(text, user, tenant)
    seen_at = live.clock.now().timestamp()
    live.controller.run_cycle()
    if any(r.stopping for r in live.records().values()):
        return "skip"
    for user, text in state.pending:
        tenant = text.split("tenant: ")[1].split(",")[0]
        live.apply(text, user, tenant)
    for kind, tenant, name in state.holds:
        obj = live.store.get(kind, tenant, name)
        assert isinstance(obj, Tenant | Queue)
        obj.metadata.annotations[ADMISSION_STOPPED] = "b1"
        live.store.update(obj)
    live.clock.advance(state.wait)
    document = scenario_of(live, seen_at)
    before = live.records()
    live.controller.run_cycle()
    got, preempting = live_decisions(live, before)
    want = simulated_decisions(document)
    problems = []
    pipelined = {k for k, _ in want.starts if k in preempting}
    for task, where in sorted(want.starts.items()):
        if task[0] in pipelined:
            continue
        if got.starts.get(task) != where:
            problems.append(f"start {task}: simulate {where}, live {got.starts.get(task)}")
    for task, where in sorted(got.starts.items()):
        if task not in want.starts:
            problems.append(f"start {task}: live {where}, simulate none")
    if got.evictions != want.evictions:
        problems.append(f"evictions: simulate {want.evictions}, live {got.evictions}")
    for key, why in sorted(want.waits.items()):
        if key in got.waits and got.waits[key] != why:
            problems.append(f"wait {key}: simulate {why}, live {got.waits[key]}")
    for key in sorted(got.waits.keys() - want.waits.keys() - pipelined):
        problems.append(f"wait {key}: live {got.waits[key]}, simulate started or evicted it")
    return "; ".join(problems) or None


CHUNKS = 5


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_live_cycle_and_simulate_cycle_decide_the_same(live_of: Any, chunk: int) -> None:
    """``STATES // CHUNKS`` compared states per chunk (seeds from ``chunk * 10_000``): the
    chunks together compare ``STATES``, and ``-n`` spreads them."""
    wanted = STATES // CHUNKS
    compared = skipped = 0
    differ = []
    seed = chunk * 10_000
    while compared < wanted:
        found = run_state(seed, live_of)
        if found == "skip":
            skipped += 1
        else:
            compared += 1
            if found is not None:
                differ.append(f"seed {seed}: {found}")
        seed += 1
    assert skipped <= wanted // 5, f"{skipped} states skipped"
    assert differ == [], "\n".join(differ[:10]) + f"\n({len(differ)} of {wanted} differ)"


@pytest.mark.parametrize("seed", [10180, 20246, 20260, 40322])
def test_states_a_longer_sweep_found(live_of: Any, seed: int) -> None:
    """An elastic job losing its gang task to preemption and its extra to a shrink in one cycle:
    each eviction keeps its own reason on both sides (found with PARITY_STATES=2000)."""
    assert run_state(seed, live_of) is None
