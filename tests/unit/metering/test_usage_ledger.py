"""The usage ledger as the controller writes it: an entry per attempt that ran, once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aipaas.api.job import Job
from aipaas.api.tenancy import Role
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.clock import VirtualClock
from aipaas.controller.cycle import Controller
from aipaas.errors import NotFound
from aipaas.metering.usage import attempt_entry, ended, record_attempts, usage
from aipaas.server.service import ObjectService
from aipaas.store import Store, TaskRecord
from aipaas.store.ledger import CORRECTION, add_correction, list_entries
from aipaas.tenancy.principal import Principal

SETUP = """
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
"""
JOB = """apiVersion: aipaas/v1
kind: Job
metadata: {{name: {name}, annotations: {{sim.aipaas.dev/duration: "{duration}"{more}}}}}
spec:
  queue: research
  tasks:
    - name: worker
      replicas: 2
      command: [train]
      restartPolicy: {restart}
      backoffLimit: 1
      resources: {{cpu: 4, memory: 32Gi, gpu: 2}}
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path / 'aipaas.db'}")
    ObjectService(opened, Principal("admin", "", Role.PLATFORM_ADMIN)).apply_text(SETUP)
    yield opened
    opened.close()


def submit(store: Store, name: str, *, duration: int = 3600, exit_code: int | None = None) -> None:
    more = f', sim.aipaas.dev/exit-code: "{exit_code}"' if exit_code is not None else ""
    restart = "OnFailure" if exit_code else "Never"
    text = JOB.format(name=name, duration=duration, more=more, restart=restart)
    ObjectService(store, Principal("alice", "acme", Role.MEMBER)).apply_text(text)


def controller(store: Store, tmp: Path) -> tuple[Controller, VirtualClock]:
    clock = VirtualClock()
    backend = SimBackend(tmp / "run", load_cluster(), clock, default_duration=10)
    made = Controller(store, backend, log_dir=tmp / "logs", clock=clock, backoff_seconds=1)
    return made, clock


def phase(store: Store, name: str) -> str:
    job = store.get("Job", "acme", name)
    assert isinstance(job, Job)
    return job.status.phase.value if job.status else "Pending"


def test_an_attempt_enters_the_ledger_when_it_ends(store: Store, tmp_path: Path) -> None:
    ctl, clock = controller(store, tmp_path)
    submit(store, "train", duration=3600)
    ctl.run_cycle()
    assert list_entries(store) == []  # running: not entered yet
    clock.advance(3601)
    ctl.run_cycle()
    ctl.run_cycle()  # a cycle more writes nothing twice
    assert phase(store, "train") == "Succeeded"
    entries = list_entries(store)
    assert [(e.task, e.attempt, e.user, e.queue, e.job_name) for e in entries] == [
        ("worker-0", 0, "alice", "research", "train"),
        ("worker-1", 0, "alice", "research", "train"),
    ]
    for entry in entries:
        assert entry.gpu_milli == 2000 and entry.cpu_milli == 4000
        assert entry.memory_mib == 32 * 1024
        assert entry.gpu_model != ""
        hours = (entry.ended_at - entry.started_at).total_seconds() / 3600  # type: ignore[operator]
        assert entry.gpu_hours == pytest.approx(2 * hours)
        assert entry.memory_gib_hours == pytest.approx(32 * hours)
        assert hours == pytest.approx(1.0, abs=0.01)


def test_each_attempt_of_a_restarted_task_enters_once(store: Store, tmp_path: Path) -> None:
    ctl, clock = controller(store, tmp_path)
    submit(store, "flaky", duration=60, exit_code=3)
    for _ in range(30):  # cycles closer together than a task's run: each attempt seen running
        ctl.run_cycle()
        clock.advance(20)
    assert phase(store, "flaky") == "Failed"
    entries = list_entries(store)
    # two replicas, two attempts each (backoffLimit 1), and never the same interval twice
    assert sorted((e.task, e.attempt) for e in entries) == [
        ("worker-0", 0),
        ("worker-0", 1),
        ("worker-1", 0),
        ("worker-1", 1),
    ]
    assert len({(e.task, e.started_at) for e in entries}) == 4


def test_deleting_the_job_leaves_its_usage(store: Store, tmp_path: Path) -> None:
    ctl, clock = controller(store, tmp_path)
    submit(store, "train", duration=600)
    ctl.run_cycle()
    # deleted while it runs: the controller cancels it, enters the attempts, then deletes it
    ObjectService(store, Principal("alice", "acme", Role.MEMBER)).delete("Job", "train", None)
    clock.advance(300)
    ctl.run_cycle()
    ctl.run_cycle()
    assert store.find("Job", "acme", "train") is None
    (row,) = usage(list_entries(store))
    assert (row.user, row.tasks) == ("alice", 2)
    assert row.gpu_hours == pytest.approx(2 * 2 * 300 / 3600, rel=0.05)


def record(**changes: object) -> TaskRecord:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    base = TaskRecord(
        job_uid="uid-1",
        tenant="acme",
        job_name="j",
        name="w-0",
        group_name="w",
        index=0,
        rank=0,
        node="n1",
        gpus=(0, 1),
        gpu_milli=500,
        phase="Succeeded",
        started_at=start,
        finished_at=start + timedelta(hours=2),
    )
    return base.with_(**changes)


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        pytest.param({}, True, id="succeeded"),
        pytest.param({"phase": "Failed"}, True, id="failed"),
        pytest.param({"phase": "Pending"}, True, id="waiting to restart after a failure"),
        pytest.param({"phase": "Running", "finished_at": None}, False, id="running"),
        pytest.param({"phase": "Starting"}, False, id="restarting: the old interval"),
        pytest.param({"phase": "Cancelled", "started_at": None}, False, id="never started"),
    ],
)
def test_which_records_hold_an_ended_attempt(changes: dict[str, object], want: bool) -> None:
    assert ended(record(**changes)) is want


def test_an_attempt_seen_twice_is_entered_once(store: Store) -> None:
    done = record()
    with store.transaction() as tx:
        record_attempts(store, tx, [done], [])
    with store.transaction() as tx:  # the same attempt, waiting to restart
        record_attempts(store, tx, [done.with_(phase="Pending")], [])
    with store.transaction() as tx:  # the next attempt, which failed to start: it never ran
        lost = done.with_(phase="Lost", attempt=1, started_at=None, finished_at=None)
        record_attempts(store, tx, [lost], [])
    (entry,) = list_entries(store)
    assert (entry.attempt, entry.user, entry.queue) == (0, "unknown", "unknown")
    assert entry.gpu_hours == pytest.approx(2.0)  # 2 GPUs x 0.5 x 2 h


def test_a_correction_is_an_entry_of_its_own(store: Store) -> None:
    done = record()
    with store.transaction() as tx:
        record_attempts(store, tx, [done], [])
    (original,) = list_entries(store)
    fix = replace(
        attempt_entry(None, done, "", datetime(2026, 1, 1, tzinfo=UTC), store.clock.now()),
        kind=CORRECTION,
        corrects=original.id,
        reason="double",
        gpu_hours=-1.0,
        cpu_hours=0.0,
        memory_gib_hours=0.0,
        attempt_key=None,
        recorded_by="admin",
    )
    stored = add_correction(store, fix)
    assert stored.id is not None and stored.id != original.id
    first, second = list_entries(store)
    assert first == original  # untouched
    assert (second.kind, second.corrects, second.reason, second.tenant) == (
        CORRECTION,
        original.id,
        "double",
        "acme",
    )
    (row,) = usage([first, second])
    assert row.gpu_hours == pytest.approx(1.0)
    assert row.tasks == 1


def test_a_correction_of_nothing_is_refused(store: Store) -> None:
    entry = attempt_entry(None, record(), "", datetime(2026, 1, 1, tzinfo=UTC), store.clock.now())
    with pytest.raises(NotFound):
        add_correction(store, replace(entry, corrects=42))
    assert list_entries(store) == []
