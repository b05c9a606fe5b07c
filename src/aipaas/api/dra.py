"""The resource.k8s.io/v1 kinds as stored objects: DeviceClass, ResourceSlice, ResourceClaim,
ResourceClaimTemplate and DeviceTaintRule, applied with ``aipaas apply -f`` and kept in the store
like other kinds.

Each is validated by :func:`aipaas.api.devices.parse_device_object` (the Kubernetes shape, CEL
selectors compiled), then wrapped here with aipaas metadata so that the store, the routes and the
SDK treat it like any kind. :meth:`DeviceKind.device` gives back the typed Kubernetes object.

Who calls it: the registry (parse), the server, the controller. Pure.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field

from aipaas.api.devices import (
    API_VERSION,
    DeviceObject,
    dump_device_object,
    parse_device_object,
)
from aipaas.api.devices import (
    ResourceClaim as KubeResourceClaim,
)
from aipaas.api.meta import LenientModel, Object, ObjectMeta
from aipaas.errors import FieldError, InvalidObject

_SUBDOMAIN_MAX = 253
_TYPED: dict[tuple[str, str, str, str | None, str | None], DeviceObject] = {}
_TYPED_MAX = 50_000


def _check_subdomain(value: str) -> str:
    if not value or len(value) > _SUBDOMAIN_MAX:
        raise ValueError(f"must be 1 to {_SUBDOMAIN_MAX} characters")
    for part in value.split("."):
        if not part or not all(c.islower() or c.isdigit() or c == "-" for c in part):
            raise ValueError(f"{value!r} is not a valid name (a DNS subdomain)")
        if part[0] == "-" or part[-1] == "-":
            raise ValueError(f"{value!r} is not a valid name (a DNS subdomain)")
    return value


class DeviceMeta(ObjectMeta):
    """aipaas metadata whose name is a DNS subdomain (``gpu.nvidia.com``), as Kubernetes has."""

    name: Annotated[str, AfterValidator(_check_subdomain)]


class DeviceKind(Object):
    """A resource.k8s.io/v1 object in the store; ``spec`` (and ``status``) as Kubernetes has."""

    api_version: Literal["resource.k8s.io/v1"] = API_VERSION  # type: ignore[assignment]
    metadata: DeviceMeta
    spec: dict[str, Any] = Field(default_factory=dict)

    def device(self) -> DeviceObject:
        """The typed Kubernetes object (validated when it was applied).

        Stored objects (uid and resourceVersion set; every write bumps the version) are parsed
        once: the controller reads every slice and claim each cycle.
        """
        key = (self.kind, self.tenant, self.name, self.metadata.uid, self.metadata.resource_version)
        if key[3] is None or key[4] is None:
            return self._parse()
        cached = _TYPED.get(key)
        if cached is None:
            if len(_TYPED) >= _TYPED_MAX:
                _TYPED.clear()
            cached = _TYPED[key] = self._parse()
        return cached

    def _parse(self) -> DeviceObject:
        wire = self.to_wire()
        meta = wire["metadata"]
        wire["metadata"] = {"name": meta["name"]}
        if self.namespaced and self.tenant:
            wire["metadata"]["namespace"] = self.tenant
        return parse_device_object(wire)


class DeviceClassObject(DeviceKind):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "deviceclasses"
    kind: Literal["DeviceClass"] = "DeviceClass"


class ResourceSliceObject(DeviceKind):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "resourceslices"
    kind: Literal["ResourceSlice"] = "ResourceSlice"


class DeviceTaintRuleObject(DeviceKind):
    """Taints the devices its ``spec.deviceSelector`` names (driver, pool, device), without
    changing their slices: the controller's allocator reads the stored rules every cycle.
    Applied as resource.k8s.io/v1beta2 (Kubernetes 1.35/1.36) or v1; stored as v1."""

    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "devicetaintrules"
    kind: Literal["DeviceTaintRule"] = "DeviceTaintRule"


class ClaimStatus(LenientModel):
    """The controller's: ``allocation`` (resource.k8s.io/v1 AllocationResult),
    ``reservedFor`` (the tasks that use the claim) and ``devices`` (one entry per allocated
    device: driver, pool, device, shareID, conditions; devices/binding.py)."""

    allocation: dict[str, Any] | None = None
    reserved_for: list[dict[str, Any]] = Field(default_factory=list)
    devices: list[dict[str, Any]] = Field(default_factory=list)


class ResourceClaimObject(DeviceKind):
    plural: ClassVar[str] = "resourceclaims"
    kind: Literal["ResourceClaim"] = "ResourceClaim"
    status: ClaimStatus | None = None

    def claim(self) -> KubeResourceClaim:
        obj = self.device()
        assert isinstance(obj, KubeResourceClaim)
        return obj


class ResourceClaimTemplateObject(DeviceKind):
    plural: ClassVar[str] = "resourceclaimtemplates"
    kind: Literal["ResourceClaimTemplate"] = "ResourceClaimTemplate"


DEVICE_KINDS: dict[str, type[DeviceKind]] = {
    cls.model_fields["kind"].default: cls
    for cls in (
        DeviceClassObject,
        ResourceSliceObject,
        ResourceClaimObject,
        ResourceClaimTemplateObject,
        DeviceTaintRuleObject,
    )
}


def parse_device_kind(data: dict[str, Any], *, where: str = "") -> DeviceKind:
    """Validate a resource.k8s.io/v1 document (Kubernetes rules, CEL compiled) and wrap it.

    A ``metadata.namespace`` names the tenant when ``metadata.tenant`` is not given. Errors
    name the object, the field and the reason.
    """
    typed = parse_device_object(data, where=where)
    kind = typed.kind
    if kind not in DEVICE_KINDS:
        raise InvalidObject(
            [FieldError("kind", f"{kind} is read by `aipaas allocate`, not stored by the server")]
        )
    name = typed.metadata.name
    if name is None:
        raise InvalidObject(
            [FieldError("metadata.name", f"{kind}: required (generateName is not supported)")]
        )
    wire = dump_device_object(typed)
    cls = DEVICE_KINDS[kind]
    meta: dict[str, Any] = {"name": name}
    if typed.metadata.labels:
        meta["labels"] = typed.metadata.labels
    if typed.metadata.annotations:
        meta["annotations"] = typed.metadata.annotations
    if cls.namespaced:
        tenant = typed.metadata.tenant or typed.metadata.namespace
        if tenant:
            meta["tenant"] = tenant
    elif typed.metadata.tenant:
        meta["tenant"] = typed.metadata.tenant  # refused later: cluster-wide kinds have none
    if typed.metadata.resource_version:
        meta["resourceVersion"] = typed.metadata.resource_version
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": meta,
        "spec": wire.get("spec", {}),
    }
    if "status" in wire and cls is ResourceClaimObject:
        body["status"] = wire["status"]
    return cls.model_validate(body)


def wrap_device(obj: DeviceObject, *, tenant: str = "") -> DeviceKind:
    """A typed Kubernetes object (a backend's slice, a claim with its allocation) as stored."""
    data = dump_device_object(obj)
    if tenant:
        data.setdefault("metadata", {})["tenant"] = tenant
    return parse_device_kind(data)
