"""Group commit: concurrent writes share transactions, yet each gets its own result or error."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Connection

from aipaas.api.meta import ObjectMeta
from aipaas.api.tenancy import Tenant
from aipaas.errors import AlreadyExists
from aipaas.store import Store
from aipaas.store.batch import GroupCommit


def _create(store: Store, name: str) -> object:
    return store.write_together(
        lambda tx: store.create(Tenant(metadata=ObjectMeta(name=name)), conn=tx)
    )


def test_concurrent_writes_all_land_in_fewer_transactions(store: Store) -> None:
    names = [f"t{i}" for i in range(200)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        created = list(pool.map(lambda n: _create(store, n), names))
    assert sorted(obj.name for obj in created) == sorted(names)  # type: ignore[attr-defined]
    assert store.count("Tenant") == 200
    assert store._group_commit.batches <= 200


def test_a_failing_write_fails_alone(store: Store) -> None:
    _create(store, "taken")
    gate = threading.Barrier(30)

    def attempt(name: str) -> str:
        gate.wait()
        try:
            _create(store, name)
        except AlreadyExists:
            return "exists"
        return "created"

    names = ["taken" if i % 3 == 0 else f"n{i}" for i in range(30)]
    with ThreadPoolExecutor(max_workers=30) as pool:
        outcomes = list(pool.map(attempt, names))
    assert outcomes == ["exists" if n == "taken" else "created" for n in names]
    assert store.count("Tenant") == 1 + sum(1 for n in names if n != "taken")


def test_a_write_that_raises_leaves_nothing_behind(store: Store) -> None:
    def half_then_fail(tx: Connection) -> None:
        store.create(Tenant(metadata=ObjectMeta(name="half")), conn=tx)
        raise ValueError("changed my mind")

    with pytest.raises(ValueError, match="changed my mind"):
        store.write_together(half_then_fail)
    assert store.find("Tenant", "", "half") is None


def test_batches_form_when_writers_wait(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    release = threading.Event()
    inside = threading.Event()
    seen: list[int] = []

    def slow(tx: Connection) -> int:
        inside.set()
        release.wait(5)
        return 0

    commit: GroupCommit = store._group_commit
    first = threading.Thread(target=lambda: seen.append(commit.run(slow)))
    first.start()
    assert inside.wait(5)  # the writer is busy with the slow write
    followers = [
        threading.Thread(target=lambda i=i: seen.append(commit.run(lambda tx: i + 1)))
        for i in range(10)
    ]
    for thread in followers:
        thread.start()
    for _ in range(500):  # all ten queue behind the slow write
        if commit._waiting.qsize() == 10:
            break
        threading.Event().wait(0.01)
    assert commit._waiting.qsize() == 10
    release.set()
    for thread in (first, *followers):
        thread.join(5)
    assert sorted(seen) == list(range(11))
    assert commit.batches == 2  # the slow one alone, then the ten together
    store.close()


def test_a_closed_store_refuses_writes_instead_of_hanging(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    _create(store, "before")
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        _create(store, "after")


def test_inserts_left_for_the_batch_end_land_once_and_duplicates_fail_alone(
    store: Store,
) -> None:
    gate = threading.Barrier(24)

    def create_later(name: str) -> str:
        def write(tx: Connection) -> object:
            created = store.create(Tenant(metadata=ObjectMeta(name=name)), conn=tx, later=True)
            store.record_event(created, "Created", "by a test", conn=tx, later=True)
            return created

        gate.wait()
        try:
            store.write_together(write)
        except AlreadyExists:
            return "exists"
        return "created"

    names = [f"d{i % 12}" for i in range(24)]  # every name twice, likely in one batch
    with ThreadPoolExecutor(max_workers=24) as pool:
        outcomes = list(pool.map(create_later, names))
    for name in set(names):
        mine = sorted(o for n, o in zip(names, outcomes, strict=True) if n == name)
        assert mine == ["created", "exists"]
    assert store.count("Tenant") == 12
    assert len(store.list_events(kind="Tenant")) == 12  # one event per created tenant


def test_insert_later_outside_a_batch_runs_at_once(store: Store) -> None:
    with store.transaction() as tx:
        store.create(Tenant(metadata=ObjectMeta(name="now")), conn=tx, later=True)
        assert store.find("Tenant", "", "now", conn=tx) is not None
