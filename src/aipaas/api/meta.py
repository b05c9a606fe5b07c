"""The shape every object shares: apiVersion, kind, metadata, spec, status.

Who calls it: every kind module, the registry, the server and the SDK. Pure; imports pydantic.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

API_VERSION = "aipaas/v1"
NAME_MAX = 63
# Used with fullmatch only: ``$`` also matches before a final newline, and "tn\n" got through.
_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_KEY_RE = re.compile(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def check_name(value: str) -> str:
    """A DNS-1123 label: lower case letters, digits and '-', at most 63 characters."""
    if not value:
        raise ValueError("must not be empty")
    if len(value) > NAME_MAX:
        raise ValueError(f"must be at most {NAME_MAX} characters, got {len(value)}")
    if not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: use lower case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


Name = Annotated[str, AfterValidator(check_name)]


def _check_labels(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 64:
        raise ValueError("at most 64 entries")
    for key, item in value.items():
        if not _LABEL_KEY_RE.fullmatch(key):
            raise ValueError(f"invalid key {key!r}")
        if not _LABEL_VALUE_RE.fullmatch(item):
            raise ValueError(f"invalid value {item!r} for key {key!r}")
    return value


def _check_annotations(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 64:
        raise ValueError("at most 64 entries")
    for key, item in value.items():
        if not _LABEL_KEY_RE.fullmatch(key):
            raise ValueError(f"invalid key {key!r}")
        if len(item) > 4096:
            raise ValueError(f"value of {key!r} is longer than 4096 characters")
    return value


class Model(BaseModel):
    """Strict wire model: unknown fields are errors; camelCase on the wire."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        validate_default=True,
    )


class LenientModel(BaseModel):
    """For status blocks written by the controller: unknown fields are kept, not refused."""

    model_config = ConfigDict(
        extra="allow",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class ObjectMeta(Model):
    """Identity and bookkeeping; ``uid``, ``resourceVersion`` and timestamps are the server's."""

    name: Name
    tenant: Name | None = None
    uid: str | None = Field(default=None, max_length=64)
    resource_version: str | None = Field(default=None, max_length=32)
    generation: int | None = Field(default=None, ge=0)
    labels: Annotated[dict[str, str], AfterValidator(_check_labels)] = Field(default_factory=dict)
    annotations: Annotated[dict[str, str], AfterValidator(_check_annotations)] = Field(
        default_factory=dict
    )
    creation_timestamp: str | None = Field(default=None, max_length=64)


class Condition(LenientModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class Object(Model):
    """Base of every kind. ``namespaced`` kinds live in a tenant; others are cluster-wide."""

    namespaced: ClassVar[bool] = True
    plural: ClassVar[str] = ""

    api_version: Literal["aipaas/v1"] = "aipaas/v1"
    kind: str
    metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def tenant(self) -> str:
        """The tenant the object lives in; "" for cluster-wide kinds."""
        return (self.metadata.tenant or "") if self.namespaced else ""

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_wire_json(self) -> str:
        """``to_wire`` as JSON text, serialised by pydantic's core in one step."""
        return self.model_dump_json(by_alias=True, exclude_none=True)
