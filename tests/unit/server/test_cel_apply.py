"""CEL selectors are type-checked when applied: 422 naming the field, nothing stored."""

from __future__ import annotations

import pytest

from tests.unit.server.api_world import Api

CLASS = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: typed.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.nvidia.com"'}
  - cel: {expression: EXPRESSION}
"""
TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: typed}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors: [{cel: {expression: EXPRESSION}}]
"""


def _with(manifest: str, expression: str) -> str:
    return manifest.replace("EXPRESSION", "'" + expression.replace("'", "''") + "'")


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("device.driver", "expression must evaluate to a bool, got string"),
        ('device.drivr == "a"', "undefined field 'drivr' of device"),
        ("device.driver == 1", "no matching overload for '==' applied to (string, int)"),
        ('device.capacity["m"].memory > "a"', "'>' applied to (quantity, string)"),
    ],
)
def test_device_class_with_a_badly_typed_selector_is_422(
    api: Api, expression: str, reason: str
) -> None:
    answer = api.client.post(
        "/api/v1/apply", content=_with(CLASS, expression), headers=api.as_("admin")
    )
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert "spec.selectors[1].cel.expression" in body["message"]
    assert reason in body["message"]
    [field] = body["fields"]
    assert field["path"] == "spec.selectors[1].cel.expression"
    assert field["reason"].startswith("CEL line 1, column ") and reason in field["reason"]
    stored = api.client.get("/api/v1/deviceclasses/typed.example.com", headers=api.as_("admin"))
    assert stored.status_code == 404


def test_device_class_with_a_well_typed_selector_is_stored(api: Api) -> None:
    good = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
    answer = api.client.post("/api/v1/apply", content=_with(CLASS, good), headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["items"][0]["action"] == "created"


def test_claim_template_with_a_non_bool_selector_is_422(api: Api) -> None:
    manifest = _with(TEMPLATE, 'device.attributes["gpu.nvidia.com"].model.lowerAscii()')
    answer = api.client.post("/api/v1/apply", content=manifest, headers=api.as_("alice"))
    assert answer.status_code == 422, answer.text
    message = answer.json()["message"]
    assert "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression" in message
    assert "must evaluate to a bool, got string" in message
