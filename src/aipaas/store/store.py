"""The store: one database behind repositories, one per table (objects with resourceVersion
CAS, events, tokens; task records and the usage ledger are store/tasks.py and ledger.py).

``Store`` owns the engine, the clock, transactions and the group commit, and holds the
repositories as ``store.objects``, ``store.events`` and ``store.tokens``. Its methods of the
repositories' names are a thin facade over them, kept for the many callers written before the
split; new code reaches the repositories. All SQL of the project lives in store/.

Who calls it: the server (desired state), the controller (status, events). Synchronous and
thread-safe (one short transaction per call); never holds a transaction across I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, text

from aipaas.api.event import Event
from aipaas.api.meta import Object
from aipaas.clock import Clock, SystemClock
from aipaas.store.batch import GroupCommit
from aipaas.store.database import make_engine, migrate
from aipaas.store.events import EventRepository
from aipaas.store.objects import ObjectRepository
from aipaas.store.rows import ObjectKey, to_object
from aipaas.store.tokens import TokenRecord, TokenRepository
from aipaas.store.writers import WriterQueue

__all__ = ["ObjectKey", "Store", "TokenRecord", "row_object"]

T = TypeVar("T")

#: the object of a row of the objects table read elsewhere in store/ (store/changes.py)
row_object = to_object


class Store:
    """The database of every object, event and token. Tenant "" holds cluster-wide kinds."""

    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock = clock or SystemClock()  # read at each write: tests set it afterwards
        self._writers = WriterQueue.for_engine(engine)
        self._group_commit = GroupCommit(self.transaction, look_up=self._find_each_now)
        self.objects = ObjectRepository(self)
        self.events = EventRepository(self)
        self.tokens = TokenRepository(self)

    _find_each_now = staticmethod(ObjectRepository.find_each_now)

    @property
    def group_commit(self) -> GroupCommit:
        """Where ``write_together`` batches writes (store/batch.py)."""
        return self._group_commit

    @classmethod
    def open(cls, url: str, clock: Clock | None = None) -> Store:
        engine = make_engine(url)
        migrate(engine)
        return cls(engine, clock)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Connection]:
        with (
            self._writers.turn() if write else nullcontext(),
            self.engine.connect().execution_options(immediate=write) as conn,
            conn.begin(),
        ):
            yield conn

    def write_together(
        self, write: Callable[[Connection], T], lookups: Sequence[ObjectKey] = ()
    ) -> T:
        """Run ``write`` in a transaction shared with the writes of other threads waiting now
        (group commit, see batch.py); it must touch nothing but the connection it is given.
        ``lookups``: the keys it will ask ``find_each``, asked for the whole batch at once;
        a write that names them must change nothing but with ``later=True`` inserts."""
        return self._group_commit.run(write, lookups)

    async def write_together_async(
        self, write: Callable[[Connection], T], lookups: Sequence[ObjectKey] = ()
    ) -> T:
        """``write_together`` for a coroutine: it waits without holding a thread."""
        return await asyncio.wrap_future(self._group_commit.submit(write, lookups))

    def ping(self) -> None:
        """Raise unless the database answers a query (the server's readiness)."""
        with self.transaction(write=False) as conn:
            conn.execute(text("SELECT 1"))

    def close(self) -> None:
        self._group_commit.close()
        self._writers.close()
        self.engine.dispose()

    # objects: store.objects (objects.py) ---------------------------------------

    def create(self, obj: Object, *, conn: Connection | None = None, later: bool = False) -> Object:
        return self.objects.create(obj, conn=conn, later=later)

    def get(self, kind: str, tenant: str, name: str, *, conn: Connection | None = None) -> Object:
        return self.objects.get(kind, tenant, name, conn=conn)

    def find(
        self, kind: str, tenant: str, name: str, *, conn: Connection | None = None
    ) -> Object | None:
        return self.objects.find(kind, tenant, name, conn=conn)

    def find_each(self, keys: Sequence[ObjectKey], *, conn: Connection) -> dict[ObjectKey, Object]:
        return self.objects.find_each(keys, conn=conn)

    def list_objects(
        self,
        kind: str,
        tenant: str | None = None,
        *,
        phases: Sequence[str] | None = None,
        exclude_phases: Sequence[str] | None = None,
    ) -> list[Object]:
        return self.objects.list_objects(kind, tenant, phases=phases, exclude_phases=exclude_phases)

    def count(self, kind: str, tenant: str | None = None) -> int:
        return self.objects.count(kind, tenant)

    def kind_marks(self, kinds: Sequence[str]) -> dict[str, tuple[object, ...]]:
        return self.objects.kind_marks(kinds)

    def count_by_phase(self, kind: str) -> dict[str, int]:
        return self.objects.count_by_phase(kind)

    def update(self, obj: Object, *, expected_version: str | None = None) -> Object:
        return self.objects.update(obj, expected_version=expected_version)

    def update_status(
        self,
        obj: Object,
        status: Any,
        *,
        expected_version: str | None = None,
        conn: Connection | None = None,
    ) -> Object:
        return self.objects.update_status(obj, status, expected_version=expected_version, conn=conn)

    def write_statuses(self, changes: Sequence[tuple[Object, Any]], *, conn: Connection) -> None:
        return self.objects.write_statuses(changes, conn=conn)

    def write_status(self, obj: Object, status: Any, *, conn: Connection) -> None:
        return self.objects.write_status(obj, status, conn=conn)

    def delete(self, kind: str, tenant: str, name: str, *, conn: Connection | None = None) -> None:
        return self.objects.delete(kind, tenant, name, conn=conn)

    # events: store.events (events.py) ------------------------------------------

    def record_events(
        self, events: Sequence[tuple[Object, str, str, bool]], *, conn: Connection
    ) -> None:
        return self.events.record_events(events, conn=conn)

    def record_event(
        self,
        obj: Object,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        conn: Connection | None = None,
        later: bool = False,
    ) -> None:
        return self.events.record_event(
            obj, reason, message, warning=warning, conn=conn, later=later
        )

    def list_events(
        self,
        *,
        tenant: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        uid: str | None = None,
        limit: int = 1000,
    ) -> list[Event]:
        return self.events.list_events(tenant=tenant, kind=kind, name=name, uid=uid, limit=limit)
