"""Tenant and User: who may use the platform, with what quota and which role."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from aipaas.api.meta import LenientModel, Model, Object
from aipaas.api.resources import Quota


class Role(StrEnum):
    PLATFORM_ADMIN = "platform-admin"
    TENANT_ADMIN = "tenant-admin"
    MEMBER = "member"
    VIEWER = "viewer"


class TenantSpec(Model):
    quota: Quota = Field(default_factory=Quota)
    display_name: str | None = Field(default=None, max_length=256)


class Tenant(Object):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "tenants"

    kind: Literal["Tenant"] = "Tenant"
    spec: TenantSpec = Field(default_factory=TenantSpec)
    status: LenientModel | None = None


class UserSpec(Model):
    role: Role = Role.MEMBER
    email: str | None = Field(default=None, max_length=256)


class User(Object):
    plural: ClassVar[str] = "users"

    kind: Literal["User"] = "User"
    spec: UserSpec = Field(default_factory=UserSpec)
    status: LenientModel | None = None
