"""Dynamic resource allocation objects in the shape of Kubernetes resource.k8s.io/v1.

DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate and DeviceTaintRule, with the
field names that Kubernetes uses, so that manifests from the Kubernetes documentation load
unchanged.

Who calls it: the CLI (`aipaas allocate`, `aipaas apply`), the server, the devices allocator.
Imports: pydantic, aipaas.api.meta/quantity/errors and aipaas.devices.cel (to check CEL selectors
when an object is loaded, so that a bad expression is refused with its field path and position).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import AfterValidator, Field, TypeAdapter, ValidationError, model_validator

from aipaas.api.device_names import (
    DnsLabel,
    DriverName,
    FullyQualifiedName,
    ObjectMeta,
    QualifiedName,
    TemplateMeta,
)
from aipaas.api.device_taints import (
    TAINT_RULE_VERSIONS,
    DeviceTaint,
    DeviceTaintRule,
    DeviceTaintRuleSpec,
    DeviceTaintSelector,
    TaintEffect,
)
from aipaas.api.errors import invalid
from aipaas.api.meta import LenientModel, Model
from aipaas.api.quantity import QuantityStr
from aipaas.devices.cel import CelError, compile_selector
from aipaas.errors import FieldError, InvalidObject

API_VERSION: Final = "resource.k8s.io/v1"
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_DEVICES_PER_SLICE: Final = 128
MAX_REQUESTS: Final = 32
MAX_SUBREQUESTS: Final = 8
MAX_COUNT: Final = 64

# --- selectors and configuration -------------------------------------------------------------


def _check_expression(value: str) -> str:
    try:
        compile_selector(value)
    except CelError as err:
        raise ValueError(str(err)) from err
    return value


class CELDeviceSelector(Model):
    expression: Annotated[str, AfterValidator(_check_expression)]


class DeviceSelector(Model):
    cel: CELDeviceSelector


class OpaqueDeviceConfiguration(Model):
    driver: DriverName
    parameters: dict[str, Any]


class DeviceClassConfiguration(Model):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(Model):
    selectors: list[DeviceSelector] = Field(default_factory=list, max_length=32)
    config: list[DeviceClassConfiguration] = Field(default_factory=list, max_length=32)
    extended_resource_name: str | None = None


class DeviceClass(Model):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["DeviceClass"] = "DeviceClass"
    metadata: ObjectMeta
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# --- ResourceSlice ------------------------------------------------------------------------------


class DeviceAttribute(Model):
    """Exactly one of int, bool, string, version."""

    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = Field(default=None, max_length=64)
    version: str | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _one_of(self) -> DeviceAttribute:
        values = (self.int_, self.bool_, self.string, self.version)
        if sum(v is not None for v in values) != 1:
            raise ValueError("exactly one of int, bool, string or version must be set")
        if self.version is not None:
            _check_semver(self.version)
        return self

    @property
    def value(self) -> int | bool | str:
        for item in (self.int_, self.bool_, self.string, self.version):
            if item is not None:
                return item
        raise AssertionError("validated to hold one value")


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
)


def _check_semver(value: str) -> str:
    if not _SEMVER.fullmatch(value):
        raise ValueError(f"{value!r} is not a semantic version like 1.2.3")
    return value


class CapacityRequestPolicyRange(Model):
    min: QuantityStr
    max: QuantityStr | None = None
    step: QuantityStr | None = None


class CapacityRequestPolicy(Model):
    default: QuantityStr | None = None
    valid_values: list[QuantityStr] = Field(default_factory=list, max_length=10)
    valid_range: CapacityRequestPolicyRange | None = None

    @model_validator(mode="after")
    def _one_rule(self) -> CapacityRequestPolicy:
        if self.valid_values and self.valid_range is not None:
            raise ValueError("validValues and validRange are mutually exclusive")
        return self


class DeviceCapacity(Model):
    value: QuantityStr
    request_policy: CapacityRequestPolicy | None = None


class Counter(Model):
    value: QuantityStr


class CounterSet(Model):
    name: DnsLabel
    counters: dict[DnsLabel, Counter] = Field(min_length=1, max_length=32)


class DeviceCounterConsumption(Model):
    counter_set: DnsLabel
    counters: dict[DnsLabel, Counter] = Field(min_length=1, max_length=32)


class Device(Model):
    name: DnsLabel
    attributes: dict[QualifiedName, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[QualifiedName, DeviceCapacity] = Field(default_factory=dict)
    consumes_counters: list[DeviceCounterConsumption] = Field(default_factory=list, max_length=2)
    node_name: str | None = None
    node_selector: dict[str, Any] | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] = Field(default_factory=list, max_length=4)
    binds_to_node: bool | None = None
    binding_conditions: list[str] = Field(default_factory=list)
    binding_failure_conditions: list[str] = Field(default_factory=list)
    allow_multiple_allocations: bool | None = None

    @model_validator(mode="after")
    def _limits(self) -> Device:
        total = len(self.attributes) + len(self.capacity)
        if total > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise ValueError(
                f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities together, "
                f"got {total}"
            )
        return self


class ResourcePool(Model):
    name: str = Field(min_length=1, max_length=253)
    generation: int = Field(default=0, ge=0)
    resource_slice_count: int = Field(default=1, ge=1)


class ResourceSliceSpec(Model):
    driver: DriverName
    pool: ResourcePool
    node_name: str | None = None
    node_selector: dict[str, Any] | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] = Field(default_factory=list, max_length=MAX_DEVICES_PER_SLICE)
    shared_counters: list[CounterSet] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _consistent(self) -> ResourceSliceSpec:
        placements = [
            self.node_name is not None,
            self.node_selector is not None,
            bool(self.all_nodes),
            bool(self.per_device_node_selection),
        ]
        if sum(placements) != 1:
            raise ValueError(
                "exactly one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection "
                "must be set"
            )
        _unique((d.name for d in self.devices), "devices", "device name")
        _unique((c.name for c in self.shared_counters), "sharedCounters", "counter set name")
        return self


class ResourceSlice(Model):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["ResourceSlice"] = "ResourceSlice"
    metadata: ObjectMeta
    spec: ResourceSliceSpec


# --- ResourceClaim ------------------------------------------------------------------------------


class DeviceToleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None


class CapacityRequirements(Model):
    requests: dict[QualifiedName, QuantityStr] = Field(default_factory=dict)


class BaseDeviceRequest(Model):
    device_class_name: DriverName
    selectors: list[DeviceSelector] = Field(default_factory=list, max_length=32)
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    tolerations: list[DeviceToleration] = Field(default_factory=list, max_length=16)
    capacity: CapacityRequirements | None = None

    @model_validator(mode="after")
    def _count_matches_mode(self) -> BaseDeviceRequest:
        if self.allocation_mode == "All" and self.count is not None:
            raise ValueError("count must not be set when allocationMode is All")
        return self

    @property
    def wanted(self) -> int:
        """How many devices ExactCount asks for (1 when count is unset)."""
        return 1 if self.count is None else self.count


class ExactDeviceRequest(BaseDeviceRequest):
    admin_access: bool | None = None


class DeviceSubRequest(BaseDeviceRequest):
    name: DnsLabel


class DeviceRequest(Model):
    name: DnsLabel
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = Field(
        default=None, min_length=1, max_length=MAX_SUBREQUESTS
    )

    @model_validator(mode="after")
    def _one_form(self) -> DeviceRequest:
        if (self.exactly is None) == (self.first_available is None):
            raise ValueError("exactly one of exactly or firstAvailable must be set")
        if self.first_available is not None:
            _unique((s.name for s in self.first_available), "firstAvailable", "subrequest name")
        return self


class DeviceConstraint(Model):
    requests: list[str] = Field(default_factory=list)
    match_attribute: FullyQualifiedName | None = None
    distinct_attribute: FullyQualifiedName | None = None

    @model_validator(mode="after")
    def _one_rule(self) -> DeviceConstraint:
        if (self.match_attribute is None) == (self.distinct_attribute is None):
            raise ValueError("exactly one of matchAttribute or distinctAttribute must be set")
        return self


class DeviceClaimConfiguration(Model):
    requests: list[str] = Field(default_factory=list)
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(Model):
    requests: list[DeviceRequest] = Field(default_factory=list, max_length=MAX_REQUESTS)
    constraints: list[DeviceConstraint] = Field(default_factory=list, max_length=32)
    config: list[DeviceClaimConfiguration] = Field(default_factory=list, max_length=32)

    @model_validator(mode="after")
    def _references(self) -> DeviceClaim:
        _unique((r.name for r in self.requests), "requests", "request name")
        known = {r.name for r in self.requests}
        for request in self.requests:
            known.update(f"{request.name}/{s.name}" for s in request.first_available or ())
        for index, constraint in enumerate(self.constraints):
            for name in constraint.requests:
                if name not in known:
                    raise ValueError(
                        f"constraints[{index}].requests: {name!r} is not a request of this claim"
                    )
        for index, config in enumerate(self.config):
            for name in config.requests:
                if name not in known:
                    raise ValueError(
                        f"config[{index}].requests: {name!r} is not a request of this claim"
                    )
        return self


class ResourceClaimSpec(Model):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(Model):
    request: str
    driver: DriverName
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] = Field(default_factory=list)
    binding_conditions: list[str] = Field(default_factory=list)
    binding_failure_conditions: list[str] = Field(default_factory=list)
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, QuantityStr] = Field(default_factory=dict)


class DeviceAllocationConfiguration(Model):
    source: Literal["FromClass", "FromClaim"]
    requests: list[str] = Field(default_factory=list)
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(Model):
    results: list[DeviceRequestAllocationResult] = Field(default_factory=list)
    config: list[DeviceAllocationConfiguration] = Field(default_factory=list)


class AllocationResult(Model):
    devices: DeviceAllocationResult = Field(default_factory=DeviceAllocationResult)
    node_selector: dict[str, Any] | None = None
    allocation_timestamp: str | None = None


class ResourceClaimConsumerReference(Model):
    api_group: str | None = None
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(LenientModel):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = Field(default_factory=list)
    devices: list[dict[str, Any]] = Field(default_factory=list)


class ResourceClaim(Model):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["ResourceClaim"] = "ResourceClaim"
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus | None = None


class ResourceClaimTemplateSpec(Model):
    metadata: TemplateMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(Model):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["ResourceClaimTemplate"] = "ResourceClaimTemplate"
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec


DeviceObject = DeviceClass | ResourceSlice | ResourceClaim | ResourceClaimTemplate | DeviceTaintRule
KINDS: Final[dict[str, type[DeviceObject]]] = {
    "DeviceClass": DeviceClass,
    "ResourceSlice": ResourceSlice,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "DeviceTaintRule": DeviceTaintRule,
}
_ANY: Final = TypeAdapter(
    Annotated[
        DeviceClass | ResourceSlice | ResourceClaim | ResourceClaimTemplate | DeviceTaintRule,
        Field(discriminator="kind"),
    ]
)


def parse_device_object(document: Any, *, where: str = "") -> DeviceObject:
    """Validate one decoded document (a mapping) as a resource.k8s.io/v1 object.

    Args:
        document: the decoded YAML/JSON mapping.
        where: a prefix for error messages, e.g. "file.yaml document 2".

    Raises:
        InvalidObject: with one FieldError per problem; the message names the object (kind and
            name), the field path (``spec.devices.requests[0].exactly.count``) and the reason.
    """
    label = _describe(document, where)
    if not isinstance(document, dict):
        raise InvalidObject([FieldError("", "must be a mapping")], f"{label}: must be a mapping")
    kind = document.get("kind")
    if kind not in KINDS:
        reason = f"kind must be one of {', '.join(KINDS)}, got {kind!r}"
        raise InvalidObject([FieldError("kind", reason)], f"{label}: kind: {reason}")
    versions = TAINT_RULE_VERSIONS if kind == "DeviceTaintRule" else (API_VERSION,)
    if document.get("apiVersion") not in versions:
        wanted = " or ".join(repr(v) for v in versions)
        reason = f"must be {wanted}, got {document.get('apiVersion')!r}"
        raise InvalidObject([FieldError("apiVersion", reason)], f"{label}: apiVersion: {reason}")
    try:
        return KINDS[kind].model_validate(document)
    except ValidationError as err:
        raise invalid(err, what=label) from err


def load_device_documents(text: str, *, source: str = "<input>") -> list[DeviceObject]:
    """Load a multi-document YAML text of DeviceClasses, ResourceSlices, claims and templates.

    Empty documents are skipped. Raises InvalidObject (see :func:`parse_device_object`) for the
    first invalid document, or for YAML that does not parse.
    """
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise InvalidObject([FieldError("", f"invalid YAML: {err}")], f"{source}: {err}") from err
    objects: list[DeviceObject] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        objects.append(parse_device_object(document, where=f"{source} document {index + 1}"))
    return objects


def dump_device_object(obj: DeviceObject) -> dict[str, Any]:
    """The wire form (camelCase, unset fields left out) that loads back to an equal object."""
    return obj.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _describe(document: Any, where: str) -> str:
    kind = document.get("kind", "object") if isinstance(document, dict) else "object"
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    text = f'{kind} "{name}"' if name else str(kind)
    return f"{where}: {text}" if where else text


def _unique(names: Iterable[str], field: str, what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{field}: duplicate {what} {name!r}")
        seen.add(name)


__all__ = [
    "API_VERSION",
    "KINDS",
    "AllocationResult",
    "BaseDeviceRequest",
    "CELDeviceSelector",
    "CapacityRequestPolicy",
    "CapacityRequirements",
    "CounterSet",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClass",
    "DeviceClassSpec",
    "DeviceConstraint",
    "DeviceObject",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceTaintRule",
    "DeviceTaintRuleSpec",
    "DeviceTaintSelector",
    "ExactDeviceRequest",
    "ObjectMeta",
    "ResourceClaim",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "ResourceSliceSpec",
    "dump_device_object",
    "load_device_documents",
    "parse_device_object",
]
