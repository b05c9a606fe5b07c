"""The informer's index (backends/kubernetes/informer.py): kept with every change a watch, a
write-through, a forget or a relist makes, so that a lookup by it answers as a walk over every
object would."""

from __future__ import annotations

from typing import Any

from aipaas.backends.kubernetes.informer import Informer
from aipaas.backends.kubernetes.pod_status import request_of, tasks_by_request


class _ListOnly:
    """What the informer asks of its client in these tests: a fork and a list."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def fork(self) -> _ListOnly:
        return self

    def list_with_version(self, kind: str, **_: object) -> tuple[list[dict[str, Any]], str]:
        return self.items, "100"


def _pod(
    name: str, rid: str | None, version: int, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "resourceVersion": str(version),
        "creationTimestamp": created,
    }
    if rid is not None:
        meta["annotations"] = {"aipaas.dev/request-id": rid}
        meta["labels"] = {"aipaas.dev/managed": "true"}
    return {"kind": "Pod", "metadata": meta}


def _informer(items: list[dict[str, Any]] | None = None) -> Informer:
    return Informer(_ListOnly(items or []), "Pod", index=request_of)  # type: ignore[arg-type]


def _walk(informer: Informer, rid: str) -> dict[str, Any] | None:
    return tasks_by_request(informer.items()).get(rid)


def test_a_watched_pod_is_found_by_its_request_id_and_moves_with_its_changes() -> None:
    informer = _informer()
    informer.apply({"type": "ADDED", "object": _pod("a", "r1", 1)})
    informer.apply({"type": "ADDED", "object": _pod("b", None, 2)})
    assert [p["metadata"]["name"] for p in informer.indexed("r1")] == ["a"]
    # its annotation now names another request: found by that one only
    informer.apply({"type": "MODIFIED", "object": _pod("a", "r2", 3)})
    assert informer.indexed("r1") == []
    assert [p["metadata"]["name"] for p in informer.indexed("r2")] == ["a"]
    informer.apply({"type": "DELETED", "object": _pod("a", "r2", 4)})
    assert informer.indexed("r2") == [] and informer.indexed_all() == []


def test_an_older_event_does_not_replace_a_newer_write_in_the_index() -> None:
    informer = _informer()
    informer.remember(_pod("a", "r1", 5))
    informer.apply({"type": "MODIFIED", "object": _pod("a", None, 4)})  # older: ignored
    assert [p["metadata"]["resourceVersion"] for p in informer.indexed("r1")] == ["5"]
    informer.forget("ns", "a")
    assert informer.indexed("r1") == []


def test_the_index_after_a_relist_holds_only_what_was_listed() -> None:
    informer = _informer([_pod("x", "r9", 7)])
    informer.remember(_pod("a", "r1", 1))
    informer.relist()
    assert informer.indexed("r1") == []
    assert [p["metadata"]["name"] for p in informer.indexed("r9")] == ["x"]


def test_two_pods_claiming_one_request_resolve_to_the_oldest_as_a_walk_does() -> None:
    informer = _informer()
    informer.apply({"type": "ADDED", "object": _pod("late", "r1", 2, "2026-01-02T00:00:00Z")})
    informer.apply({"type": "ADDED", "object": _pod("early", "r1", 3, "2026-01-01T00:00:00Z")})
    by_index = tasks_by_request(informer.indexed("r1"))["r1"]
    assert by_index["metadata"]["name"] == "early"
    assert by_index == _walk(informer, "r1")
