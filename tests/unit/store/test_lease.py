"""The controller lease on SQLite and PostgreSQL: one live holder; expiry and dead holders."""

from __future__ import annotations

import os
import socket

from aipaas.clock import VirtualClock
from aipaas.store import Store
from aipaas.store.lease import Lease


def test_one_holder_until_expiry(store: Store) -> None:
    clock = VirtualClock()
    store.clock = clock
    first = Lease(store, "elsewhere:1:a", ttl=10)
    second = Lease(store, "elsewhere:2:b", ttl=10)
    assert first.acquire()
    assert not second.acquire()
    clock.advance(5)
    assert first.acquire()  # renewed
    clock.advance(9)
    assert not second.acquire()
    clock.advance(2)
    assert second.acquire()  # first stopped renewing
    assert not first.acquire()
    assert first.holder_now() == "elsewhere:2:b"


def test_release_hands_over(store: Store) -> None:
    first = Lease(store, "elsewhere:1:a")
    second = Lease(store, "elsewhere:2:b")
    assert first.acquire()
    first.release()
    assert second.acquire()


def test_a_dead_process_on_this_host_is_not_waited_for(store: Store) -> None:
    dead_pid = 2**22 + 12345  # above pid_max on common systems: no such process
    ghost = Lease(store, f"{socket.gethostname()}:{dead_pid}:x", ttl=3600)
    assert ghost.acquire()
    alive = Lease(store, f"{socket.gethostname()}:{os.getpid()}:y", ttl=3600)
    assert alive.acquire()
    assert not ghost.acquire()
    assert ghost.holder_now() == alive.holder
