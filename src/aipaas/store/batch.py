"""Group commit: the writes of concurrent requests share one transaction.

Under load most of a submission's store time went to opening, beginning and committing its
own transaction (and, on SQLite, to taking the one writer's turn). Here request threads hand
their write to one writer thread, which runs every write waiting at that moment in a single
transaction. A write that fails makes the writer roll the batch back and run each of its
writes again in a transaction of its own, so every caller gets exactly the result, or the
error, it would have got alone; a write must therefore touch nothing but the connection.
A write may leave its inserts for the end of the batch (``insert_later``): the batch's inserts
into one table then go in one statement (store/bulk.py). A write does not see what another
write of its batch left for later; if that makes it fail (a duplicate name in one batch), the
one-by-one rerun gives the right answer.
A write may also name the keys it will look up (``lookups``): the batch looks up all of its
writes' keys in one query before the first write runs, and a lookup within the batch whose keys
were all looked up is answered from that (``prefetched``). Without it, a batch of N writes made N
round trips one after the other while every caller waited. Only writes that change nothing but
by ``insert_later`` may name lookups: the answers are the state at the start of the batch.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection, Hashable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, Final, TypeVar

from sqlalchemy import Connection, Table, insert

from aipaas.store.bulk import insert_rows

log = logging.getLogger(__name__)

T = TypeVar("T")
Write = Callable[[Connection], Any]
Transaction = Callable[[], AbstractContextManager[Connection]]
LookUp = Callable[[Connection, list[Any]], dict[Any, Any]]
Item = tuple[Write, "Future[Any]", Collection[Hashable]]
MAX_BATCH: Final = 128


class GroupCommit:
    def __init__(
        self, transaction: Transaction, max_batch: int = MAX_BATCH, look_up: LookUp | None = None
    ) -> None:
        self._transaction = transaction
        self._max_batch = max_batch
        self._look_up = look_up
        self._waiting: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        # Inserts that the writes of the running batch left for its end (writer thread only).
        self._later: list[tuple[Table, dict[str, Any]]] | None = None
        # The running batch's lookups: the keys asked and what was found (writer thread only).
        self._prefetch: tuple[set[Hashable], dict[Any, Any]] | None = None
        self.batches = 0  # how many transactions carried writes (for tests and curiosity)

    def run(self, write: Callable[[Connection], T], lookups: Collection[Hashable] = ()) -> T:
        """Run ``write`` in a shared transaction; its result or its exception comes back."""
        if threading.current_thread() is self._thread:
            return self._alone(write)  # a write that writes again: no waiting on ourselves
        return self.submit(write, lookups).result()

    def submit(
        self, write: Callable[[Connection], T], lookups: Collection[Hashable] = ()
    ) -> Future[T]:
        """Queue ``write``; the future holds its result or its exception once committed."""
        if self._closed:
            raise RuntimeError("the store is closed")
        self._ensure_started()
        future: Future[T] = Future()
        self._waiting.put((write, future, lookups))
        return future

    def prefetched(self, keys: Collection[Hashable]) -> dict[Any, Any] | None:
        """Within a batch, what its lookup found of ``keys`` (those found), when it asked them
        all; else None, and the caller asks the database."""
        prefetch = self._prefetch
        if prefetch is None or threading.current_thread() is not self._thread:
            return None
        asked, found = prefetch
        if not asked.issuperset(keys):
            return None
        return {key: found[key] for key in keys if key in found}

    def insert_later(self, conn: Connection, table: Table, row: dict[str, Any]) -> None:
        """Within a batch, insert this row with the batch's other rows of the table at its end
        (one statement for them all); outside a batch, now."""
        if self._later is not None and threading.current_thread() is self._thread:
            self._later.append((table, row))
        else:
            conn.execute(insert(table), row)

    def close(self) -> None:
        """Finish the writes queued so far; a write that arrives later is refused."""
        with self._start_lock:
            self._closed = True
        if self._thread is not None:
            self._waiting.put(None)
            self._thread.join(10)
            self._thread = None
        while True:  # a write queued after the last batch: its caller must not wait forever
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[1].set_exception(RuntimeError("the store is closed"))

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._serve, name="aipaas-group-commit", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            first = self._waiting.get()
            if first is None:
                return
            batch = [first, *self._drain()]
            stop = batch[-1] is None
            items = [item for item in batch if item is not None]
            self._commit(items)
            if stop:
                return

    def _drain(self) -> Iterator[Item | None]:
        for _ in range(self._max_batch - 1):
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                return
            yield item
            if item is None:
                return

    def _commit(self, items: list[Item]) -> None:
        if len(items) > 1:
            try:
                with self._transaction() as tx:
                    self._later = []
                    self._prefetch = self._look_up_all(tx, items)
                    results = [write(tx) for write, _, _ in items]
                    self._insert_all(tx, self._later)
            except BaseException:  # one write failed: each goes again on its own
                log.debug("a batch of %d writes failed; running them one by one", len(items))
            else:
                self.batches += 1
                for (_, future, _), result in zip(items, results, strict=True):
                    future.set_result(result)
                return
            finally:
                self._later = None
                self._prefetch = None
        for write, future, _ in items:
            try:
                future.set_result(self._alone(write))
            except BaseException as err:  # the caller's to handle, whatever it is
                future.set_exception(err)

    def _look_up_all(
        self, tx: Connection, items: list[Item]
    ) -> tuple[set[Hashable], dict[Any, Any]] | None:
        keys = {key: None for _, _, lookups in items for key in lookups}  # ordered, distinct
        if self._look_up is None or not keys:
            return None
        return set(keys), self._look_up(tx, list(keys))

    @staticmethod
    def _insert_all(tx: Connection, inserts: list[tuple[Table, dict[str, Any]]]) -> None:
        """One statement per table (and set of columns), in the order they first came."""
        by_table: dict[tuple[str, tuple[str, ...]], tuple[Table, list[dict[str, Any]]]] = {}
        for table, row in inserts:
            by_table.setdefault((table.name, tuple(row)), (table, []))[1].append(row)
        for table, rows in by_table.values():
            insert_rows(tx, table, rows)

    def _alone(self, write: Callable[[Connection], T]) -> T:
        with self._transaction() as tx:
            result = write(tx)
        self.batches += 1
        return result
