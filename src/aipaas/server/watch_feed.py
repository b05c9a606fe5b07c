"""The watch streams' change feed: one reader per kind in each API process, shared by every
stream of that kind, instead of each stream re-listing its objects every half second.

Called by server/watch_routes.py: a stream subscribes after its first list and receives
batches; it filters them for its caller (server/watch_stream.py). While a kind has
subscribers, its reader reads every ``poll`` seconds the objects updated since its last read
(an index on kind and update time: a read costs the changes, not the table) and the kind's
uids (one index column: deletions are the uids gone since the last read, whatever deleted
them). A write's update time is taken before it commits, so each read looks ``OVERLAP`` back;
streams drop what they already sent (same resourceVersion).

A stream that does not take its batches (its client reads slower than objects change) is cut
off with an error once ``BACKLOG`` batches wait for it; it resumes from its last bookmark, as
a Kubernetes watch does after "too old".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aipaas.api.meta import Object
from aipaas.store import Store, changes

log = logging.getLogger(__name__)
OVERLAP = timedelta(seconds=5)
#: batches that may wait for one stream before it is cut off
BACKLOG = 64


@dataclass(frozen=True)
class Batch:
    """What changed in one read: objects updated (possibly again) and uids gone."""

    changed: list[Object]
    deleted: frozenset[str]
    at: datetime  # the store's time before the read: a bookmark for what this batch holds


class Lagging(Exception):
    """The stream fell ``BACKLOG`` batches behind."""


@dataclass(eq=False)  # each subscription is its own: kept in sets by identity
class Subscription:
    queue: asyncio.Queue[Batch | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=BACKLOG)
    )

    async def next(self, timeout: float) -> Batch | None:
        """The next batch, or None when none came within ``timeout``.

        Raises:
            Lagging: the feed cut this stream off.
        """
        try:
            batch = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        if batch is None:
            raise Lagging
        return batch


@dataclass
class _KindFeed:
    store: Store
    kind: str
    poll: float
    subscribers: set[Subscription] = field(default_factory=set)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        cursor = self.store.clock.now() - OVERLAP
        uids = await asyncio.to_thread(changes.uids_of, self.store, self.kind)
        while self.subscribers:
            await asyncio.sleep(self.poll)
            try:
                at = self.store.clock.now()
                found, newest = await asyncio.to_thread(
                    changes.changed_since, self.store, self.kind, cursor - OVERLAP
                )
                now_uids = await asyncio.to_thread(changes.uids_of, self.store, self.kind)
            except Exception:
                log.exception("watch feed of %s: a read failed; trying again", self.kind)
                continue
            cursor = max(cursor, newest)
            batch = Batch(found, frozenset(uids - now_uids), at)
            uids = now_uids
            for subscription in list(self.subscribers):
                try:
                    subscription.queue.put_nowait(batch)
                except asyncio.QueueFull:
                    self.subscribers.discard(subscription)
                    with contextlib.suppress(asyncio.QueueEmpty):
                        subscription.queue.get_nowait()
                    subscription.queue.put_nowait(None)


@dataclass
class ChangeFeed:
    """The readers of one API process, started with the first subscriber of a kind and ended
    with its last."""

    store: Store
    poll: float
    _kinds: dict[str, _KindFeed] = field(default_factory=dict)

    def subscribe(self, kind: str) -> Subscription:
        feed = self._kinds.get(kind)
        if feed is None or feed.task is None or feed.task.done():
            feed = self._kinds[kind] = _KindFeed(self.store, kind, self.poll)
        subscription = Subscription()
        feed.subscribers.add(subscription)
        if feed.task is None:
            feed.task = asyncio.get_running_loop().create_task(feed.run())
        return subscription

    def unsubscribe(self, kind: str, subscription: Subscription) -> None:
        feed = self._kinds.get(kind)
        if feed is not None:
            feed.subscribers.discard(subscription)
