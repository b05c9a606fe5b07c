"""What the entry point measures per service, and how it reaches the autoscaler.

Each server process counts, per service, the requests in flight (time-averaged over the
interval) and the requests answered per second, and writes them every ``interval`` seconds as
its own sample in the service's ServiceLoad object in the store (one object per service, one
sample per process: API servers can be many, and the controller may run in another process;
the autoscaler adds the fresh samples up). A service with nothing in flight and nothing
answered since the last write is not written again (its last sample says zero; a sample
that grows old counts as zero). A request waiting for a scaled-to-zero service wakes the
writer at once, so that the controller sees the load without waiting an interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass

from aipaas.api.meta import ObjectMeta
from aipaas.api.service import LoadSample, ServiceLoad, ServiceLoadStatus
from aipaas.errors import AlreadyExists, Conflict, NotFound
from aipaas.store import Store

log = logging.getLogger(__name__)
#: samples of other processes older than this are dropped when a process writes its own
STALE_SECONDS = 60.0

Key = tuple[str, str]  # (tenant, service)


@dataclass
class _Counter:
    in_flight: int = 0
    waiting: int = 0  # of those in flight, waiting for a ready replica
    area: float = 0.0  # in-flight x seconds since the last sample
    since: float = 0.0  # when ``area`` was last brought up to date
    answered: int = 0  # since the last sample
    total: int = 0
    reported_busy: bool = False  # the last sample written was not all zeros

    def settle(self, now: float) -> None:
        self.area += self.in_flight * (now - self.since)
        self.since = now


class LoadMeter:
    def __init__(self, store: Store, interval: float = 0.5) -> None:
        self.store = store
        self.interval = interval
        self.process = uuid.uuid4().hex[:12]
        self._counters: dict[Key, _Counter] = {}
        self._last_write = time.monotonic()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def began(self, key: Key) -> None:
        self._ensure_writer()
        now = time.monotonic()
        counter = self._counters.setdefault(key, _Counter(since=now))
        counter.settle(now)
        counter.in_flight += 1

    def ended(self, key: Key) -> None:
        counter = self._counters[key]
        counter.settle(time.monotonic())
        counter.in_flight -= 1
        counter.answered += 1
        counter.total += 1

    def wait_began(self, key: Key) -> None:
        """A request of ``key`` (already counted by ``began``) waits for a ready replica: it
        counts as demand for every metric and wakes the writer."""
        counter = self._counters.get(key)
        if counter is not None:
            counter.waiting += 1
        self.wake()

    def wait_ended(self, key: Key) -> None:
        counter = self._counters.get(key)
        if counter is not None and counter.waiting > 0:
            counter.waiting -= 1

    def waiting(self, key: Key) -> int:
        counter = self._counters.get(key)
        return counter.waiting if counter is not None else 0

    def in_flight(self, key: Key) -> int:
        counter = self._counters.get(key)
        return counter.in_flight if counter is not None else 0

    def wake(self) -> None:
        """Write now (a request waits for a replica)."""
        if self._wake is not None:
            self._wake.set()

    def _ensure_writer(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._write_forever())

    async def _write_forever(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            samples = self._take_samples()
            if samples:
                try:
                    await asyncio.to_thread(self._write, samples)
                except Exception:
                    log.exception(
                        "entry point: the load of %d services was not written", len(samples)
                    )

    def _take_samples(self) -> dict[Key, LoadSample]:
        now = time.monotonic()
        elapsed = max(now - self._last_write, 1e-3)
        self._last_write = now
        taken: dict[Key, LoadSample] = {}
        for key, counter in self._counters.items():
            counter.settle(now)
            busy = counter.in_flight > 0 or counter.answered > 0 or counter.area > 0
            if busy or counter.reported_busy:
                taken[key] = LoadSample(
                    at=time.time(),
                    in_flight=counter.in_flight,
                    waiting=counter.waiting,
                    concurrency=counter.area / elapsed,
                    rate=counter.answered / elapsed,
                    requests=counter.total,
                )
            counter.reported_busy = busy
            counter.area, counter.answered = 0.0, 0
        for key in [
            k for k, c in self._counters.items() if not c.reported_busy and not c.in_flight
        ]:
            del self._counters[key]  # quiet and reported so: made again by its next request
        return taken

    def _write(self, samples: dict[Key, LoadSample]) -> None:
        for (tenant, name), sample in samples.items():
            self._write_one(tenant, name, sample)

    def _write_one(self, tenant: str, name: str, sample: LoadSample) -> None:
        for _ in range(5):
            try:
                current = self.store.get("ServiceLoad", tenant, name)
            except NotFound:
                fresh = ServiceLoad(metadata=ObjectMeta(name=name, tenant=tenant))
                with contextlib.suppress(AlreadyExists):
                    self.store.create(fresh)
                continue
            assert isinstance(current, ServiceLoad)
            old = current.status.samples if current.status is not None else {}
            kept = {p: s for p, s in old.items() if s.at >= sample.at - STALE_SECONDS}
            kept[self.process] = sample
            try:
                self.store.update_status(
                    current,
                    ServiceLoadStatus(samples=kept),
                    expected_version=current.metadata.resource_version,
                )
                return
            except Conflict:
                continue
