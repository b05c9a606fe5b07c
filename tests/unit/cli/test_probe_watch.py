"""An attacker's probe of the watch streams: a member of one tenant who opens streams until the
server refuses more must not have shut the other tenants out of theirs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from aipaas.client import Client
from aipaas.errors import TooManyRequests
from tests.unit.cli.cli_world import World


def opened(client: Client, plural: str = "jobs") -> Iterator[dict[str, Any]]:
    """A stream whose first line has come (it holds its place from then on, for long enough
    that the checks made meanwhile see it open on a loaded machine)."""
    stream = client.watch(plural, timeout=8.0, bookmarks=True)
    assert next(stream)["type"] == "BOOKMARK"
    return stream


def test_one_caller_cannot_take_every_stream(world: World) -> None:
    world.app.state.watch_max_streams = 4
    world.app.state.watch_max_streams_per_caller = 2
    with Client(world.url, world.alice) as alice, Client(world.url, world.rick) as rick:
        held = []
        with pytest.raises(TooManyRequests) as refused:
            for _ in range(4):
                held.append(opened(alice))
        assert len(held) == 2 and "alice" in str(refused.value)
        # The event stream counts against the same share.
        events = httpx.get(
            f"{world.url}/api/v1/watch/events",
            params={"timeoutSeconds": 1},
            headers={"Authorization": f"Bearer {world.alice}"},
        )
        assert events.status_code == 429, events.text
        theirs = opened(rick)  # another tenant's member still watches
        for stream in [*held, theirs]:
            list(stream)  # each ends at its timeout and gives its place back
        assert list(alice.watch("jobs", timeout=0.3)) == []
