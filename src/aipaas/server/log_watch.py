"""Log followers (``logs -f``): one watcher per process serves them all.

When the controller of the same process writes a cycle that changed jobs, it tells the
watcher which (``notify``, from its thread): the watcher reads those jobs at once, if they are
followed, and wakes only their followers. For processes without the controller lease (several
``--workers``), the watcher also reads every followed job once per ``refresh`` seconds for all
followers together (one read, however many follow); while notifications arrive that read is
only a fallback, made every ``EVENT_REFRESH`` seconds. Every ``tick`` seconds the followers are
woken to look at the sizes of their tasks' log files (local I/O, no database) and read only what
was appended. The number of followers is bounded: one
more is refused with 429 (TooManyRequests) rather than served slowly. So are one caller's
(``max_followers // 8``) and one tenant's (``max_followers // 2``, counted by the tenant whose
logs are followed), never fewer than ``SHARE_FLOOR`` (or the process bound, when smaller): one
caller opening followers until the bound, or one tenant's many users together, leave places
for every other tenant.

Who calls it: server/routes.py's logs route (``join``, then ``stream``); cli/control_runtime.py
wakes it when the controller wrote jobs (``notify``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from aipaas.errors import TooManyRequests
from aipaas.server.logs import (
    CHUNK,
    MAX_LINE,
    LogRange,
    chosen,
    logical_size,
    read_at,
    tail_lines,
)
from aipaas.store import TaskRecord

log = logging.getLogger("aipaas.server.logs")

READ_PER_WAKE = 4 * CHUNK  # per task and wake-up; a follower with more to read comes back
# A follower whose stream never started (its client left before the answer began: the stream's
# generator never runs, nor its cleanup) is let go after this long, so it holds no place.
START_SECONDS = 10.0
# The shared read's period while the controller's notifications arrive (they carry the changes;
# the read only covers a lost one), and how long after the last one they count as arriving.
EVENT_REFRESH = 2.0
EVENT_QUIET = 30.0
K = TypeVar("K")
#: a caller's and a tenant's share of the process's followers (divisors of max_followers)
CALLER_SHARE = 8
TENANT_SHARE = 2
#: the fewest followers a caller or a tenant may hold, however small the process bound
SHARE_FLOOR = 4


@dataclass(frozen=True)
class JobLogs:
    """What the watcher knows of a followed job."""

    tasks: Sequence[TaskRecord]
    done: bool  # finished (or deleted): followers drain the files and end


ReadJobs = Callable[[Sequence[str]], dict[str, JobLogs]]  # job uids -> those that still exist


@dataclass(eq=False)
class Follower:
    job_uid: str
    task: str | None
    window: LogRange
    state: JobLogs
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # By log path (a new attempt, a new file): offsets in the task's whole output (logs.py), so
    # that a rotation of the log's tail costs a note, not a wrong read.
    offsets: dict[str, int] = field(default_factory=dict)
    partial: dict[str, bytes] = field(default_factory=dict)
    sent: int = 0
    joined_at: float = 0.0  # the event loop's time
    started: bool = False
    caller: tuple[str, str] | None = None  # (tenant, user) of who follows (None: not counted)
    tenant: str | None = None  # whose logs (None: not counted)

    def records(self) -> list[TaskRecord]:
        return [r for r in self.state.tasks if r.log_path and self.task in (None, r.name)]


class LogWatch:
    def __init__(
        self,
        read_jobs: ReadJobs,
        *,
        max_followers: int,
        tick: float = 0.2,
        refresh: float = 1.0,
        max_per_caller: int | None = None,
        max_per_tenant: int | None = None,
    ) -> None:
        self.read_jobs = read_jobs
        self.max_followers = max_followers
        least = min(max_followers, SHARE_FLOOR)
        self.max_per_caller = max_per_caller or max(least, max_followers // CALLER_SHARE)
        self.max_per_tenant = max_per_tenant or max(least, max_followers // TENANT_SHARE)
        self._by_caller: dict[tuple[str, str], int] = {}
        self._by_tenant: dict[str, int] = {}
        self.tick = tick
        self.refresh = refresh
        self.reads = 0  # database reads made, for the tests and the curious
        self._followers: set[Follower] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._noticed: set[str] = set()  # followed jobs notified, not yet read
        self._notice = asyncio.Event()
        self._last_notice = -math.inf

    def notify(self, job_uids: Sequence[str]) -> None:
        """The controller changed these jobs: refresh them and wake their followers. Safe to
        call from any thread; nothing to do before the first follower."""
        loop = self._loop
        if loop is None:
            return
        # A closed event loop (RuntimeError): the server is stopping, no one follows.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._on_notice, frozenset(job_uids))

    def _on_notice(self, job_uids: frozenset[str]) -> None:
        self._last_notice = asyncio.get_running_loop().time()
        followed = {f.job_uid for f in self._followers} & job_uids
        if followed:
            self._noticed |= followed
            self._notice.set()

    @property
    def followers(self) -> int:
        return len(self._followers)

    def join(
        self,
        job_uid: str,
        task: str | None,
        window: LogRange,
        state: JobLogs,
        *,
        caller: tuple[str, str] | None = None,
        tenant: str | None = None,
    ) -> Follower:
        """Admit one follower of ``tenant``'s job for ``caller`` ((tenant, user)): 429 when
        the process, the caller or the tenant has no place left (None: that budget does not
        apply; the route always names both); call from the event loop."""
        if len(self._followers) >= self.max_followers:
            raise TooManyRequests(
                f"this server already serves {self.max_followers} log followers; "
                "try again later, or read without follow"
            )
        if caller is not None and self._by_caller.get(caller, 0) >= self.max_per_caller:
            raise TooManyRequests(
                f"you already follow {self.max_per_caller} logs on this server (the most one "
                "caller may); end one, or read without follow"
            )
        if tenant is not None and self._by_tenant.get(tenant, 0) >= self.max_per_tenant:
            raise TooManyRequests(
                f"tenant {tenant}'s logs already have {self.max_per_tenant} followers on this "
                "server (the most one tenant may); end one, or read without follow"
            )
        follower = Follower(job_uid, task, window, state, caller=caller, tenant=tenant)
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._notice = loop, asyncio.Event()  # an Event serves one loop
        follower.joined_at = loop.time()
        self._add(follower)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._watch())
        return follower

    async def stream(self, follower: Follower) -> AsyncGenerator[bytes, None]:
        """The follower's lines: the tail first (when asked), then what is appended, until the
        job is done and its files drained, the byte limit is reached, or the client leaves."""
        follower.started = True
        try:
            if follower.window.tail is not None:
                for out in await asyncio.to_thread(_tail_and_mark, follower):
                    yield out
            else:
                _mark_since(follower)
            while True:
                state = follower.state
                chunks, more = await asyncio.to_thread(_read_new, follower)
                for out in chunks:
                    yield out
                if follower.sent >= follower.window.limit_bytes:
                    return
                if more:
                    continue
                if state.done:
                    for out in _flush(follower):
                        yield out
                    return
                await follower.wake.wait()
                follower.wake.clear()
        finally:
            self._discard(follower)

    def _add(self, follower: Follower) -> None:
        self._followers.add(follower)
        if follower.caller is not None:
            self._by_caller[follower.caller] = self._by_caller.get(follower.caller, 0) + 1
        if follower.tenant is not None:
            self._by_tenant[follower.tenant] = self._by_tenant.get(follower.tenant, 0) + 1

    def _discard(self, follower: Follower) -> None:
        """Let a follower go and give its places back (once, whoever calls first)."""
        if follower not in self._followers:
            return
        self._followers.discard(follower)
        if follower.caller is not None:
            _give_back(self._by_caller, follower.caller)
        if follower.tenant is not None:
            _give_back(self._by_tenant, follower.tenant)

    async def _watch(self) -> None:
        last_read = -math.inf
        loop = asyncio.get_running_loop()
        while self._followers:
            for follower in [f for f in self._followers if not f.started]:
                if loop.time() - follower.joined_at > START_SECONDS:
                    self._discard(follower)
            if loop.time() - last_read >= self._refresh_period(loop.time()):
                last_read = loop.time()
                self._noticed.clear()  # the shared read covers them
                await self._refresh(sorted({f.job_uid for f in self._followers}))
            for follower in list(self._followers):
                follower.wake.set()
            await self._serve_notices(loop.time() + self.tick)

    def _refresh_period(self, now: float) -> float:
        if now - self._last_notice < EVENT_QUIET:
            return max(self.refresh, EVENT_REFRESH)
        return self.refresh

    async def _serve_notices(self, until: float) -> None:
        """Until the next tick: read the notified jobs as their notices come and wake their
        followers only."""
        loop = asyncio.get_running_loop()
        while (left := until - loop.time()) > 0:
            self._notice.clear()
            if not self._noticed:
                try:
                    await asyncio.wait_for(self._notice.wait(), left)
                except TimeoutError:
                    return
            uids, self._noticed = sorted(self._noticed), set()
            if uids:
                await self._refresh(uids)
                for follower in [f for f in self._followers if f.job_uid in uids]:
                    follower.wake.set()

    async def _refresh(self, uids: Sequence[str]) -> None:
        """Read ``uids`` (followed jobs) and give their followers what was read."""
        try:
            found = await asyncio.to_thread(self.read_jobs, uids)
        except Exception:
            log.exception("reading the followed jobs failed; trying again")
            return
        finally:
            self.reads += 1
        read = set(uids)
        for follower in [f for f in self._followers if f.job_uid in read]:
            # A deleted job is done: its followers drain what they know of and end.
            follower.state = found.get(follower.job_uid, JobLogs(follower.state.tasks, True))


def _give_back(counts: dict[K, int], key: K) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)  # no entry for who follows nothing: the dicts stay small


def _mark_since(follower: Follower) -> None:
    """With ``since``: the files of tasks not written since then are skipped to their end."""
    if follower.window.since is None:
        return
    recent = {r.log_path for r in chosen(follower.records(), follower.window.since)}
    for record in follower.records():
        assert record.log_path is not None
        if record.log_path not in recent:
            follower.offsets[record.log_path] = _size(record.log_path)


def _tail_and_mark(follower: Follower) -> list[bytes]:
    out: list[bytes] = []
    window = follower.window
    for record in chosen(follower.records(), window.since):
        assert record.log_path is not None and window.tail is not None
        end = _size(record.log_path)
        follower.offsets[record.log_path] = end
        room = window.limit_bytes - follower.sent
        for line in tail_lines(record.log_path, window.tail, room, end=end):
            if not _take(follower, record.name, line, out):
                return out
    _mark_since(follower)
    return out


def _read_new(follower: Follower) -> tuple[list[bytes], bool]:
    """What was appended to the follower's files since last time (at most READ_PER_WAKE of
    each); ``True`` as second value when some file has more."""
    out: list[bytes] = []
    more = False
    for record in follower.records():
        path = record.log_path
        assert path is not None
        offset = follower.offsets.get(path, 0)
        size = _size(path)
        if size <= offset:
            continue
        data, after = read_at(path, offset, min(READ_PER_WAKE, size - offset))
        follower.offsets[path] = after
        more = more or after < size
        *complete, rest = (follower.partial.pop(path, b"") + data).split(b"\n")
        if len(rest) >= MAX_LINE:
            complete.append(rest)
            rest = b""
        if rest:
            follower.partial[path] = rest
        for line in complete:
            if not _take(follower, record.name, line, out):
                return out, False
    return out, more


def _flush(follower: Follower) -> list[bytes]:
    out: list[bytes] = []
    names = {r.log_path: r.name for r in follower.records()}
    for path, rest in follower.partial.items():
        if not _take(follower, names.get(path, "?"), rest, out):
            break
    follower.partial.clear()
    return out


def _take(follower: Follower, name: str, line: bytes, out: list[bytes]) -> bool:
    """Add one line to ``out`` if the byte limit allows (else mark the follower full)."""
    text = f"{name} | ".encode() + line + b"\n"
    room = follower.window.limit_bytes - follower.sent
    if len(text) >= room:
        if room > 0:
            out.append(text[:room])  # the last line may be cut short, as in logs.read
        follower.sent = follower.window.limit_bytes
        return False
    follower.sent += len(text)
    out.append(text)
    return True


def _size(path: str) -> int:
    return logical_size(path)
