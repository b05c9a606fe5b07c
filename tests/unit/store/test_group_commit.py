"""Group commit: concurrent writes share transactions, yet each gets its own result or error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import Connection

from aipaas.api.meta import Object, ObjectMeta
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


def _as_one_batch(commit: GroupCommit, calls: list[Callable[[], object]]) -> None:
    """Run each call in a thread of its own, their writes queued in this order behind a slow
    write, so that they form one batch once it ends."""
    release, inside = threading.Event(), threading.Event()

    def slow(tx: Connection) -> None:
        inside.set()
        release.wait(5)

    holder = threading.Thread(target=lambda: commit.run(slow))
    holder.start()
    assert inside.wait(5)
    threads = []
    for queued, call in enumerate(calls, start=1):
        threads.append(threading.Thread(target=call))
        threads[-1].start()
        for _ in range(500):
            if commit._waiting.qsize() == queued:
                break
            threading.Event().wait(0.01)
        assert commit._waiting.qsize() == queued
    release.set()
    for thread in (holder, *threads):
        thread.join(5)


def test_a_batch_looks_up_the_keys_of_all_its_writes_in_one_query(store: Store) -> None:
    for name in ("a", "b"):
        _create(store, name)
    asked: list[list[tuple[str, str, str]]] = []
    look_up = store._find_each_now

    def counting(
        conn: Connection, keys: list[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Object]:
        asked.append(list(keys))
        return look_up(conn, keys)

    commit: GroupCommit = store._group_commit
    commit._look_up = counting
    found: dict[str, list[str]] = {}

    def lookup_write(name: str) -> None:
        keys = [("Tenant", "", name), ("Tenant", "", "a")]

        def write(tx: Connection) -> None:
            found[name] = sorted(obj.name for obj in store.find_each(keys, conn=tx).values())

        store.write_together(write, keys)

    _as_one_batch(commit, [partial(lookup_write, n) for n in ("b", "c", "d")])
    assert found == {"b": ["a", "b"], "c": ["a"], "d": ["a"]}
    assert len(asked) == 1  # one query for the three writes, each key once
    assert sorted(asked[0]) == sorted({("Tenant", "", n) for n in "abcd"})


def test_a_lookup_outside_what_the_batch_asked_goes_to_the_database(store: Store) -> None:
    _create(store, "elsewhere")
    seen: list[list[str]] = []

    def write(tx: Connection) -> None:
        other = store.find_each([("Tenant", "", "elsewhere")], conn=tx)  # not named below
        seen.append([obj.name for obj in other.values()])

    call = lambda: store.write_together(write, [("Tenant", "", "x")])  # noqa: E731
    _as_one_batch(store._group_commit, [call, call])
    assert seen == [["elsewhere"], ["elsewhere"]]


def test_a_reference_created_in_the_same_batch_is_seen_on_the_rerun(store: Store) -> None:
    """The batch's lookups predate its writes: a write that needs what an earlier write of its
    batch creates fails there, and the one-by-one rerun gives it the right answer."""
    outcomes: dict[str, str] = {}
    parent, child = ("Tenant", "", "parent"), ("Tenant", "", "child")

    def create_parent(tx: Connection) -> None:
        assert parent not in store.find_each([parent], conn=tx)
        store.create(Tenant(metadata=ObjectMeta(name="parent")), conn=tx, later=True)

    def create_child(tx: Connection) -> None:
        if parent not in store.find_each([parent, child], conn=tx):
            raise LookupError("parent missing")
        store.create(Tenant(metadata=ObjectMeta(name="child")), conn=tx, later=True)

    def run(
        name: str, write: Callable[[Connection], None], keys: list[tuple[str, str, str]]
    ) -> None:
        try:
            store.write_together(write, keys)
            outcomes[name] = "created"
        except LookupError as err:
            outcomes[name] = str(err)

    _as_one_batch(
        store._group_commit,
        [
            lambda: run("parent", create_parent, [parent]),
            lambda: run("child", create_child, [parent, child]),
        ],
    )
    assert outcomes == {"parent": "created", "child": "created"}
    assert store.find("Tenant", "", "child") is not None
