"""Tenant and User: who may use the platform, with what quota and which role."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.priority import DEFAULT_ALLOWED, DEFAULT_CLASS
from aipaas.api.queue import (
    MAX_QUEUE_PRIORITY,
    MAX_WEIGHT,
    FairSharing,
    Guaranteed,
    check_guarantees,
)
from aipaas.api.resources import Quota


class Role(StrEnum):
    """What a user may do. Ranked platform-admin > tenant-admin > member > viewer; nobody acts
    on a user ranked above itself. A metrics-reader (a scraper's identity) may read /metrics
    and nothing else; like a platform admin it belongs to no tenant, and only platform admins
    manage it."""

    PLATFORM_ADMIN = "platform-admin"
    TENANT_ADMIN = "tenant-admin"
    MEMBER = "member"
    VIEWER = "viewer"
    METRICS_READER = "metrics-reader"

    @property
    def tenantless(self) -> bool:
        """Users of this role belong to no tenant (their User object has none)."""
        return self in (Role.PLATFORM_ADMIN, Role.METRICS_READER)


class TenantSpec(Model):
    quota: Quota = Field(default_factory=Quota)
    display_name: str | None = Field(default=None, max_length=256)
    # The tenant's share in fair share across tenants; its queues divide it (api/queue.py).
    weight: float = Field(default=1, ge=0, le=MAX_WEIGHT)
    # What the tenant can always reach (the queue tree's top level, api/queue.py), and its
    # order among tenants for capacity above guarantees (higher first).
    guaranteed: Guaranteed = Field(default_factory=Guaranteed)
    priority: int = Field(default=0, ge=-MAX_QUEUE_PRIORITY, le=MAX_QUEUE_PRIORITY, strict=True)
    # Fair share over time among tenants (decayed usage), as a queue's.
    fair_sharing: FairSharing | None = None
    # The priority classes its members may name (None: DEFAULT_ALLOWED), and what a job that
    # names none gets (always allowed).
    allowed_priority_classes: list[Name] | None = Field(default=None, max_length=64)
    default_priority_class: Name = DEFAULT_CLASS
    # Whether its jobs may name the GPUs they share by UUID or index (``gpu: {uuids: [...]}``,
    # HAMi's use-gpuuuid): the platform admin's choice, since a named GPU is a placement the
    # scheduler no longer makes.
    allow_gpu_selection: bool = Field(default=True, strict=True)

    @model_validator(mode="after")
    def _guarantees_within_quota(self) -> TenantSpec:
        check_guarantees("TenantSpec", (), self.guaranteed, self.quota)
        return self

    def allows_priority_class(self, name: str) -> bool:
        allowed = self.allowed_priority_classes
        return name == self.default_priority_class or name in (
            DEFAULT_ALLOWED if allowed is None else allowed
        )


class Tenant(Object):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "tenants"

    kind: Literal["Tenant"] = "Tenant"
    spec: TenantSpec = Field(default_factory=TenantSpec)
    status: LenientModel | None = None


class UserSpec(Model):
    role: Role = Role.MEMBER
    email: str | None = Field(default=None, max_length=256)
    #: the most the user's running jobs may hold at once inside the tenant (set by its
    #: tenant admin; an input of the batch session like queue quotas: Snapshot.users)
    quota: Quota | None = None


class User(Object):
    """A person or a robot. Platform admins and metrics readers are stored without a tenant
    (``metadata.tenant`` unset); every other role lives in exactly one tenant."""

    plural: ClassVar[str] = "users"

    kind: Literal["User"] = "User"
    spec: UserSpec = Field(default_factory=UserSpec)
    status: LenientModel | None = None
