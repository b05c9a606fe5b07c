"""Writers of one SQLite file queue on a file lock: none fails, none is lost."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from types import SimpleNamespace

from sqlalchemy import create_engine, make_url

from aipaas.api.registry import parse_object
from aipaas.store import Store
from aipaas.store.writers import WriterQueue


def _tenant(name: str) -> object:
    return parse_object({"apiVersion": "aipaas/v1", "kind": "Tenant", "metadata": {"name": name}})


def _write_many(url: str, prefix: str, count: int) -> None:
    store = Store.open(url)
    try:
        for i in range(count):
            store.create(_tenant(f"{prefix}-{i}"))  # type: ignore[arg-type]
    finally:
        store.close()


def test_processes_and_threads_write_without_losing_anything(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'aipaas.db'}"
    Store.open(url).close()
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_write_many, args=(url, f"p{n}", 60)) for n in range(2)]
    threads = [threading.Thread(target=_write_many, args=(url, f"t{n}", 60)) for n in range(3)]
    for process in processes:
        process.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    store = Store.open(url)
    assert store.count("Tenant") == 5 * 60
    store.close()


def test_a_turn_is_reentrant_within_a_thread(tmp_path: Path) -> None:
    queue = WriterQueue(str(tmp_path / "w.lock"))
    with queue.turn(), queue.turn():
        entered = threading.Event()

        def other() -> None:
            with queue.turn():
                entered.set()

        thread = threading.Thread(target=other)
        thread.start()
        assert not entered.wait(0.2)  # still ours while the outer turn lasts
    thread.join(5)
    assert entered.is_set()


def test_postgresql_and_memory_databases_need_no_queue() -> None:
    assert WriterQueue.for_engine(create_engine("sqlite://"))._lock_path is None
    # PostgreSQL by its URL alone: no driver needs to be installed for this check.
    postgres = SimpleNamespace(
        url=make_url("postgresql://u@h/db"), dialect=SimpleNamespace(name="postgresql")
    )
    assert WriterQueue.for_engine(postgres)._lock_path is None  # type: ignore[arg-type]
