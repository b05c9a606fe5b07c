"""Watching: the API's streams (tenant isolation, resume, a revoked token), the SDK's watch()
and follow_events(), `aipaas get -w` and `aipaas events -f`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from datetime import timedelta
from typing import Any

import httpx
import pytest

from aipaas.errors import InvalidObject, NotFound, TooManyRequests, Unauthenticated
from aipaas.server import watch_stream
from tests.unit.cli.cli_world import World, job_yaml


def later(seconds: float, *actions: Callable[[], object]) -> threading.Thread:
    """Run the actions in order after ``seconds``, in a thread (as the controller would), a
    few of the server's reads apart (changes between two reads come as the last state)."""

    def run() -> None:
        time.sleep(seconds)
        for action in actions:
            action()
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _STARTED.append(thread)
    return thread


_STARTED: list[threading.Thread] = []
Change = tuple[str, str | None]
#: a watch's own limit in these tests: reading stops at the last change awaited, long before
WATCH_SECONDS = 60.0


def open_streams(world: World) -> int:
    return int(getattr(getattr(world.app.state, "watch_streams", None), "open", 0))


def streaming(world: World) -> int:
    """Streams past their first state: a change now is a change the watch reports (a stream
    only admitted may still be reading its first state, which would hold the change)."""
    return int(getattr(getattr(world.app.state, "watch_streams", None), "streaming", 0))


def when_watching(world: World, *actions: Callable[[], object]) -> threading.Thread:
    """The actions in order (as ``later``), once the server streams the next watch's first
    state (a loaded machine may take a while to open it: a change made before would be part
    of that state). Call it before the watch opens, with no other stream open."""
    deadline = time.monotonic() + WATCH_SECONDS
    while open_streams(world):  # a watch that ended may be closing still
        assert time.monotonic() < deadline, "a watch stream stayed open"
        time.sleep(0.01)

    def run() -> None:
        while not streaming(world) and time.monotonic() < deadline:
            time.sleep(0.01)
        for action in actions:
            action()
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _STARTED.append(thread)
    return thread


def drive(
    stream: Iterator[dict[str, Any]], steps: Sequence[tuple[Callable[[], object], Change]]
) -> list[Change]:
    """The changes a watch opened with ``bookmarks=True`` reports: once its first state is in
    (its first bookmark), each step's action is done and the watch read until the step's change
    comes, then the next step: no two changes can be read as one, however slow the machine.
    Reading stops after the last step's change (or at the watch's own timeout)."""
    seen: list[Change] = []
    todo = list(steps)
    started = False
    awaited: Change | None = None
    mark = 0
    for event in stream:
        if event["type"] == "BOOKMARK":
            started = True
        else:
            seen.append((event["type"], event["object"]["metadata"].get("name")))
        if not started or (awaited is not None and awaited not in seen[mark:]):
            continue
        if not todo:
            break
        action, awaited = todo.pop(0)
        mark = len(seen)
        action()
    if isinstance(stream, Generator):
        stream.close()
    return seen


@pytest.fixture(autouse=True)
def _actions_end_before_the_server(world: World) -> Iterator[None]:
    yield
    while _STARTED:
        _STARTED.pop().join(10)


def changes(stream: Any) -> list[tuple[str, str | None]]:
    return [(e["type"], e["object"]["metadata"].get("name")) for e in stream]


class TestWatchStream:
    def test_first_state_then_changes_in_order(self, world: World) -> None:
        admin = world.client()
        admin.apply(job_yaml("a"))
        stream = admin.watch("jobs", tenant="acme", timeout=WATCH_SECONDS, bookmarks=True)
        seen = drive(
            stream,
            [
                (lambda: world.set_status("Job", "acme", "a", phase="Running"), ("MODIFIED", "a")),
                (lambda: admin.apply(job_yaml("b")), ("ADDED", "b")),
                (
                    lambda: world.set_status("Job", "acme", "a", phase="Succeeded"),
                    ("MODIFIED", "a"),
                ),
                (lambda: admin.delete("job", "a", "acme"), ("DELETED", "a")),
            ],
        )
        assert seen[0] == ("ADDED", "a")
        assert ("ADDED", "b") in seen and seen[-1] == ("DELETED", "a")
        assert seen.count(("MODIFIED", "a")) >= 1

    def test_one_name(self, world: World) -> None:
        admin = world.client()
        admin.apply(job_yaml("a"))

        def b_then_a_runs() -> None:  # b, were it seen, would come before a's change
            admin.apply(job_yaml("b"))
            world.set_status("Job", "acme", "a", phase="Running")

        stream = admin.watch("job", "a", "acme", timeout=WATCH_SECONDS, bookmarks=True)
        seen = drive(stream, [(b_then_a_runs, ("MODIFIED", "a"))])
        assert {name for _, name in seen} == {"a"}
        assert seen == [("ADDED", "a"), ("MODIFIED", "a")]

    def test_a_tenant_sees_only_its_own(self, world: World) -> None:
        admin = world.client()

        def ours_then_theirs() -> None:  # ours, were it seen, would come before theirs
            admin.apply(job_yaml("ours"))
            admin.apply(job_yaml("theirs", tenant="rival"))

        stream = world.client(world.rick).watch("jobs", timeout=WATCH_SECONDS, bookmarks=True)
        seen = drive(stream, [(ours_then_theirs, ("ADDED", "theirs"))])
        assert seen == [("ADDED", "theirs")]
        # Naming the other tenant, or watching its users, is as if they did not exist.
        with pytest.raises(NotFound):
            list(world.client(world.rick).watch("jobs", tenant="acme", timeout=1.0))
        users = changes(world.client(world.rick).watch("users", timeout=0.5))
        assert {name for _, name in users} <= {"rick"}
        queues = changes(world.client(world.alice).watch("queues", timeout=0.5))
        assert sorted(name or "" for _, name in queues) == ["batch", "research"]

    def test_no_token_and_a_revoked_token(self, world: World) -> None:
        with pytest.raises(Unauthenticated):
            list(world.client("wrong").watch("jobs", timeout=0.5))
        admin = world.client()
        token = admin.create_token("alice", "acme", name="short")
        stream = world.client(token["token"]).watch("jobs", timeout=120.0)
        thread = later(
            0.3, lambda: admin.revoke_token(token["id"]), lambda: admin.apply(job_yaml("x"))
        )
        started = time.monotonic()
        with pytest.raises(Unauthenticated):
            for change in stream:
                assert change["object"]["metadata"]["tenant"] == "acme"
        assert time.monotonic() - started < 60  # ended at once, not at the timeout (120 s)
        thread.join()

    @pytest.mark.parametrize("database", ["sqlite", "postgresql"])
    def test_resume_from_a_bookmark(
        self, database: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        world: World = request.getfixturevalue("world" if database == "sqlite" else "pg_world")
        monkeypatch.setattr(watch_stream, "OVERLAP", timedelta(milliseconds=200))
        admin = world.client()
        admin.apply(job_yaml("kept"))
        admin.apply(job_yaml("gone"))
        admin.apply(job_yaml("old"))
        world.set_status("Job", "acme", "gone", phase="Succeeded")
        time.sleep(0.3)  # all of that before the bookmark's overlap
        first = list(admin.watch("jobs", tenant="acme", timeout=0.5, bookmarks=True))
        cursor = [e for e in first if e["type"] == "BOOKMARK"][-1]["object"]["metadata"][
            "resourceVersion"
        ]
        time.sleep(0.3)  # past the overlap a resumed watch looks back
        # While nobody watches: one job changes, one is made, one is deleted.
        world.set_status("Job", "acme", "kept", phase="Running")
        admin.apply(job_yaml("new"))
        admin.delete("job", "gone", "acme")
        resumed = changes(admin.watch("jobs", tenant="acme", resource_version=cursor, timeout=0.5))
        assert sorted(resumed) == [("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "kept")]

    def test_a_bookmark_not_given_out_is_refused(self, world: World) -> None:
        with pytest.raises(InvalidObject) as caught:
            list(world.client().watch("jobs", tenant="acme", resource_version="12", timeout=1))
        assert caught.value.fields[0].path == "resourceVersion"

    def test_a_bounded_number_of_streams(self, world: World) -> None:
        world.app.state.watch_max_streams = 1
        # open for the checks below however slow the machine (then read to its end)
        first = world.client().watch("jobs", tenant="acme", timeout=10.0, bookmarks=True)
        assert next(first)["type"] == "BOOKMARK"  # open: it holds the one place
        with pytest.raises(TooManyRequests):
            list(world.client().watch("jobs", tenant="acme", timeout=1.0))
        assert world.cli("get", "jobs", "-t", "acme", "-w", "--timeout", "1s").exit_code == 1
        list(first)  # ends at its timeout, and gives its place back
        assert list(world.client().watch("jobs", tenant="acme", timeout=0.3)) == []

    def test_unknown_kind(self, world: World) -> None:
        answer = httpx.get(
            f"{world.url}/api/v1/watch/gizmos", headers={"Authorization": "Bearer cli-admin-token"}
        )
        assert answer.status_code == 404


class TestEventStream:
    @pytest.mark.parametrize("database", ["sqlite", "postgresql"])
    def test_follow_events_of_a_tenant_only(
        self, database: str, request: pytest.FixtureRequest
    ) -> None:
        world: World = request.getfixturevalue("world" if database == "sqlite" else "pg_world")
        admin = world.client()
        admin.apply(job_yaml("a"))
        later(
            0.3,
            lambda: admin.cancel("a", "acme"),
            lambda: admin.apply(job_yaml("r", tenant="rival")),
            lambda: admin.apply(job_yaml("last")),  # after rival's: the end of what is read
        )
        seen = []
        for event in world.client(world.alice).follow_events(timeout=WATCH_SECONDS):
            seen.append(event)
            if event["name"] == "last":
                break
        assert {e["tenant"] for e in seen} == {"acme"}
        reasons = [(e["name"], e["reason"]) for e in seen]
        assert ("a", "CancelRequested") in reasons
        ids = [e["id"] for e in seen]
        assert ids == sorted(set(ids))
        rest = list(world.client(world.alice).follow_events(after=ids[0], timeout=0.3))
        assert [e["id"] for e in rest] == ids[1:]
        with pytest.raises(NotFound):
            list(world.client(world.rick).follow_events(tenant="acme", timeout=0.3))


class TestCliWatch:
    def test_get_w_prints_the_table_then_rows_as_they_change(self, world: World) -> None:
        admin = world.client()
        admin.apply(job_yaml("a"))
        when_watching(world, lambda: world.set_status("Job", "acme", "a", phase="Running"))
        out = world.ok("get", "jobs", "-t", "acme", "-w", "--timeout", "5s")
        lines = out.splitlines()
        assert lines[0].split()[:4] == ["NAME", "TENANT", "QUEUE", "PHASE"]
        assert lines[1].split()[3] == "Pending"
        assert lines[-1].split()[3] == "Running"

    def test_get_w_with_events_and_a_filter_and_name_output(self, world: World) -> None:
        admin = world.client()
        admin.apply(job_yaml("a"))
        when_watching(world, lambda: admin.apply(job_yaml("b", queue="batch")))
        out = world.ok(
            "get", "jobs", "-t", "acme", "-w", "--output-watch-events", "--queue", "batch",
            "--timeout", "5s",
        )  # fmt: skip
        lines = out.splitlines()
        assert lines[0].split()[:2] == ["EVENT", "NAME"]
        assert [line.split()[:2] for line in lines[1:]] == [["ADDED", "b"]]
        when_watching(world, lambda: admin.apply(job_yaml("c")))
        out = world.ok("get", "jobs", "-t", "acme", "--watch-only", "-o", "name", "--timeout", "5s")
        assert out.split() == ["job/c"]

    def test_events_f(self, world: World) -> None:
        admin = world.client()
        admin.apply(job_yaml("a"))
        when_watching(world, lambda: admin.cancel("a", "acme"))
        out = world.ok("events", "job/a", "-t", "acme", "-f", "--timeout", "5s")
        lines = out.splitlines()
        assert lines[0].split()[:2] == ["TIME", "OBJECT"]
        assert any("CancelRequested" in line for line in lines[1:])
        missing = world.cli("events", "job/nope", "-t", "acme", "-f", "--timeout", "1s")
        assert missing.exit_code == 3
