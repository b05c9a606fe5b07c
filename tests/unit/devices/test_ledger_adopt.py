"""The ledger's side of evicting a running pod whose claims were allocated in an earlier cycle:
``adopt`` makes it the owner of the devices its stored claims hold, ``unreserve`` then gives
them back (what an eviction's what-if needs), and ``hold_again`` takes the very same devices
back (a discarded what-if, or a victim that keeps them until its stop is confirmed)."""

from __future__ import annotations

import pytest

from aipaas.api.devices import AllocationResult, ResourceClaim
from aipaas.devices.inventory import Inventory
from aipaas.devices.ledger import DeviceLedger
from tests.unit.devices.devices_builders import (
    CLASSES,
    allocated,
    claim,
    eight_h100,
    node_slice,
    req,
)


def stored(name: str, *devices: str) -> ResourceClaim:
    return allocated(name, "a", *devices)


def allocation(c: ResourceClaim) -> AllocationResult:
    assert c.status is not None and c.status.allocation is not None
    return c.status.allocation


def ledger(*claims: ResourceClaim) -> DeviceLedger:
    return DeviceLedger.from_claims(Inventory([node_slice("a", eight_h100())]), CLASSES, claims)


def free(book: DeviceLedger) -> list[str]:
    return sorted(f"gpu-{i}" for i in range(8) if book.in_use.is_free((_DRIVER, "a", f"gpu-{i}")))


_DRIVER = "gpu.example.com"
EIGHT = [claim("c", req("g", count=8))]
FOUR = [claim("c", req("g", count=4))]


def test_an_adopted_claim_is_freed_by_unreserve_and_taken_back_by_hold_again() -> None:
    mine = stored("mine", "gpu-0", "gpu-1", "gpu-2", "gpu-3")
    other = stored("other", "gpu-4", "gpu-5", "gpu-6", "gpu-7")
    book = ledger(mine, other)
    assert free(book) == []
    book.adopt(
        "t/j/w-0", "a", [mine.model_copy(update={"status": None})], {"mine": allocation(mine)}
    )
    freed = book.unreserve("t/j/w-0")
    assert sorted(p.device.name for p in freed) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert free(book) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert not isinstance(book.reserve("preemptor", FOUR, "a"), str)  # room for a preemptor
    book.unreserve("preemptor")
    taken = book.hold_again("t/j/w-0")
    assert taken is not None and sorted(p.device.name for p in taken) == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]
    assert free(book) == []
    assert book.hold_again("t/j/w-0") is None  # nothing given back any more
    # Owned again: the next what-if frees the same devices.
    assert len(book.unreserve("t/j/w-0")) == 4


def test_a_pod_not_adopted_frees_nothing() -> None:
    """Without ``adopt`` (a task on a node whose state is unknown) its devices stay held."""
    book = ledger(stored("mine", "gpu-0"))
    assert book.unreserve("t/j/w-0") == []
    assert "gpu-0" not in free(book)
    assert book.hold_again("t/j/w-0") is None


def test_hold_again_refuses_devices_another_pod_took_meanwhile() -> None:
    mine = stored("mine", *(f"gpu-{i}" for i in range(8)))
    book = ledger(mine)
    book.adopt("victim", "a", [mine], {"mine": allocation(mine)})
    book.unreserve("victim")
    assert not isinstance(book.reserve("preemptor", EIGHT, "a"), str)
    with pytest.raises(ValueError, match="held by preemptor"):
        book.hold_again("victim")


def test_a_shared_claim_goes_with_its_last_consumer() -> None:
    shared = stored("shared", "gpu-0", "gpu-1")
    named = shared.model_copy(
        update={"metadata": shared.metadata.model_copy(update={"uid": "t/shared"})}
    )
    book = ledger(shared)
    for owner in ("p1", "p2"):
        book.adopt(owner, "a", [named], {"shared": allocation(shared)})
    assert book.unreserve("p1") == []  # p2 still uses it
    assert "gpu-0" not in free(book)
    assert len(book.unreserve("p2")) == 2
    assert {"gpu-0", "gpu-1"} <= set(free(book))
    assert len(book.hold_again("p2") or []) == 2
    assert book.hold_again("p1") == []  # joins what p2 holds again: nothing held anew
    assert "gpu-0" not in free(book)
