"""Which allocations a device NoExecute taint ends, after the cases of Kubernetes' device taint
eviction controller (pkg/controller/devicetainteviction: an untolerated NoExecute taint evicts,
a matching toleration keeps the pod, other effects never evict); answers worked by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aipaas.api.devices import AllocationResult, DeviceTaintRule, ResourceSlice
from aipaas.devices.device_eviction import no_execute_reason
from aipaas.devices.inventory import Inventory


def inventory(taint: dict[str, Any] | None, rule_effect: str | None = None) -> Inventory:
    device: dict[str, Any] = {"name": "d0"}
    if taint:
        device["taints"] = [taint]
    published = ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": "x.example.com",
                "nodeName": "n",
                "pool": {"name": "p", "resourceSliceCount": 1},
                "devices": [device],
            },
        }
    )
    rules = []
    if rule_effect:
        rules.append(
            DeviceTaintRule.model_validate(
                {
                    "apiVersion": "resource.k8s.io/v1beta2",
                    "kind": "DeviceTaintRule",
                    "metadata": {"name": "r"},
                    "spec": {
                        "deviceSelector": {"device": "d0"},
                        "taint": {"key": "bad", "effect": rule_effect},
                    },
                }
            )
        )
    return Inventory([published], taint_rules=rules)


def allocation(*tolerations: dict[str, Any]) -> AllocationResult:
    return AllocationResult.model_validate(
        {
            "devices": {
                "results": [
                    {
                        "request": "r",
                        "driver": "x.example.com",
                        "pool": "p",
                        "device": "d0",
                        "tolerations": list(tolerations),
                    }
                ]
            }
        }
    )


NO_EXECUTE = {"key": "bad", "value": "ecc", "effect": "NoExecute"}
ENDED = "device d0 of claim c has the taint bad=ecc:NoExecute, which its request does not tolerate"


@pytest.mark.parametrize(
    ("taint", "tolerations", "want"),
    [
        pytest.param(NO_EXECUTE, [], ENDED, id="untolerated NoExecute ends it"),
        pytest.param(
            NO_EXECUTE,
            [{"key": "bad", "operator": "Exists"}],
            None,
            id="Exists on the key tolerates",
        ),
        pytest.param(
            NO_EXECUTE,
            [{"key": "bad", "value": "other", "effect": "NoExecute"}],
            ENDED,
            id="another value does not",
        ),
        pytest.param(
            NO_EXECUTE,
            [{"key": "bad", "operator": "Exists", "effect": "NoSchedule"}],
            ENDED,
            id="a toleration of another effect does not",
        ),
        pytest.param(
            {"key": "bad", "effect": "NoSchedule"}, [], None, id="NoSchedule ends nothing"
        ),
        pytest.param({"key": "bad", "effect": "None"}, [], None, id="None ends nothing"),
        pytest.param(None, [], None, id="no taint"),
    ],
)
def test_slice_taints(
    taint: dict[str, Any] | None, tolerations: list[dict[str, Any]], want: str | None
) -> None:
    assert no_execute_reason(inventory(taint), "c", allocation(*tolerations)) == want


def test_a_taint_rules_no_execute_ends_it_too() -> None:
    got = no_execute_reason(inventory(None, "NoExecute"), "c", allocation())
    assert got == (
        "device d0 of claim c has the taint bad:NoExecute, which its request does not tolerate"
    )


ADDED = {**NO_EXECUTE, "timeAdded": "2026-11-29T07:00:00Z"}
AT = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
UNTIL_30 = (
    "device d0 of claim c has the taint bad=ecc:NoExecute, tolerated until "
    "2026-11-29T07:00:30+00:00 only"
)


@pytest.mark.parametrize(
    ("taint", "tolerations", "now", "want"),
    [
        pytest.param(
            ADDED,
            [{"key": "bad", "operator": "Exists", "tolerationSeconds": 30}],
            AT + timedelta(seconds=29),
            None,
            id="within tolerationSeconds: stays",
        ),
        pytest.param(
            ADDED,
            [{"key": "bad", "operator": "Exists", "tolerationSeconds": 30}],
            AT + timedelta(seconds=30),
            UNTIL_30,
            id="tolerationSeconds passed: ends",
        ),
        pytest.param(
            ADDED,
            [
                {"key": "bad", "operator": "Exists", "tolerationSeconds": 60},
                {"operator": "Exists", "tolerationSeconds": 30},
            ],
            AT + timedelta(seconds=45),
            UNTIL_30,
            id="the shortest of the matching tolerations counts",
        ),
        pytest.param(
            ADDED,
            [
                {"key": "bad", "operator": "Exists", "tolerationSeconds": 30},
                {"key": "bad", "operator": "Exists"},
            ],
            AT + timedelta(days=1),
            None,
            id="one without seconds tolerates for good",
        ),
        pytest.param(
            NO_EXECUTE,
            [{"key": "bad", "operator": "Exists", "tolerationSeconds": 30}],
            AT + timedelta(days=1),
            None,
            id="no timeAdded: tolerated for good",
        ),
    ],
)
def test_toleration_seconds(
    taint: dict[str, Any], tolerations: list[dict[str, Any]], now: datetime, want: str | None
) -> None:
    assert no_execute_reason(inventory(taint), "c", allocation(*tolerations), now) == want
