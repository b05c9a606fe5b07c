"""The controller lease on SQLite and PostgreSQL: one live holder; expiry and dead holders."""

from __future__ import annotations

import os
import socket

import pytest

from aipaas.clock import VirtualClock
from aipaas.store import Store
from aipaas.store.lease import Lease, LeaseLost


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


def test_the_fencing_token_rises_on_each_takeover_only(store: Store) -> None:
    clock = VirtualClock()
    store.clock = clock
    first = Lease(store, "elsewhere:1:a", ttl=10)
    second = Lease(store, "elsewhere:2:b", ttl=10)
    assert first.acquire() and first.token == 1
    clock.advance(5)
    assert first.acquire() and first.token == 1  # a renewal keeps it
    clock.advance(11)
    assert second.acquire() and second.token == 2  # a takeover raises it
    assert not first.acquire() and first.token is None
    second.release()
    assert first.acquire() and first.token == 3  # the same holder again, after another


def test_a_fenced_write_is_refused_after_a_takeover(store: Store) -> None:
    clock = VirtualClock()
    store.clock = clock
    first = Lease(store, "elsewhere:1:a", ttl=10)
    second = Lease(store, "elsewhere:2:b", ttl=10)
    assert first.acquire()
    clock.advance(8)
    with store.transaction() as tx:
        first.fence(tx)  # still ours: renewed for another ttl
    clock.advance(8)
    assert not second.acquire()  # the fenced write renewed it
    clock.advance(3)
    assert second.acquire()
    lost = pytest.raises(LeaseLost, match="fencing: elsewhere:1:a lost the controller lease")
    with lost, store.transaction() as tx:
        first.fence(tx)
    assert first.token is None
    with pytest.raises(LeaseLost, match="does not hold"), store.transaction() as tx:
        first.fence(tx)


def test_an_expired_lease_refuses_its_holder_even_before_a_takeover(store: Store) -> None:
    clock = VirtualClock()
    store.clock = clock
    lease = Lease(store, "elsewhere:1:a", ttl=10)
    assert lease.acquire()
    clock.advance(11)  # nobody took it, but another may be about to
    with pytest.raises(LeaseLost), store.transaction() as tx:
        lease.fence(tx)
