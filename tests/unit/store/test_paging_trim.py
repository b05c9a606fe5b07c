"""Pages of objects and events (keyed by row id), and events trimmed by age and by count."""

from __future__ import annotations

from datetime import UTC, datetime

from aipaas.api.meta import ObjectMeta
from aipaas.api.queue import Queue, QueueSpec
from aipaas.clock import VirtualClock
from aipaas.store import Store
from aipaas.store.trim import EventLimits, EventTrim, trim_events


def queue(name: str, tenant: str = "acme") -> Queue:
    return Queue(metadata=ObjectMeta(name=name, tenant=tenant), spec=QueueSpec(weight=1))


def names_of_every_page(
    store: Store, limit: int, between: int = 0, tenant: str | None = "acme"
) -> tuple[list[str], list[int]]:
    """Walk the pages; after each, create ``between`` more queues (and delete one)."""
    seen: list[str] = []
    sizes: list[int] = []
    after = 0
    made = 0
    while True:
        page = store.objects.list_page("Queue", tenant, limit=limit, after=after)
        seen.extend(q.name for q in page.items)
        sizes.append(len(page.items))
        for _ in range(between):
            store.create(queue(f"late-{made:03d}"))
            made += 1
        if page.next_after is None:
            return seen, sizes
        after = page.next_after


class TestObjectPages:
    def test_every_object_once_in_pages_of_the_limit(self, store: Store) -> None:
        for i in range(23):
            store.create(queue(f"q-{i:03d}"))
        store.create(queue("other", tenant="globex"))
        seen, sizes = names_of_every_page(store, limit=5)
        assert seen == [f"q-{i:03d}" for i in range(23)]
        assert sizes == [5, 5, 5, 5, 3]

    def test_inserts_between_pages_are_seen_once_and_nothing_twice(self, store: Store) -> None:
        for i in range(10):
            store.create(queue(f"q-{i:03d}"))
        seen, _ = names_of_every_page(store, limit=4, between=2)
        assert len(seen) == len(set(seen))
        assert {f"q-{i:03d}" for i in range(10)} <= set(seen)
        # What was inserted before the last page was read is on a page too.
        assert [n for n in seen if n.startswith("late-")] == sorted(
            n for n in seen if n.startswith("late-")
        )

    def test_remaining_count_and_the_last_page(self, store: Store) -> None:
        for i in range(7):
            store.create(queue(f"q-{i}"))
        first = store.objects.list_page("Queue", "acme", limit=3)
        assert (len(first.items), first.remaining) == (3, 4)
        assert first.next_after is not None
        last = store.objects.list_page("Queue", "acme", limit=4, after=first.next_after)
        assert (len(last.items), last.next_after, last.remaining) == (4, None, None)

    def test_a_deleted_object_does_not_disturb_the_walk(self, store: Store) -> None:
        for i in range(6):
            store.create(queue(f"q-{i}"))
        first = store.objects.list_page("Queue", "acme", limit=3)
        store.delete("Queue", "acme", "q-3")
        assert first.next_after is not None
        rest = store.objects.list_page("Queue", "acme", limit=3, after=first.next_after)
        assert [q.name for q in first.items + rest.items] == ["q-0", "q-1", "q-2", "q-4", "q-5"]


class TestEventPages:
    def test_pages_oldest_first_with_filters(self, store: Store) -> None:
        a = store.create(queue("a"))
        b = store.create(queue("b"))
        for i in range(9):
            store.record_event(a if i % 3 else b, "Said", f"m{i}")
        seen: list[str] = []
        after = 0
        while True:
            page = store.events.events_page(tenant="acme", name="a", limit=2, after=after)
            seen.extend(e.message for e in page.items)
            if page.next_after is None:
                break
            after = page.next_after
        assert seen == [f"m{i}" for i in range(9) if i % 3]


def clocked(store: Store) -> VirtualClock:
    clock = VirtualClock(datetime(2026, 3, 1, tzinfo=UTC))
    store.clock = clock
    return clock


class TestTrim:
    def test_by_age(self, store: Store) -> None:
        clock = clocked(store)
        obj = store.create(queue("a"))
        for i in range(5):
            store.record_event(obj, "Old", f"old {i}")
        clock.advance(3600)
        for i in range(3):
            store.record_event(obj, "New", f"new {i}")
        removed = trim_events(store, EventLimits(max_age_seconds=1800, max_count=1000))
        assert removed == 5
        assert [e.message for e in store.list_events()] == ["new 0", "new 1", "new 2"]

    def test_by_count_keeps_the_newest(self, store: Store) -> None:
        clocked(store)
        obj = store.create(queue("a"))
        for i in range(12):
            store.record_event(obj, "Said", f"m{i}")
        assert trim_events(store, EventLimits(max_age_seconds=1e9, max_count=4)) == 8
        assert [e.message for e in store.list_events()] == ["m8", "m9", "m10", "m11"]
        assert trim_events(store, EventLimits(max_age_seconds=1e9, max_count=4)) == 0

    def test_a_round_deletes_at_most_a_batch(self, store: Store) -> None:
        clocked(store)
        obj = store.create(queue("a"))
        for i in range(25):
            store.record_event(obj, "Said", f"m{i}")
        # Rounds of 10 until a round deletes fewer: 10 + 10 + 3.
        limits = EventLimits(max_age_seconds=1e9, max_count=2, batch=10)
        assert trim_events(store, limits) == 23
        assert len(store.list_events()) == 2

    def test_the_hook_runs_once_per_interval(self, store: Store) -> None:
        clock = clocked(store)
        obj = store.create(queue("a"))
        trim = EventTrim(store, EventLimits(max_age_seconds=1e9, max_count=1), interval=60)
        store.record_event(obj, "Said", "1")
        store.record_event(obj, "Said", "2")
        trim()
        assert len(store.list_events()) == 1
        store.record_event(obj, "Said", "3")
        clock.advance(30)
        trim()  # not yet time
        assert len(store.list_events()) == 2
        clock.advance(31)
        trim()
        assert [e.message for e in store.list_events()] == ["3"]
