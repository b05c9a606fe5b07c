"""The ledger answers a pod shape's fit once per state of a node (``DeviceLedger._fit`` keyed
on ``InUse.stamp``, its reasons in ``_reason``), and keeps each shape's answers for every node
up to date from the nodes that changed (``_fits_on``): every answer must be what a ledger with
no cache would give, whatever was held and given back in between."""

from __future__ import annotations

import random

from aipaas.api.devices import ResourceClaim
from aipaas.devices.inventory import Inventory
from aipaas.devices.ledger import DeviceLedger
from tests.unit.devices.devices_builders import CLASSES, claim, eight_h100, node_slice, req

NODES = ["a", "b", "c"]


def _ledger() -> DeviceLedger:
    return DeviceLedger(Inventory([node_slice(n, eight_h100()) for n in NODES]), CLASSES)


def _uncached(
    book: DeviceLedger, pod: list[ResourceClaim]
) -> tuple[list[bool], list[int], dict[str, int]]:
    """The same questions to a ledger of the same holdings that never answered before."""
    fresh = DeviceLedger(book.inventory, CLASSES, book.in_use.copy())
    return fresh.feasible(pod, NODES), fresh.score(pod, NODES), fresh.explain(pod, NODES)


def test_a_node_whose_devices_were_taken_is_asked_again() -> None:
    book = _ledger()
    pod = [claim("c", req("g", count=8))]
    assert book.feasible(pod, NODES) == [True, True, True]
    assert not isinstance(book.reserve("first", pod, "a"), str)
    assert book.feasible(pod, NODES) == [False, True, True]  # a cached True would be wrong
    book.unreserve("first")
    assert book.feasible(pod, NODES) == [True, True, True]


def test_answers_match_a_ledger_without_the_cache_through_random_holds() -> None:
    rng = random.Random(7)
    book = _ledger()
    shapes = [[claim("c", req("g", count=n))] for n in (1, 2, 4, 8)]
    owners: list[str] = []
    for step in range(200):
        pod = rng.choice(shapes)
        if owners and rng.random() < 0.4:
            book.unreserve(owners.pop(rng.randrange(len(owners))))
        elif rng.random() < 0.6:
            node = rng.choice(NODES)
            if not isinstance(book.reserve(f"owner-{step}", pod, node), str):
                owners.append(f"owner-{step}")
        answers = (book.feasible(pod, NODES), book.score(pod, NODES), book.explain(pod, NODES))
        assert answers == _uncached(book, pod)


def test_a_node_list_of_another_order_is_answered_for_that_order() -> None:
    book = _ledger()
    pod = [claim("c", req("g", count=8))]
    assert not isinstance(book.reserve("first", pod, "b"), str)
    assert book.feasible(pod, NODES) == [True, False, True]
    assert book.feasible(pod, ["b", "c", "a"]) == [False, True, True]
    assert book.feasible(pod, NODES) == [True, False, True]
