"""A claim's ``status.devices`` and its devices' binding conditions (KEP-5007).

The cases follow what the Kubernetes DRA scheduler plugin's PreBind checks (the
``dynamicresources`` plugin tests of binding conditions: all conditions True binds, a failure
condition True fails, the timeout fails): answers worked by hand from that rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from aipaas.api.devices import AllocationResult
from aipaas.backends.kubernetes.inventory import inventory as kube_inventory
from aipaas.devices.binding import (
    BindingWait,
    binding_wait,
    device_statuses,
    merge_conditions,
)

NOW = "2026-11-29T07:00:00Z"


def allocation(*results: dict[str, Any]) -> AllocationResult:
    return AllocationResult.model_validate({"devices": {"results": list(results)}})


def result(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": "gpu.example.com", "pool": "p", "device": device, **extra}


def entry(device: str, **conditions: str) -> dict[str, Any]:
    return {
        "driver": "gpu.example.com",
        "pool": "p",
        "device": device,
        "conditions": [{"type": k, "status": v} for k, v in conditions.items()],
    }


ATTACHED = result("d0", bindingConditions=["Attached"], bindingFailureConditions=["Failed"])


class TestDeviceStatuses:
    def test_one_entry_per_device_binding_conditions_unknown(self) -> None:
        made = allocation(
            ATTACHED,
            result("d1"),
            result("d1"),  # the same device for two requests: one entry
            result("d2", adminAccess=True),  # admin access holds nothing: no entry
            result("d3", shareID="abc"),
        )
        got = device_statuses(made, NOW)
        assert [(e["device"], e.get("shareID")) for e in got] == [
            ("d0", None),
            ("d1", None),
            ("d3", "abc"),
        ]
        assert got[0]["conditions"] == [
            {
                "type": "Attached",
                "status": "Unknown",
                "reason": "WaitingForDriver",
                "message": "set by the device's driver",
                "lastTransitionTime": NOW,
            }
        ]
        assert got[1]["conditions"] == []

    def test_a_drivers_condition_replaces_the_same_type_only(self) -> None:
        entries = device_statuses(allocation(ATTACHED), NOW)
        observed = {("gpu.example.com", "p", "d0"): [{"type": "Attached", "status": "True"}]}
        merged = merge_conditions(entries, observed)
        assert merged is not None
        assert merged[0]["conditions"] == [{"type": "Attached", "status": "True"}]
        assert merge_conditions(merged, observed) is None  # nothing new: None


class TestBindingWait:
    @pytest.mark.parametrize(
        ("entries", "waited", "want"),
        [
            pytest.param(
                [entry("d0", Attached="True")], 5.0, None, id="every condition True: binds"
            ),
            pytest.param(
                [entry("d0", Attached="Unknown")],
                5.0,
                BindingWait(False, "claim c waits for binding conditions (device d0: Attached)"),
                id="Unknown: waits",
            ),
            pytest.param(
                [],
                5.0,
                BindingWait(False, "claim c waits for binding conditions (device d0: Attached)"),
                id="no status yet: waits",
            ),
            pytest.param(
                [entry("d0", Attached="False", Failed="True")],
                5.0,
                BindingWait(True, "claim c device d0: binding failure condition Failed is True"),
                id="a failure condition True fails at once",
            ),
            pytest.param(
                [entry("d0", Attached="True", Failed="True")],
                5.0,
                BindingWait(True, "claim c device d0: binding failure condition Failed is True"),
                id="failure wins over success",
            ),
            pytest.param(
                [entry("d0", Attached="False")],
                600.0,
                BindingWait(
                    True, "claim c: binding conditions not met after 600 s (device d0: Attached)"
                ),
                id="600 s without them: fails",
            ),
        ],
    )
    def test_one_device(
        self, entries: list[dict[str, Any]], waited: float, want: BindingWait | None
    ) -> None:
        assert binding_wait("c", allocation(ATTACHED), entries, waited) == want

    def test_devices_without_binding_conditions_never_wait(self) -> None:
        assert binding_wait("c", allocation(result("d1")), [], 10_000.0) is None

    def test_a_shorter_timeout(self) -> None:
        got = binding_wait("c", allocation(ATTACHED), [], 30.0, timeout=30.0)
        assert got is not None and got.failed


def test_the_kubernetes_inventory_reports_what_drivers_set_in_claims() -> None:
    node = {"metadata": {"name": "k1"}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi"}}}
    claim = {
        "metadata": {"name": "c", "namespace": "acme"},
        "status": {
            "devices": [
                {"driver": "gpu.example.com", "pool": "p", "device": "d0", "conditions": []},
                {
                    "driver": "gpu.example.com",
                    "pool": "p",
                    "device": "d1",
                    "conditions": [{"type": "Attached", "status": "True"}],
                },
            ]
        },
    }
    found = kube_inventory([node], [], [], [claim], set())
    assert found.device_conditions == {
        ("gpu.example.com", "p", "d1"): ({"type": "Attached", "status": "True"},)
    }
