"""Log followers: one watcher reads the database for all of them; followers are bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from aipaas.errors import TooManyRequests
from aipaas.server import log_watch
from aipaas.server.log_watch import JobLogs, LogWatch
from aipaas.server.logs import LogRange
from aipaas.store import TaskRecord


class Jobs:
    """The database as the watcher sees it, with its reads counted."""

    def __init__(self, tasks: Sequence[TaskRecord]) -> None:
        self.tasks = list(tasks)
        self.done = False
        self.reads = 0
        self.uids_per_read: list[int] = []

    def read(self, uids: Sequence[str]) -> dict[str, JobLogs]:
        self.reads += 1
        self.uids_per_read.append(len(uids))
        return {uid: JobLogs(self.tasks, self.done) for uid in uids}


def task(name: str, path: Path, uid: str = "job-0") -> TaskRecord:
    return TaskRecord(uid, "acme", "job", name, "w", 0, 0, log_path=str(path))


async def collect(watch: LogWatch, uid: str, window: LogRange, state: JobLogs) -> bytes:
    follower = watch.join(uid, None, window, state)
    return b"".join([chunk async for chunk in watch.stream(follower)])


def test_many_followers_cost_one_read_per_refresh(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"first\n")
    jobs = Jobs([task("w-0", log)])
    watch = LogWatch(jobs.read, max_followers=100, tick=0.01, refresh=0.05)
    followers = 40

    async def scenario() -> list[bytes]:
        state = JobLogs(jobs.tasks, False)
        running = [
            asyncio.create_task(collect(watch, f"job-{i % 4}", LogRange(1 << 20), state))
            for i in range(followers)
        ]
        await asyncio.sleep(0.2)
        with log.open("ab") as handle:
            handle.write(b"second\nthird")  # the last line still open
        await asyncio.sleep(0.2)
        jobs.done = True
        return await asyncio.wait_for(asyncio.gather(*running), 5)

    outputs = asyncio.run(scenario())
    assert outputs == [b"w-0 | first\nw-0 | second\nw-0 | third\n"] * followers
    # About 0.4 s at one read per 0.05 s, for all 40 followers together (not 40 per refresh).
    assert 3 <= jobs.reads <= 20, jobs.reads
    assert max(jobs.uids_per_read) == 4  # one read names every followed job
    assert watch.followers == 0


def test_the_follower_bound_answers_too_many_requests(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"")
    jobs = Jobs([task("w-0", log)])
    watch = LogWatch(jobs.read, max_followers=3, tick=0.01, refresh=0.02)

    async def scenario() -> None:
        state = JobLogs(jobs.tasks, False)
        running = [
            asyncio.create_task(collect(watch, "job-0", LogRange(1 << 20), state)) for _ in range(3)
        ]
        await asyncio.sleep(0.05)
        with pytest.raises(TooManyRequests, match="3 log followers"):
            watch.join("job-0", None, LogRange(1 << 20), state)
        jobs.done = True
        await asyncio.wait_for(asyncio.gather(*running), 5)
        # Those that ended made room.
        again = asyncio.create_task(collect(watch, "job-0", LogRange(1 << 20), state))
        assert await asyncio.wait_for(again, 5) == b""

    asyncio.run(scenario())


def test_a_follower_that_leaves_frees_its_place(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"x\n")
    jobs = Jobs([task("w-0", log)])
    watch = LogWatch(jobs.read, max_followers=1, tick=0.01, refresh=0.02)

    async def scenario() -> None:
        follower = watch.join("job-0", None, LogRange(1 << 20), JobLogs(jobs.tasks, False))
        stream = watch.stream(follower)
        assert await anext(stream) == b"w-0 | x\n"
        await stream.aclose()  # the client went away
        assert watch.followers == 0
        watch.join("job-0", None, LogRange(1 << 20), JobLogs(jobs.tasks, False))

    asyncio.run(scenario())


def test_a_follower_whose_stream_never_starts_is_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_watch, "START_SECONDS", 0.05)
    jobs = Jobs([task("w-0", tmp_path / "w-0.log")])
    watch = LogWatch(jobs.read, max_followers=1, tick=0.01, refresh=0.02)

    async def scenario() -> None:
        watch.join("job-0", None, LogRange(1 << 20), JobLogs(jobs.tasks, False))  # never read
        with pytest.raises(TooManyRequests):
            watch.join("job-0", None, LogRange(1 << 20), JobLogs(jobs.tasks, False))
        await asyncio.sleep(0.2)
        assert watch.followers == 0
        watch.join("job-0", None, LogRange(1 << 20), JobLogs(jobs.tasks, False))

    asyncio.run(scenario())


def test_follow_with_tail_starts_at_the_end_and_stops_at_the_byte_limit(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"".join(b"old %d\n" % i for i in range(100)))
    jobs = Jobs([task("w-0", log)])
    watch = LogWatch(jobs.read, max_followers=5, tick=0.01, refresh=0.02)

    async def scenario() -> bytes:
        follower = watch.join("job-0", None, LogRange(60, tail=2), JobLogs(jobs.tasks, False))
        running = asyncio.create_task(
            asyncio.wait_for(_drain(watch.stream(follower)), 5)  # ends at 60 bytes
        )
        await asyncio.sleep(0.05)
        with log.open("ab") as handle:
            handle.write(b"".join(b"new %d\n" % i for i in range(10)))
        return await running

    out = asyncio.run(scenario())
    assert out == b"w-0 | old 98\nw-0 | old 99\nw-0 | new 0\nw-0 | new 1\nw-0 | new "


def test_a_deleted_job_ends_its_followers_after_draining(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"a\n")
    tasks = [task("w-0", log)]
    watch = LogWatch(lambda uids: {}, max_followers=5, tick=0.01, refresh=0.02)

    async def scenario() -> bytes:
        follower = watch.join("job-0", None, LogRange(1 << 20), JobLogs(tasks, False))
        return await asyncio.wait_for(_drain(watch.stream(follower)), 5)

    assert asyncio.run(scenario()) == b"w-0 | a\n"


async def _drain(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in stream])


def test_a_notification_wakes_the_follower_without_the_periodic_read(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"a\n")
    jobs = Jobs([task("w-0", log)])
    # The periodic read once at start, then not for a minute: only a notification can end it.
    watch = LogWatch(jobs.read, max_followers=5, tick=0.01, refresh=60)

    async def scenario() -> tuple[bytes, float]:
        running = asyncio.create_task(
            collect(watch, "job-0", LogRange(1 << 20), JobLogs(jobs.tasks, False))
        )
        await asyncio.sleep(0.1)
        assert jobs.reads == 1  # the first periodic read
        jobs.done = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        # From another thread, as the controller calls it.
        await asyncio.to_thread(watch.notify, ["job-0"])
        out = await asyncio.wait_for(running, 5)
        return out, loop.time() - started

    out, took = asyncio.run(scenario())
    assert out == b"w-0 | a\n"
    assert took < 1.0, took
    assert jobs.reads == 2
    assert jobs.uids_per_read == [1, 1]


def test_notifications_for_other_jobs_wake_no_one_and_read_nothing(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"a\n")
    jobs = Jobs([task("w-0", log)])
    watch = LogWatch(jobs.read, max_followers=5, tick=10, refresh=60)

    async def scenario() -> None:
        followers = [
            watch.join(uid, None, LogRange(1 << 20), JobLogs(jobs.tasks, False))
            for uid in ("job-0", "job-1")
        ]
        streams = [watch.stream(f) for f in followers]
        for stream in streams:
            assert await anext(stream) == b"w-0 | a\n"
        pending = [asyncio.create_task(anext(s)) for s in streams]  # waiting to be woken
        await asyncio.sleep(0.05)
        reads = jobs.reads
        watch.notify(["job-7", "job-8"])
        await asyncio.sleep(0.1)
        assert jobs.reads == reads  # no database read for jobs no one follows
        assert not any(f.wake.is_set() for f in followers)
        assert not any(p.done() for p in pending)
        jobs.done = True
        watch.notify(["job-1", "job-7"])
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(pending[1], 1)
        assert jobs.reads == reads + 1 and jobs.uids_per_read[-1] == 1  # job-1 only
        # job-0's follower was not woken (its state was not read again): it still waits.
        await asyncio.sleep(0.05)
        assert not pending[0].done()
        pending[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending[0]
        await streams[0].aclose()
        assert watch.followers == 0

    asyncio.run(scenario())


def test_the_periodic_read_slows_down_while_notifications_arrive(tmp_path: Path) -> None:
    log = tmp_path / "w-0.log"
    log.write_bytes(b"")
    jobs = Jobs([task("w-0", log)])
    watch = LogWatch(jobs.read, max_followers=5, tick=0.01, refresh=0.05)

    async def scenario() -> tuple[int, int]:
        running = asyncio.create_task(
            collect(watch, "job-0", LogRange(1 << 20), JobLogs(jobs.tasks, False))
        )
        await asyncio.sleep(0.5)
        without = jobs.reads
        watch.notify(["job-9"])  # the controller of this process speaks (of another job)
        await asyncio.sleep(0.5)
        with_events = jobs.reads - without
        jobs.done = True
        watch.notify(["job-0"])
        await asyncio.wait_for(running, 5)
        return without, with_events

    without, with_events = asyncio.run(scenario())
    assert without >= 5, without  # about 10 at one read per 0.05 s
    assert with_events <= 1, with_events  # one per log_watch.EVENT_REFRESH (2 s) at most
