"""Names and metadata of the resource.k8s.io objects, with Kubernetes' rules.

Who calls it: aipaas.api.devices (every kind's metadata and names) and
aipaas.api.device_taints. Imports pydantic and aipaas.api.meta only.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from aipaas.api.meta import Model

__all__ = [
    "DnsLabel",
    "DriverName",
    "FullyQualifiedName",
    "ObjectMeta",
    "QualifiedName",
    "TemplateMeta",
    "check_dns_subdomain",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _check_dns_label(value: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS label (lower case letters, digits and '-', at most 63)"
        )
    return value


def check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a DNS subdomain (lower case, digits, '-' and '.')")
    return value


def _check_qualified_name(value: str) -> str:
    """An attribute or capacity name: ``name`` or ``domain/name``."""
    domain, _, name = value.rpartition("/")
    if domain:
        check_dns_subdomain(domain)
    if not _C_IDENTIFIER.fullmatch(name):
        raise ValueError(
            f"{value!r} is not a qualified name: 'domain/name' or 'name', where name is a "
            "C identifier (letters, digits, '_') of at most 64 characters"
        )
    return value


def _check_fully_qualified_name(value: str) -> str:
    if "/" not in value:
        raise ValueError(f"{value!r} must be fully qualified: 'domain/name'")
    return _check_qualified_name(value)


DnsLabel = Annotated[str, AfterValidator(_check_dns_label)]
DriverName = Annotated[str, AfterValidator(check_dns_subdomain)]
QualifiedName = Annotated[str, AfterValidator(_check_qualified_name)]
FullyQualifiedName = Annotated[str, AfterValidator(_check_fully_qualified_name)]


class ObjectMeta(Model):
    """Kubernetes ObjectMeta, the fields a manifest may carry (plus aipaas' tenant)."""

    name: str | None = Field(default=None, max_length=253)
    generate_name: str | None = Field(default=None, max_length=253)
    namespace: str | None = Field(default=None, max_length=63)
    tenant: str | None = Field(default=None, max_length=63)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = Field(default=None, ge=0)
    creation_timestamp: str | None = None
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _named(self) -> ObjectMeta:
        if self.name is None and self.generate_name is None:
            raise ValueError("name or generateName is required")
        if self.name is not None:
            check_dns_subdomain(self.name)
        return self


class TemplateMeta(Model):
    """Metadata of a ResourceClaimTemplate's claim: labels and annotations only."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
