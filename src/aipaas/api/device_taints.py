"""Device taints and DeviceTaintRule (resource.k8s.io), as Kubernetes 1.35+ has them.

Who calls it: aipaas.api.devices (a device's taints, a request's tolerations; the
DeviceTaintRule kind among the documents it loads) and the device inventory (rules taint the
devices they select). Imports pydantic and aipaas.api.device_names/meta only.
"""

from __future__ import annotations

from typing import Final, Literal

from aipaas.api.device_names import DriverName, ObjectMeta
from aipaas.api.meta import Model

__all__ = [
    "TAINT_RULE_VERSIONS",
    "DeviceTaint",
    "DeviceTaintRule",
    "DeviceTaintRuleSpec",
    "DeviceTaintSelector",
    "TaintEffect",
]

TaintEffect = Literal["NoSchedule", "NoExecute", "None"]
"""NoSchedule: no new allocation unless tolerated. NoExecute: also evicts the pods of
allocations that do not tolerate it. None (resource.k8s.io/v1 since Kubernetes 1.35): only
informs, allocation and running pods are unaffected."""


class DeviceTaint(Model):
    key: str
    value: str | None = None
    effect: TaintEffect
    time_added: str | None = None


TAINT_RULE_VERSIONS: Final = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
"""DeviceTaintRule is served as v1beta2 in Kubernetes 1.35/1.36; v1 is accepted too."""


class DeviceTaintSelector(Model):
    """The devices a rule taints: every field that is set must equal (unset: any)."""

    driver: DriverName | None = None
    pool: str | None = None
    device: str | None = None


class DeviceTaintRuleSpec(Model):
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint


class DeviceTaintRule(Model):
    """Taints devices without changing their ResourceSlice (an operator marking a GPU bad)."""

    api_version: Literal["resource.k8s.io/v1", "resource.k8s.io/v1beta2"] = "resource.k8s.io/v1"
    kind: Literal["DeviceTaintRule"] = "DeviceTaintRule"
    metadata: ObjectMeta
    spec: DeviceTaintRuleSpec
