"""``status.allocation.devices.config`` as kube-scheduler 1.37's DRA plugin writes it (seen on
a real cluster, tests/kube/test_kube_dra_as_kube_scheduler.py): the configurations of the
classes and of the claim that apply to what was allocated, those of a firstAvailable
subrequest not chosen left out, and ``requests`` omitted where a configuration applies to
every request of the claim."""

from __future__ import annotations

from typing import Any

from aipaas.api.devices import DeviceClass, ResourceClaim
from aipaas.devices.allocator import allocate_pod, allocation_config
from aipaas.devices.inventory import Inventory
from tests.unit.devices.devices_builders import CLASSES, DRIVER, claim, gpu, node_slice, req


def opaque(tag: str) -> dict[str, Any]:
    return {"driver": DRIVER, "parameters": {"for": tag}}


def configured(item: ResourceClaim, *entries: tuple[list[str], str]) -> ResourceClaim:
    document = item.model_dump(by_alias=True, exclude_none=True)
    document["spec"]["devices"]["config"] = [
        {"requests": names, "opaque": opaque(tag)} if names else {"opaque": opaque(tag)}
        for names, tag in entries
    ]
    return ResourceClaim.model_validate(document)


def prioritized(name: str, *subrequests: tuple[str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "firstAvailable": [
            {"name": sub, "deviceClassName": "gpu", "count": count} for sub, count in subrequests
        ],
    }


def written(item: ResourceClaim, classes: dict[str, DeviceClass] = CLASSES) -> list[Any]:
    """(source, requests, parameters' tag) of each configuration of the allocation."""
    inventory = Inventory([node_slice("a", [gpu("gpu-0"), gpu("gpu-1")])])
    placed = allocate_pod([item], inventory, classes)
    assert placed.allocation is not None
    status = placed.allocation.allocation_result(item, classes)
    return [
        (c.source, c.requests, (c.opaque.parameters if c.opaque else {}).get("for"))
        for c in status.devices.config
    ]


def test_a_subrequest_not_chosen_loses_its_configuration() -> None:
    item = configured(
        claim("c", prioritized("gpu", ("three", 3), ("two", 2))),
        (["gpu/two"], "two"),
        (["gpu/three"], "three"),
        (["gpu"], "gpu"),
    )
    # one request: each configuration that applies applies to all of it
    assert written(item) == [("FromClaim", [], "two"), ("FromClaim", [], "gpu")]


def test_requests_are_kept_where_a_configuration_applies_to_some_requests() -> None:
    item = configured(
        claim("c", req("a"), prioritized("b", ("x", 5), ("y", 1))),
        (["a"], "a"),
        (["b/y"], "by"),
        (["b/x"], "bx"),
        ([], "all"),
        (["a", "b/y"], "both"),
    )
    assert written(item) == [
        ("FromClaim", ["a"], "a"),
        ("FromClaim", ["b/y"], "by"),
        ("FromClaim", [], "all"),
        ("FromClaim", [], "both"),
    ]


def test_a_class_configuration_names_the_chosen_subrequests_of_its_class() -> None:
    with_config = DeviceClass.model_validate(
        {
            **CLASSES["gpu"].model_dump(by_alias=True, exclude_none=True),
            "spec": {
                **CLASSES["gpu"].model_dump(by_alias=True, exclude_none=True)["spec"],
                "config": [{"opaque": opaque("class")}],
            },
        }
    )
    classes = {**CLASSES, "gpu": with_config}
    alone = claim("c", prioritized("gpu", ("big", 9), ("one", 1)))
    assert written(alone, classes) == [("FromClass", [], "class")]
    # the class serves one request of two: its configuration names that request's choice
    two = claim("d", req("other", "whole-gpu"), prioritized("gpu", ("big", 9), ("one", 1)))
    assert written(two, classes) == [("FromClass", ["gpu/one"], "class")]


def test_nothing_allocated_for_a_request_leaves_its_configuration_out() -> None:
    item = configured(claim("c", prioritized("gpu", ("one", 1), ("two", 1))), (["gpu/two"], "two"))
    assert allocation_config(item, CLASSES, {"gpu/one"}) == []
