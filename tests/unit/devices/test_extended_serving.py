"""Which DeviceClass serves an extended resource name (devices/extended.py), by the rule of
Kubernetes 1.34+ (KEP-5004, DeviceClassSpec.extendedResourceName): the class whose
``extendedResourceName`` is the name, and every class under its implicit name
``deviceclass.resource.kubernetes.io/<class>``. Kubernetes takes the newest of two classes
naming one resource; aipaas the first by name (docs/devices.md). Answers worked by hand."""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.devices import DeviceClass
from aipaas.devices.extended import serving_class, unserved_message


def device_class(name: str, extended: str | None = None) -> DeviceClass:
    spec: dict[str, Any] = {"extendedResourceName": extended} if extended else {}
    return DeviceClass.model_validate(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}}
        | {"spec": spec}
    )


CLASSES = [
    device_class("fpga-b", "example.com/fpga"),
    device_class("fpga-a", "example.com/fpga"),
    device_class("nic", "example.com/nic"),
    device_class("plain"),
]


class TestServingClass:
    @pytest.mark.parametrize(
        ("resource", "want"),
        [
            pytest.param("example.com/nic", "nic", id="the one class naming it"),
            pytest.param(
                "example.com/fpga",
                "fpga-a",
                id="two classes name it: the first by name (Kubernetes: the newest)",
            ),
            pytest.param(
                "deviceclass.resource.kubernetes.io/plain",
                "plain",
                id="implicit name of a class without extendedResourceName",
            ),
            pytest.param(
                "deviceclass.resource.kubernetes.io/fpga-b",
                "fpga-b",
                id="implicit name of a class that also names another resource",
            ),
            pytest.param(
                "deviceclass.resource.kubernetes.io/missing",
                None,
                id="implicit name of a class that does not exist",
            ),
            pytest.param("example.com/dongle", None, id="a name no class names"),
        ],
    )
    def test_which_class(self, resource: str, want: str | None) -> None:
        assert serving_class(CLASSES, resource) == want

    def test_served_once_a_class_names_it(self) -> None:
        assert serving_class(CLASSES, "example.com/dongle") is None
        later = [*CLASSES, device_class("dongle", "example.com/dongle")]
        assert serving_class(later, "example.com/dongle") == "dongle"

    def test_the_waiting_reason_names_the_resource(self) -> None:
        want = "no DeviceClass serves extended resource example.com/fpga"
        assert unserved_message("example.com/fpga") == want
