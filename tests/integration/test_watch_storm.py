"""Watch streams under a storm from one tenant, through a real server: its viewers' streams
must not slow another tenant's lists (they take one change feed instead of re-listing every
object each half second), and streams opened all at once must still meet the per-caller and
per-tenant bounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from aipaas.server.watch_routes import MAX_STREAMS_PER_CALLER, MAX_STREAMS_PER_TENANT
from tests.support.server_process import ADMIN, ServerProcess

JOBS = 1000
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: acme}
---
apiVersion: aipaas/v1
kind: Tenant
metadata: {name: globex}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: acme}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: research, tenant: globex}
---
apiVersion: aipaas/v1
kind: User
metadata: {name: alice, tenant: acme}
spec: {role: viewer}
"""
VIEWER = """---
apiVersion: aipaas/v1
kind: User
metadata: {{name: {name}, tenant: globex}}
spec: {{role: viewer}}
"""
JOB = """---
apiVersion: aipaas/v1
kind: Job
metadata: {{name: j{index}, tenant: {tenant}}}
spec:
  queue: research
  tasks: [{{name: main, command: ["true"]}}]
"""
GLOBEX_VIEWERS = ("v1", "v2", "v3")


@dataclass
class World:
    server: ServerProcess
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data: Path = tmp_path_factory.mktemp("watch-storm") / "data"
    server = ServerProcess(data, backend="sim", extra=["--no-controller"]).start()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        with httpx.Client(base_url=server.url, timeout=120, headers=admin) as http:
            text = SETUP + "".join(VIEWER.format(name=n) for n in GLOBEX_VIEWERS)
            assert http.post("/api/v1/apply", content=text).status_code == 200
            for tenant, count in (("globex", JOBS), ("acme", 50)):
                jobs = "".join(JOB.format(index=i, tenant=tenant) for i in range(count))
                answer = http.post("/api/v1/apply", content=jobs)
                assert answer.status_code == 200, answer.text[:300]
            tokens = {}
            for user, tenant in [("alice", "acme")] + [(v, "globex") for v in GLOBEX_VIEWERS]:
                made = http.post("/api/v1/tokens", json={"user": user, "tenant": tenant})
                assert made.status_code == 201, made.text
                tokens[user] = made.json()["token"]
        yield World(server, tokens)
    finally:
        server.stop()


def _list_seconds(world: World, times: int) -> list[float]:
    took = []
    auth = {"Authorization": f"Bearer {world.tokens['alice']}"}
    with httpx.Client(base_url=world.server.url, timeout=60, headers=auth) as http:
        for _ in range(times):
            began = time.monotonic()
            answer = http.get("/api/v1/jobs")
            assert answer.status_code == 200, answer.text
            took.append(time.monotonic() - began)
    return took


async def _open_streams(
    client: httpx.AsyncClient, token: str, count: int
) -> tuple[list[httpx.Response], list[int]]:
    """Opens ``count`` job streams at once; the open ones and the codes of those refused."""
    auth = {"Authorization": f"Bearer {token}"}

    async def one() -> httpx.Response:
        request = client.build_request(
            "GET", "/api/v1/watch/jobs", params={"timeoutSeconds": 120}, headers=auth
        )
        return await client.send(request, stream=True)

    answers = await asyncio.gather(*[one() for _ in range(count)])
    opened = [a for a in answers if a.status_code == 200]
    refused = [a.status_code for a in answers if a.status_code != 200]
    for answer in answers:
        if answer.status_code != 200:
            await answer.aclose()
    return opened, refused


def _server_resources(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kib": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def test_streams_opened_at_once_meet_the_callers_bound(world: World) -> None:
    async def burst() -> tuple[int, list[int]]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=world.server.url, timeout=60, limits=limits) as c:
            opened, refused = await _open_streams(c, world.tokens["v1"], MAX_STREAMS_PER_CALLER + 8)
            for answer in opened:
                await answer.aclose()
            return len(opened), refused

    opened, refused = asyncio.run(burst())
    assert opened == MAX_STREAMS_PER_CALLER
    assert refused == [429] * 8


def test_one_tenants_watch_storm_does_not_slow_another_tenants_lists(world: World) -> None:
    """globex's viewers open every stream they may (the tenant's bound, over two callers; a
    third caller is refused) on a kind with a thousand of its objects; acme's list of its jobs
    stays as fast as without them. Before the change feed each stream re-listed its thousand
    jobs every half second (96 streams took another tenant's lists to 13 s)."""
    assert world.server.process is not None
    pid = world.server.process.pid
    quiet = _list_seconds(world, 10)
    before = _server_resources(pid)

    async def storm() -> tuple[list[float], list[int], dict[str, int]]:
        limits = httpx.Limits(max_connections=300)
        async with httpx.AsyncClient(base_url=world.server.url, timeout=60, limits=limits) as c:
            opened: list[httpx.Response] = []
            for viewer in ("v1", "v2"):
                mine, refused = await _open_streams(
                    c, world.tokens[viewer], MAX_STREAMS_PER_CALLER
                )
                assert refused == []
                opened += mine
            third, refused = await _open_streams(c, world.tokens["v3"], 4)
            assert third == [] and refused == [429] * 4  # the tenant's bound is reached
            assert len(opened) == MAX_STREAMS_PER_TENANT
            await asyncio.sleep(3)  # several of the streams' reads go by
            took = await asyncio.to_thread(_list_seconds, world, 10)
            during = _server_resources(pid)
            for answer in opened:
                await answer.aclose()
            return took, refused, during

    took, _, during = asyncio.run(storm())
    print(
        f"acme's list p50 quiet {statistics.median(quiet):.3f}s, "
        f"under globex's {MAX_STREAMS_PER_TENANT} streams {statistics.median(took):.3f}s "
        f"(max {max(took):.3f}s); server before {before}, during {during}"
    )
    assert statistics.median(took) < statistics.median(quiet) * 3 + 0.2, (quiet, took)
    assert max(took) < 2.0, took
