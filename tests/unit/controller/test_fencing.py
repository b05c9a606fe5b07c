"""Two controllers on one database (PostgreSQL, and SQLite): a cycle slower than the lease's ttl
lets the other take the lease over; from then on the stale controller's writes and starts are
refused (and logged "fencing: ..."), so at no moment do both act."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Connection

from aipaas.api.registry import load_objects
from aipaas.api.tenancy import Role
from aipaas.backends.base import FencingRefused, Inventory, LaunchRequest, TaskState, TaskStatus
from aipaas.backends.sim import SimBackend, load_cluster
from aipaas.controller.cycle import Controller
from aipaas.controller.loop import ControllerLoop
from aipaas.server.service import ObjectService
from aipaas.store import Store, TaskRepository
from aipaas.store.lease import Lease, LeaseLost
from aipaas.store.pgtest import ThrowawayPostgres, unavailable_reason
from aipaas.tenancy.principal import Principal

TTL = 1.0
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
metadata: {{name: {name}, tenant: acme, annotations: {{sim.aipaas.dev/duration: '600'}}}}
spec:
  queue: research
  tasks: [{{name: w, replicas: 2, command: [train], resources: {{cpu: 1, gpu: 1}}}}]
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[ThrowawayPostgres]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"PostgreSQL is needed for this test: {reason}")
    server = ThrowawayPostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'aipaas.db'}"
    server: ThrowawayPostgres = request.getfixturevalue("postgres")
    server.reset()
    return server.url


class Acts:
    """When each controller acted: committed a fenced write, or had a start accepted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {"a": [], "b": []}

    def add(self, who: str) -> None:
        with self.lock:
            self.times[who].append(time.monotonic())


class Recorded(Controller):
    """A controller whose fenced writes that commit are recorded."""

    who = ""
    acts: Acts

    @contextmanager
    def fenced(self) -> Iterator[Connection]:
        with super().fenced() as tx:
            yield tx
        self.acts.add(self.who)


class Slow:
    """A sim backend that records accepted starts and can be made slow: ``start`` sleeps
    before it reaches the backend (a cycle longer than the lease's ttl)."""

    def __init__(self, inner: SimBackend, who: str, acts: Acts) -> None:
        self.inner = inner
        self.name = inner.name
        self.who = who
        self.acts = acts
        self.sleep_in_start = 0.0
        self.refused: list[str] = []

    def inventory(self) -> Inventory:
        return self.inner.inventory()

    def start(self, request: LaunchRequest) -> None:
        if self.sleep_in_start:
            time.sleep(self.sleep_in_start)
            self.sleep_in_start = 0.0
        try:
            self.inner.start(request)
        except FencingRefused:
            self.refused.append(request.request_id)
            raise
        self.acts.add(self.who)

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self.inner.stop(request_id, grace_seconds)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        return self.inner.status(request_ids)

    def close(self) -> None:
        self.inner.close()


def make(url: str, tmp: Path, who: str, acts: Acts) -> tuple[Recorded, Lease, Slow]:
    store = Store.open(url)  # its own engine and pool, as another server process has
    backend = Slow(SimBackend(tmp / "run", load_cluster()), who, acts)
    lease = Lease(store, f"elsewhere:{who}:x", ttl=TTL)  # not this host: no liveness shortcut
    controller = Recorded(store, backend, log_dir=tmp / "logs", lease=lease, inventory_seconds=0)
    controller.who, controller.acts = who, acts
    return controller, lease, backend


def submit(store: Store, text: str) -> None:
    load_objects(text)
    ObjectService(store, Principal("admin", "", Role.PLATFORM_ADMIN)).apply_text(text)


def take_over(lease: Lease, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not lease.acquire():
        assert time.monotonic() < deadline, "the lease was never taken over"
        time.sleep(0.05)


def test_a_stale_controller_is_refused(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    acts = Acts()
    a, lease_a, backend_a = make(url, tmp_path, "a", acts)
    b, lease_b, backend_b = make(url, tmp_path, "b", acts)
    submit(a.store, SETUP)
    submit(a.store, JOB.format(name="first"))
    assert lease_a.acquire() and lease_a.token == 1
    a.run_cycle()
    assert not lease_b.acquire()  # A holds it

    # A's next cycle is slow: its start waits 2.5 ttl after its records are committed.
    submit(a.store, JOB.format(name="second"))
    backend_a.sleep_in_start = 2.5 * TTL
    loop = ControllerLoop(a, period=0.05, lease=lease_a)
    loop.start()
    try:
        take_over(lease_b)  # once A's lease expired, in the middle of A's cycle
        assert lease_b.token == 2
        b.run_cycle()  # B adopts "second" (A committed its records) and starts it
        deadline = time.monotonic() + 10
        while not backend_a.refused:
            assert time.monotonic() < deadline, "A's stale start was not refused"
            lease_b.acquire()
            b.run_cycle()
            time.sleep(0.05)
        time.sleep(3 * 0.05)
    finally:
        loop.stop()  # (its lease release does nothing: B holds the lease)
    assert lease_b.holder_now() == lease_b.holder
    # A's stale start was refused by the backend and A's cycle stopped, said so in the log.
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("fencing: start of") and "refused" in m for m in messages)
    assert any("fencing:" in m and "the cycle stops here" in m for m in messages)
    # At no moment did both act: everything A did was done before B's first act.
    assert acts.times["a"] and acts.times["b"]
    assert max(acts.times["a"]) < min(acts.times["b"])
    # Each task of "second" was started once and runs once, by B.
    second = b.store.get("Job", "acme", "second")
    records = TaskRepository(b.store).for_job(second.metadata.uid or "")
    answers = backend_b.status([r.request_id or "" for r in records])
    assert [a.state for a in answers.values()] == [TaskState.RUNNING] * 2
    a.store.close()
    b.store.close()


def test_a_write_after_a_takeover_is_refused(url: str, tmp_path: Path) -> None:
    acts = Acts()
    a, lease_a, _ = make(url, tmp_path, "a", acts)
    b, lease_b, _ = make(url, tmp_path, "b", acts)
    submit(a.store, SETUP)
    assert lease_a.acquire()
    with a.fenced():
        pass  # A may write while it holds the lease
    time.sleep(TTL * 1.2)  # A is paused longer than the ttl
    take_over(lease_b)
    submit(a.store, JOB.format(name="late"))
    with pytest.raises(LeaseLost, match="fencing: elsewhere:a:x lost the controller lease"):
        a.run_cycle()  # its records for "late" are refused: nothing written, nothing started
    late = a.store.get("Job", "acme", "late")
    assert TaskRepository(a.store).for_job(late.metadata.uid or "") == []
    assert lease_a.token is None and not lease_a.acquire()
    b.run_cycle()
    assert len(TaskRepository(b.store).for_job(late.metadata.uid or "")) == 2
    a.store.close()
    b.store.close()
